// Week one's first bug: host code reads cudaMalloc memory. On a GPU: SIGSEGV.
#include <cuda_runtime.h>
#include <stdio.h>

int main(void)
{
    float *d;
    cudaMalloc(&d, 64 * sizeof(float));
    cudaMemset(d, 0, 64 * sizeof(float));
    printf("about to read\n");
    fflush(stdout);
    printf("read %f\n", d[3]);
    return 0;
}
