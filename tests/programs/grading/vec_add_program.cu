// A correct submission for the built-in vec_add_program assignment (tests/test_grade_programs.py):
// lecture 000's vecAdd, reading n and the seed from stdin.
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t err_ = (call);                                                     \
        if (err_ != cudaSuccess) {                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

__global__ void vecAddKernel(const float *A, const float *B, float *C, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i] = A[i] + B[i];
}

int main()
{
    int n;
    long long seed;
    if (scanf("%d %lld", &n, &seed) != 2) return 2;
    size_t bytes = (size_t)n * sizeof(float);
    float *A = (float *)malloc(bytes), *B = (float *)malloc(bytes), *C = (float *)malloc(bytes);
    long long s = seed % 1000;
    for (int i = 0; i < n; ++i) {
        A[i] = (float)((i + s) % 1000) / 4.0f;
        B[i] = (float)((3LL * i + 7 * s) % 1000) / 2.0f;
    }
    float *dA, *dB, *dC;
    CHECK(cudaMalloc(&dA, bytes));
    CHECK(cudaMalloc(&dB, bytes));
    CHECK(cudaMalloc(&dC, bytes));
    CHECK(cudaMemcpy(dA, A, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, B, bytes, cudaMemcpyHostToDevice));
    vecAddKernel<<<(n + 255) / 256, 256>>>(dA, dB, dC, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(C, dC, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) printf("%.2f\n", C[i]);
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    free(A);
    free(B);
    free(C);
    return 0;
}
