// asan_oob.cpp: built with -fsanitize=address only. A kernel writes one element past the end of
// a cudaMalloc'd buffer; AddressSanitizer must report a heap-buffer-overflow from inside the
// fiber that runs the CUDA thread. Argument "shared": overrun dynamic shared memory instead.
// Argument "clean": a correct barrier-heavy kernel that must run without any report.
#include "common.h"

#include <string>

__global__ void k_oob_write(float *out, int n)
{
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = s[63 - threadIdx.x];   // bug: i == n is one past the end
}

__global__ void k_oob_dynamic_shared(float *out, int n)
{
    TM_DYNAMIC_SHARED(float, buf);
    buf[threadIdx.x] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 0) buf[n] = 2.0f;   // bug: n floats were allocated
    out[threadIdx.x] = buf[threadIdx.x];
}

__global__ void k_clean(float *out, int n)
{
    __shared__ float s[64];
    float acc = 0;
    for (int r = 0; r < 20; ++r) {
        s[threadIdx.x] = (float)(threadIdx.x + r);
        __syncthreads();
        acc += s[(threadIdx.x + 1) % 64];
        __syncthreads();
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = acc;
}

int main(int argc, char **argv)
{
    std::string mode = argc > 1 ? argv[1] : "global";
    int n = 64 * 8;
    float *d = nullptr;
    if (cudaMalloc((void **)&d, n * sizeof(float)) != cudaSuccess) return 2;
    cudaError_t e;
    if (mode == "shared")
        e = tm_launch(k_oob_dynamic_shared, dim3(4), dim3(64), 64 * sizeof(float), d, 64);
    else if (mode == "clean")
        e = tm_launch(k_clean, dim3(8), dim3(64), 0, d, n);
    else
        e = tm_launch(k_oob_write, dim3(9), dim3(64), 0, d, n);
    printf("launch returned %s\n", cudaGetErrorName(e));
    cudaFree(d);
    return e == cudaSuccess ? 0 : 3;
}
