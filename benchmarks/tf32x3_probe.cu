// tf32x3_probe.cu: the tf32x3 rung's tuning variants (cuda/matmul_tf32x3.cu's template
// parameters: k-steps (mma.sync) or k-tiles (wgmma) per FP32 promotion, compensated or plain
// addition; the wgmma kernel's rows need compute capability 9.0 and the sm_90a build below)
// side by side with cuBLAS in one run: SGEMM, TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) and FP16 inputs
// with FP32 accumulation (the wmma rung's reference; inputs converted before timing): TFLOP/s at
// n^3 (A and B distinct; the median of CUDA-event timings after warm-up, in each of two passes
// over the rows) and the normwise error max|C - AB| / max(|A||B|)
// against float64 on uniform [-1,1] and [0,1] inputs at K = 256 and 8192 (64 rows checked), and
// the largest error over odd shapes (M, N, K not multiples of the tiles; one where the wgmma
// launcher's whole tiles meet its split tail). The registry's choice is X3_* and W3_* in the .cu.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Icuda -Itiledmm/native -Icsrc \
//        benchmarks/tf32x3_probe.cu -lcublas -o /tmp/tf32x3_probe && /tmp/tf32x3_probe 8192
//   /tmp/tf32x3_probe N [TEXT]: speed at N^3 (0: errors only) of the rows whose names contain TEXT
#include "../cuda/matmul_tf32x3.cu"
#include "probe_common.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <cmath>
#include <random>

typedef void (*Kernel)(const float *, const float *, float *, int, int, int, unsigned);
typedef int (*Launcher)(const tm_problem *, tm_launch_facts *);

// A kernel launched here on its plain grid, or a launcher (the registry's way: launch_tf32x3_wgmma
// and its split-K tail, which `one_sm` turns off by saying the GPU has one multiprocessor).
struct Variant {
    const char *name;
    Kernel kernel;
    Launcher launch;
    bool one_sm;
    bool wgmma;   // a wgmma kernel: W3_ tiles and threads, compute capability 9.0
    size_t shared;   // dynamic shared memory (kernel rows)
};

#define X3_VARIANT(PROMOTE, KAHAN)                    \
    {"mma.sync promote=" #PROMOTE " kahan=" #KAHAN,   \
     matmul_tf32x3_kernel<true, int, PROMOTE, KAHAN>, \
     nullptr,                                         \
     false,                                           \
     false,                                           \
     X3_SHARED_BYTES}
#define W3_VARIANT(SUM, LEAVE_OUT)                          \
    {"wgmma " #SUM " " #LEAVE_OUT,                          \
     matmul_tf32x3_wgmma_kernel<true, int, SUM, LEAVE_OUT>, \
     nullptr,                                               \
     false,                                                 \
     true,                                                  \
     W3_SHARED_BYTES}
#define W3R_VARIANT(LEAVE_OUT, ONE_SM, NOTE)    \
    {"wgmma A in registers " #LEAVE_OUT NOTE,   \
     nullptr,                                   \
     launch_tf32x3_wgmma<true, int, LEAVE_OUT>, \
     ONE_SM,                                    \
     true,                                      \
     0}

// The W3_NO_* rows time the wgmma kernels' parts (their errors are meaningless).
static const Variant VARIANTS[] = {
    X3_VARIANT(4, true),
    W3_VARIANT(W3_TWO_LEVEL, W3_ALL),
    W3R_VARIANT(W3_ALL, false, ""),
    W3R_VARIANT(W3_ALL, true, ", no split tail"),
    W3R_VARIANT(W3_NO_DATA, true, ", no split tail"),
    W3R_VARIANT(W3_NO_PRODUCTS, true, ", no split tail"),
};
static const int N_VARIANTS = sizeof VARIANTS / sizeof VARIANTS[0];
static bool g_sm90 = false;   // compute capability 9.0: the wgmma rows run
static int g_sm_count = 0;   // the GPU's multiprocessors, for the launchers' tail
static const char *CUBLAS_ROWS[] = {"cuBLAS SGEMM", "cuBLAS TF32", "cuBLAS FP16 in, FP32 acc."};
static const int N_ROWS = N_VARIANTS + 3;

// A problem's device operands: A and B in FP32 and in FP16 (for the FP16 row), C.
struct Operands {
    float *A, *B, *C;
    half *Ah, *Bh;
    int M, N, K;
};

__global__ void to_half(const float *x, half *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2half(x[i]);
}

