// tests/test_program_check.py: the error-checking idioms of course code (helper_cuda's checkCudaErrors,
// gpuErrchk, auto, switch, !, assert, printf and iostream of an error) compile in check mode and a
// correct program gets no report; a kernel reaching its buffer through a plain pointer is fine.
#include <cstdio>
#include <cassert>
#include <iostream>
template <typename T>
void check(T result, char const *const func, const char *const file, int const line)
{
    if (result) {
        fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\" \n", file, line,
                static_cast<unsigned int>(result), cudaGetErrorName(result), func);
    }
}
#define checkCudaErrors(val) check((val), #val, __FILE__, __LINE__)
#define gpuErrchk(ans) { gpuAssert((ans), __FILE__, __LINE__); }
inline void gpuAssert(cudaError_t code, const char *file, int line)
{
    if (code != cudaSuccess) fprintf(stderr, "GPUassert: %s %s %d\n", cudaGetErrorString(code), file, line);
}
__device__ float twice(const float *x, int i) { return 2 * x[i]; }
__global__ void scale(float *__restrict__ out, const float *in, int n);
__global__ void scale(float *__restrict__ out, const float *in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float *o = &out[i];
        *o = twice(in, i);
        if (i == 0) printf("in[0] = %f, out[0] = %f\n", in[0], out[0]);
    }
}
template <typename T>
__global__ void fill(T *x, T v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
cudaError_t alloc(float **p, int n) { return cudaMalloc(p, n * sizeof(float)); }
int main()
{
    const int n = 300;
    float *d_in, *d_out, h[n];
    checkCudaErrors(alloc(&d_in, n));
    gpuErrchk(cudaMalloc(&d_out, n * sizeof(float)));
    auto err = cudaGetLastError();
    if (err != cudaSuccess) return 1;
    cudaError_t e;
    e = cudaMemset(d_out, 0, n * sizeof(float));
    if (cudaSuccess != e) return 1;
    fill<<<(n + 127) / 128, 128>>>(d_in, 1.5f, n);
    switch (cudaGetLastError()) {
    case cudaSuccess: break;
    default: return 1;
    }
    scale<<<(n + 127) / 128, 128>>>(d_out, d_in, n);
    int rc = cudaDeviceSynchronize();
    bool ok = !cudaMemcpy(h, d_out, n * sizeof(float), cudaMemcpyDeviceToHost);
    assert(cudaFree(d_in) == cudaSuccess);
    printf("rc %d ok %d h[299] = %.1f last %d\n", rc, ok, h[299], cudaGetLastError());
    std::cout << cudaGetErrorString(cudaFree(d_out)) << std::endl;
    return 0;
}
