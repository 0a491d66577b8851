// tf32x3_probe.cu: the tf32x3 rung's tuning variants (cuda/matmul_tf32x3.cu's template
// parameters: k-steps per FP32 promotion, compensated or plain addition)
// side by side with cuBLAS SGEMM, in one run: TFLOP/s at n^3 (median of CUDA-event timings after
// warm-up) and the normwise error max|C - AB| / max(|A||B|) against float64 on uniform [-1,1] and
// [0,1] inputs at K = 256 and 8192 (64 rows checked). The registry's choice is X3_* in the .cu.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -Icuda -Itiledmm/native -Icsrc \
//        benchmarks/tf32x3_probe.cu -lcublas -o /tmp/tf32x3_probe && /tmp/tf32x3_probe 8192
#include "../cuda/matmul_tf32x3.cu"
#include "probe_common.h"

#include <cublas_v2.h>

#include <cmath>
#include <random>

typedef void (*Kernel)(const float *, const float *, float *, int, int, int, unsigned);

struct Variant {
    const char *name;
    Kernel kernel;
};

#define X3_VARIANT(PROMOTE, KAHAN) \
    {"promote=" #PROMOTE " kahan=" #KAHAN, matmul_tf32x3_kernel<true, int, PROMOTE, KAHAN>}

static const Variant VARIANTS[] = {
    X3_VARIANT(1, false), X3_VARIANT(1, true), X3_VARIANT(2, true),
    X3_VARIANT(4, false), X3_VARIANT(4, true),
};

static void run_variant(Kernel k, const float *A, const float *B, float *C, int M, int N, int K)
{
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)X3_SHARED_BYTES));
    dim3 grid((N + X3_BN - 1) / X3_BN, (M + X3_BM - 1) / X3_BM);
    k<<<grid, X3_THREADS, X3_SHARED_BYTES>>>(A, B, C, M, N, K, 0);
    CK(cudaGetLastError());
}

static void run_sgemm(cublasHandle_t h, const float *A, const float *B, float *C, int M, int N,
                      int K)
{
    const float one = 1.0f, zero = 0.0f;   // row-major C = A B as column-major C^T = B^T A^T
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K, &zero, C, N);
}

template <typename Launch>
static double median_ms(Launch launch)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> ms;
    for (int i = 0; i < WARMUP + REPEAT; ++i) {
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (i >= WARMUP) ms.push_back(t);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return median(ms);
}

// max |C - AB| / max(|A||B|) over the first `rows` rows, in double.
static double normwise_error(const std::vector<float> &A, const std::vector<float> &B,
                             const std::vector<float> &C, int N, int K, int rows)
{
    double worst = 0, scale = 0;
    std::vector<double> exact(N), absolute(N);
    for (int i = 0; i < rows; ++i) {
        std::fill(exact.begin(), exact.end(), 0.0);
        std::fill(absolute.begin(), absolute.end(), 0.0);
        for (int k = 0; k < K; ++k) {
            const double a = A[(size_t)i * K + k];
            const float *b = &B[(size_t)k * N];
            for (int j = 0; j < N; ++j) {
                exact[j] += a * b[j];
                absolute[j] += std::fabs(a * b[j]);
            }
        }
        for (int j = 0; j < N; ++j) {
            worst = std::max(worst, std::fabs(C[(size_t)i * N + j] - exact[j]));
            scale = std::max(scale, absolute[j]);
        }
    }
    return worst / scale;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? std::atoi(argv[1]) : 8192;
    const int variants = sizeof VARIANTS / sizeof VARIANTS[0];
    cublasHandle_t handle;
    cublasCreate(&handle);
    std::mt19937 gen(47);

    // Errors: M = N = 512, K = 256 and 8192, inputs in [-1,1] and [0,1].
    std::printf("%-38s", "error (normwise)");
    const double lows[] = {-1.0, 0.0};
    const int ks[] = {256, 8192};
    for (double low : lows)
        for (int K : ks)
            std::printf(" [%g,1] K=%-5d", low, K);
    std::printf("\n");
    std::vector<std::vector<double>> errors(variants + 1);
    for (double low : lows)
        for (int K : ks) {
            const int M = 512, N = 512;
            std::uniform_real_distribution<float> dist((float)low, 1.0f);
            std::vector<float> A((size_t)M * K), B((size_t)K * N), C((size_t)M * N);
            for (float &x : A)
                x = dist(gen);
            for (float &x : B)
                x = dist(gen);
            float *dA, *dB, *dC;
            CK(cudaMalloc(&dA, A.size() * 4));
            CK(cudaMalloc(&dB, B.size() * 4));
            CK(cudaMalloc(&dC, C.size() * 4));
            CK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice));
            for (int v = 0; v <= variants; ++v) {
                if (v < variants)
                    run_variant(VARIANTS[v].kernel, dA, dB, dC, M, N, K);
                else
                    run_sgemm(handle, dA, dB, dC, M, N, K);
                CK(cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost));
                errors[v].push_back(normwise_error(A, B, C, N, K, 64));
            }
            CK(cudaFree(dA));
            CK(cudaFree(dB));
            CK(cudaFree(dC));
        }

    // Speed at n^3.
    float *dA, *dB, *dC;
    const size_t bytes = (size_t)n * n * 4;
    CK(cudaMalloc(&dA, bytes));
    CK(cudaMalloc(&dB, bytes));
    CK(cudaMalloc(&dC, bytes));
    {
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        std::vector<float> h((size_t)n * n);
        for (float &x : h)
            x = dist(gen);
        CK(cudaMemcpy(dA, h.data(), bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dB, h.data(), bytes, cudaMemcpyHostToDevice));
    }
    const double flop = 2.0 * n * (double)n * n;
    const double sgemm_ms = median_ms([&] { run_sgemm(handle, dA, dB, dC, n, n, n); });
    for (int v = 0; v <= variants; ++v) {
        const double ms =
            v < variants ? median_ms([&] { run_variant(VARIANTS[v].kernel, dA, dB, dC, n, n, n); })
                         : sgemm_ms;
        std::printf("%-38s", v < variants ? VARIANTS[v].name : "cuBLAS SGEMM");
        for (double e : errors[v])
            std::printf(" %14.2e", e);
        std::printf("   %d^3 %8.3f ms %6.1f TFLOP/s %4.0f%% cuBLAS\n", n, ms, flop / ms / 1e9,
                    100.0 * sgemm_ms / ms);
    }
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dC));
    cublasDestroy(handle);
    return 0;
}
