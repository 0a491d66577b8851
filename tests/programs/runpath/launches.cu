// Launches where nvcc finds them (issue 44): inside a macro's argument, in a header of the
// program's own, with default arguments left out, a template kernel; prints every element.
#include <cstdio>
#include "launches.cuh"

#define CHECKED(call)                                                      \
    do {                                                                   \
        call;                                                              \
        cudaError_t e = cudaGetLastError();                                \
        if (e != cudaSuccess) printf("error %s\n", cudaGetErrorString(e)); \
    } while (0)

__global__ void fill(int *out, int n, int base, int step = 2)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = base + step * i;
}

int main()
{
    const int n = 40;
    int *d, h[n];
    cudaMalloc(&d, n * sizeof(int));
    CHECKED((fill<<<2, 32, 0>>>(d, n, 100)));
    launch_from_header(d, n);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++) printf("%d\n", h[i]);
    cudaFree(d);
    return 0;
}
