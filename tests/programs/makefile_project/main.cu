// Reads n from argv, fills x[i] = i and y[i] = 1, computes y = SCALE * x + y on the device and
// prints the sum of y.
#include <cstdio>
#include <cstdlib>
#include "saxpy.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    float *x, *y;
    cudaMallocManaged(&x, n * sizeof(float));
    cudaMallocManaged(&y, n * sizeof(float));
    for (int i = 0; i < n; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    saxpy(n, SCALE, x, y);
    cudaDeviceSynchronize();
    double sum = 0;
    for (int i = 0; i < n; i++) sum += y[i];
    printf("sum %.1f\n", sum);
    cudaFree(x);
    cudaFree(y);
    return 0;
}