static Operands make_operands(const std::vector<float> &A, const std::vector<float> &B, int M,
                              int N, int K)
{
    Operands o{nullptr, nullptr, nullptr, nullptr, nullptr, M, N, K};
    CK(cudaMalloc(&o.A, A.size() * 4));
    CK(cudaMalloc(&o.B, B.size() * 4));
    CK(cudaMalloc(&o.C, (size_t)M * N * 4));
    CK(cudaMalloc(&o.Ah, A.size() * 2));
    CK(cudaMalloc(&o.Bh, B.size() * 2));
    CK(cudaMemcpy(o.A, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(o.B, B.data(), B.size() * 4, cudaMemcpyHostToDevice));
    to_half<<<1024, 256>>>(o.A, o.Ah, A.size());
    to_half<<<1024, 256>>>(o.B, o.Bh, B.size());
    CK(cudaDeviceSynchronize());
    return o;
}

static void free_operands(Operands &o)
{
    CK(cudaFree(o.A));
    CK(cudaFree(o.B));
    CK(cudaFree(o.C));
    CK(cudaFree(o.Ah));
    CK(cudaFree(o.Bh));
}

static const char *row_name(int row)
{
    return row < N_VARIANTS ? VARIANTS[row].name : CUBLAS_ROWS[row - N_VARIANTS];
}

static const char *g_only = nullptr;   // the rows whose names contain it (all: null)

static bool selected(int row)
{
    return !g_only || std::strstr(row_name(row), g_only);
}

// Row `row`: a tf32x3 variant, then cuBLAS SGEMM, TF32, FP16 (row-major C = A B as column-major
// C^T = B^T A^T).
static void run_row(int row, cublasHandle_t h, const Operands &o)
{
    if (!selected(row)) return;
    if (row < N_VARIANTS) {
        const Variant &v = VARIANTS[row];
        if (v.wgmma && !g_sm90) return;
        if (v.launch) {
            tm_problem p;
            std::memset(&p, 0, sizeof p);
            p.dtype = TM_F32;
            p.M = o.M;
            p.N = o.N;
            p.K = o.K;
            p.in0 = o.A;
            p.in1 = o.B;
            p.out = o.C;
            p.sm_count = v.one_sm ? 1 : g_sm_count;
            tm_launch_facts facts;
            CK((cudaError_t)v.launch(&p, &facts));
            CK(cudaGetLastError());
            return;
        }
        const size_t shared = v.shared;
        const int bm = v.wgmma ? W3_BM : X3_BM, bn = v.wgmma ? W3_BN : X3_BN;
        CK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)shared));
        dim3 grid((o.N + bn - 1) / bn, (o.M + bm - 1) / bm);
        v.kernel<<<grid, v.wgmma ? W3_THREADS : X3_THREADS, shared>>>(o.A, o.B, o.C, o.M, o.N, o.K,
                                                                      0);
        CK(cudaGetLastError());
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    const int which = row - N_VARIANTS;
    const bool fp16 = which == 2;
    const cublasComputeType_t compute =
        which == 1 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cudaDataType_t in = fp16 ? CUDA_R_16F : CUDA_R_32F;
    const cublasStatus_t st =
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, o.N, o.M, o.K, &one,
                     fp16 ? (const void *)o.Bh : o.B, in, o.N, fp16 ? (const void *)o.Ah : o.A, in,
                     o.K, &zero, o.C, CUDA_R_32F, o.N, compute, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "cublasGemmEx (%s): status %d\n", CUBLAS_ROWS[which], (int)st);
        std::exit(1);
    }
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

