// lecture: 001_b0bed8cdb5b583cc.txt:306-320 and 381-399 (CMU 15-418, "Idea1: Use Kernel end as
//  a barrier" and "Idea2.2: ... across blocks using kernels")
// fixes: every `d <= 1` (a comparison that does nothing: the loops never end) is `d <<= 1`;
//  gridDim and blockDim in the host loops are the host's own variables; the length is a power
//  of two (the listings' `length/depth` arithmetic assumes one); a main that fills A with
//  1..length, runs both host loops and prints A[0], which is the sum.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void reduce_1(float * A, int length,
                        int d) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if(i < length && i % (d << 1) == 0) {
        A[i] += A[i+d];
    }
}

__global__ void reduce_2_2(float * A, int length,
                          int depth) {
    int iters = min(blockDim.x, length/depth);
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    for (int d = 1; d < iters; d <<= 1) {
        if(i < length/depth && i % (2*d) == 0) {
            int idx = i*depth;
            A[idx] += A[(i+d)*depth];
        }
        __syncthreads();
    }
}

int main(int argc, char **argv)
{
    int length = argc > 1 ? atoi(argv[1]) : 1 << 12;
    size_t bytes = sizeof(float) * length;
    float *h = (float *)malloc(bytes);
    for (int i = 0; i < length; ++i) h[i] = (float)(i + 1);
    float *A;
    cudaMalloc((void **)&A, bytes);

    // Idea 1: one launch per level
    cudaMemcpy(A, h, bytes, cudaMemcpyHostToDevice);
    int blockDim = 256, gridDim = (length + blockDim - 1) / blockDim;
    int launches = 0;
    for (int d=1; d < length; d <<= 1) {
        reduce_1 <<<gridDim,blockDim>>>(A,length,d);
        ++launches;
    }
    float sum;
    cudaMemcpy(&sum, A, sizeof(float), cudaMemcpyDeviceToHost);
    printf("reduce_1: %d launches, sum %.0f\n", launches, sum);

    // Idea 2.2: levels within a block, blocks by kernels
    cudaMemcpy(A, h, bytes, cudaMemcpyHostToDevice);
    launches = 0;
    for (int d=1; d < length; d *= blockDim) {
        reduce_2_2 <<<gridDim,blockDim>>>(A,length,d);
        ++launches;
    }
    cudaMemcpy(&sum, A, sizeof(float), cudaMemcpyDeviceToHost);
    printf("reduce_2_2: %d launches, sum %.0f\n", launches, sum);
    cudaFree(A);
    free(h);
    return 0;
}
