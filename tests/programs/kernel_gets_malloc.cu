// Week one's second bug: a kernel given malloc memory. On a GPU (no HMM): an illegal memory
// access at the next synchronising call, sticky afterwards.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void fill(float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 1.0f;
}

int main(void)
{
    const int n = 256;
    float *y = (float *)malloc(n * sizeof(float));
    fill<<<1, n>>>(y, n);
    cudaError_t launch = cudaGetLastError();
    printf("launch: %s\n", cudaGetErrorString(launch));
    cudaError_t sync = cudaDeviceSynchronize();
    printf("sync: %s (%s)\n", cudaGetErrorName(sync), cudaGetErrorString(sync));
    float *d;
    cudaError_t after = cudaMalloc(&d, 16);
    printf("after: %s\n", cudaGetErrorName(after));
    free(y);
    return sync == cudaSuccess ? 0 : 1;
}