// max |C - AB| / max(|A||B|) over rows [first, end), in double.
static double normwise_error(const std::vector<float> &A, const std::vector<float> &B,
                             const std::vector<float> &C, int N, int K, int first, int end)
{
    double worst = 0, scale = 0;
    std::vector<double> exact(N), absolute(N);
    for (int i = first; i < end; ++i) {
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

static std::vector<float> uniform(std::mt19937 &gen, float low, size_t n)
{
    std::uniform_real_distribution<float> dist(low, 1.0f);
    std::vector<float> v(n);
    for (float &x : v)
        x = dist(gen);
    return v;
}

#define CKB(call)                                                                                \
    do {                                                                                         \
        const cublasStatus_t st_ = (call);                                                       \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                      \
            std::fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #call, (int)st_); \
            std::exit(1);                                                                        \
        }                                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    const int n = argc > 1 ? std::atoi(argv[1]) : 8192;
    g_only = argc > 2 ? argv[2] : nullptr;
    int device = 0, major = 0, minor = 0;
    CK(cudaGetDevice(&device));
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    g_sm90 = major == 9 && minor == 0;
    CK(cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, device));
    cublasHandle_t handle;
    CKB(cublasCreate(&handle));
    std::mt19937 gen(47);

    // Errors: M = N = 512, K = 256 and 8192, inputs in [-1,1] and [0,1]; then every row of an odd
    // shape (not multiples of the tiles: the bounds checks).
    std::printf("%-50s", "error (normwise)");
    const float lows[] = {-1.0f, 0.0f};
    const int ks[] = {256, 8192};
    for (float low : lows)
        for (int K : ks)
            std::printf(" [%g,1] K=%-5d", low, K);
    std::printf("  300x260x1004 1100x1948x1004\n");
    std::vector<std::vector<double>> errors(N_ROWS);
    for (float low : lows)
        for (int K : ks) {
            const int M = 512, N = 512;
            const std::vector<float> A = uniform(gen, low, (size_t)M * K),
                                     B = uniform(gen, low, (size_t)K * N);
            std::vector<float> C((size_t)M * N);
            Operands o = make_operands(A, B, M, N, K);
            for (int row = 0; row < N_ROWS; ++row) {
                run_row(row, handle, o);
                CK(cudaMemcpy(C.data(), o.C, C.size() * 4, cudaMemcpyDeviceToHost));
                errors[row].push_back(normwise_error(A, B, C, N, K, 0, 64));
            }
            free_operands(o);
        }
    // Odd shapes, C poisoned with NaN first (an element not written shows): 300 x 260 x 1004, all
    // rows; 1100 x 1948 x 1004, 144 tiles (the launchers on 132 multiprocessors: 132 tiles whole,
    // the last 12 split across clusters), the last 100 rows, where the two meet.
    const int odd[2][4] = {{300, 260, 1004, 0}, {1100, 1948, 1004, 1000}};   // M, N, K, first row
    for (const int *shape : odd) {
        const int M = shape[0], N = shape[1], K = shape[2];
        const std::vector<float> A = uniform(gen, -1.0f, (size_t)M * K),
                                 B = uniform(gen, -1.0f, (size_t)K * N);
        std::vector<float> C((size_t)M * N);
        Operands o = make_operands(A, B, M, N, K);
        for (int row = 0; row < N_ROWS; ++row) {
            CK(cudaMemset(o.C, 0xff, C.size() * 4));
            run_row(row, handle, o);
            CK(cudaMemcpy(C.data(), o.C, C.size() * 4, cudaMemcpyDeviceToHost));
            errors[row].push_back(normwise_error(A, B, C, N, K, shape[3], M));
        }
        free_operands(o);
    }

    // Speed at n^3 (n = 0: none, errors only, e.g. under compute-sanitizer), each row against
    // SGEMM (row N_VARIANTS): two passes over the rows, to show the runs' noise.
    std::vector<double> ms[2] = {std::vector<double>(N_ROWS), std::vector<double>(N_ROWS)};
    const double flop = 2.0 * n * (double)n * n;
    if (n > 0) {
        const std::vector<float> a = uniform(gen, -1.0f, (size_t)n * n),
                                 b = uniform(gen, -1.0f, (size_t)n * n);
        Operands o = make_operands(a, b, n, n, n);
        for (int pass = 0; pass < 2; ++pass)
            for (int row = 0; row < N_ROWS; ++row)
                ms[pass][row] = median_ms([&] { run_row(row, handle, o); });
        free_operands(o);
    }
    for (int row = 0; row < N_ROWS; ++row) {
        std::printf("%-50s", row_name(row));
        if (row < N_VARIANTS && VARIANTS[row].wgmma && !g_sm90) {
            std::printf("   (needs compute capability 9.0)\n");
            continue;
        }
        if (!selected(row)) {
            std::printf("   (not selected)\n");
            continue;
        }
        for (double e : errors[row])
            std::printf(" %14.2e", e);
        if (n > 0)
            std::printf("   %d^3 %8.3f / %8.3f ms %6.1f TFLOP/s %4.1f%% cuBLAS SGEMM", n,
                        ms[0][row], ms[1][row], flop / ms[0][row] / 1e9,
                        100.0 * ms[0][N_VARIANTS] / ms[0][row]);
        std::printf("\n");
    }
    CKB(cublasDestroy(handle));
    return 0;
}
