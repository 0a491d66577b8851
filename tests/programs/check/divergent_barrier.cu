#include <cstdio>
__global__ void k(float *x)
{
    if (threadIdx.x < 16) {
        __syncthreads();
    }
    x[threadIdx.x] = 1.0f;
}
int main()
{
    float *d;
    cudaMalloc(&d, 32 * sizeof(float));
    k<<<1, 32>>>(d);
    cudaError_t e = cudaDeviceSynchronize();
    printf("%s\n", cudaGetErrorName(e));
    cudaFree(d);
    return 0;
}
