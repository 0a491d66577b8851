// lecture: 001_b0bed8cdb5b583cc.txt:158-200 (CMU 15-418, "CUDA example 2: Memory Management",
//  example2/main.cu)
// fixes: the slides' gpuErrChk() and gpuCheckErr() are one macro, written here as courses
//  write it (it checks cudaGetLastError after each call); the missing `;` after the first
//  cudaMemcpy added; the kernel (not shown) is a vector add; the steps' code joined in a main.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define gpuErrChk()                                                              \
    do {                                                                         \
        cudaError_t err_ = cudaGetLastError();                                   \
        if (err_ != cudaSuccess) {                                               \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(err_), \
                    __FILE__, __LINE__);                                         \
            exit(1);                                                             \
        }                                                                        \
    } while (0)
#define gpuCheckErr() gpuErrChk()

__global__ void vecAdd(const float *a, const float *b, float *res, int length)
{
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < length) res[i] = a[i] + b[i];
}

int main(int argc, char **argv)
{
    int length = argc > 1 ? atoi(argv[1]) : 1 << 16;
    // 1. Allocate Memory on CPU
    float* vec1_host = (float*) malloc(sizeof(float) * length);
    float* vec2_host = (float*) malloc(sizeof(float) * length);
    float* res_host = (float*) malloc(sizeof(float) * length);
    // 2. Initialize Inputs
    for (int i = 0; i < length; ++i) {
        vec1_host[i] = (float)(i % 1000);
        vec2_host[i] = (float)(2 * (i % 500));
    }
    // 3. Allocate Memory on GPU
    float * vec1_device = nullptr;
    cudaMalloc((void **)&vec1_device, sizeof(float)*length);
    gpuErrChk();
    float * vec2_device = nullptr;
    cudaMalloc((void **)&vec2_device, sizeof(float)*length);
    gpuErrChk();
    float * res_device = nullptr;
    cudaMalloc((void **)&res_device, sizeof(float)*length);
    gpuErrChk();
    // 4. Copy Inputs from CPU to GPU
    cudaMemcpy(vec1_device, vec1_host, sizeof(float)*length, cudaMemcpyHostToDevice);
    gpuErrChk();
    cudaMemcpy(vec2_device, vec2_host, sizeof(float)*length, cudaMemcpyHostToDevice);
    gpuErrChk();
    // 4. Launch Kernel
    vecAdd<<<(length + 255) / 256, 256>>>(vec1_device, vec2_device, res_device, length);
    gpuErrChk();
    // 5. Copy Result from GPU to CPU
    cudaMemcpy(res_host, res_device, sizeof(float)*length, cudaMemcpyDeviceToHost);
    gpuCheckErr();
    // 6. Free Memory on GPU
    cudaFree(vec1_device);
    cudaFree(vec2_device);
    cudaFree(res_device);
    double sum = 0;
    for (int i = 0; i < length; ++i) sum += res_host[i];
    printf("length %d, sum %.1f\n", length, sum);
    free(vec1_host); free(vec2_host); free(res_host);
    return 0;
}
