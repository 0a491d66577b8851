// wmma_emu_rate.cu: the emulator's tensor-core speed (issue 47), as a whole program so that its
// own process's CPU time is what is measured:
//   1. one warp issues `calls` mma_sync on m16n16k16 fragments (__half inputs, float
//      accumulator fed back): CPU microseconds a call;
//   2. a GEMM in the structure of NVIDIA's cudaTensorCoreGemm (written here, not copied): a
//      block of 8 warps computes a 128 x 128 tile of C, each warp a 32 x 64 piece as 2 x 4
//      accumulator fragments; A (row-major) and B (column-major) staged through shared memory
//      K-chunk by K-chunk; per 16-wide k-step each warp loads 2 A and 4 B fragments and issues
//      8 mma_sync. At n^3 (default 1024), spot-checked against a double-precision product, and
//      extrapolated to cudaTensorCoreGemm's default 4096^3 by the cube of the size.
//
//   TILEDMM_EMU_THREADS=1 python -m tiledmm run benchmarks/wmma_emu_rate.cu --backend emu \
//       --timeout 3000 -- [calls=20000] [n=1024]
// (CPU seconds count every OS thread; a 4096^3 run on T threads takes about CPU / T seconds.)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

#define BLOCK_TILE 128
#define CHUNK_K 4   // 16-wide k-steps per shared chunk (the sample: 8, in dynamic shared memory)
#define SKEW 8   // halves of padding per shared row, against bank conflicts
#define LD (CHUNK_K * 16 + SKEW)

__global__ void mma_rate(const __half *A, const __half *B, float *C, int calls)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(a, A, 16);
    wmma::load_matrix_sync(b, B, 16);
    wmma::fill_fragment(acc, 0.0f);
    for (int i = 0; i < calls; ++i)
        wmma::mma_sync(acc, a, b, acc);
    wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);
}

__global__ void tc_gemm(const __half *A, const __half *Bt, float *C, int n)
{
    __shared__ __align__(32) __half As[BLOCK_TILE][LD];
    __shared__ __align__(32) __half Bs[BLOCK_TILE][LD];   // Bs[column][k]
    // A warp operation written out keeps this kernel on fibers: the emulator's barrier split
    // does not yet know that wmma's loads, stores and mma_sync are warp-collective.
    __syncwarp();
    const int warp = threadIdx.x / 32;
    const int row0 = blockIdx.y * BLOCK_TILE, col0 = blockIdx.x * BLOCK_TILE;
    const int wr = (warp / 2) * 32, wc = (warp % 2) * 64;   // the warp's 32 x 64 piece
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j)
            wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < n; k0 += CHUNK_K * 16) {
        for (int e = threadIdx.x; e < BLOCK_TILE * CHUNK_K * 16; e += blockDim.x) {
            const int r = e / (CHUNK_K * 16), c = e % (CHUNK_K * 16);
            As[r][c] = A[(size_t)(row0 + r) * n + k0 + c];
            Bs[r][c] = Bt[(size_t)(col0 + r) * n + k0 + c];
        }
        __syncthreads();
        for (int kk = 0; kk < CHUNK_K; ++kk) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[4];
            for (int i = 0; i < 2; ++i)
                wmma::load_matrix_sync(a[i], &As[wr + 16 * i][kk * 16], LD);
            for (int j = 0; j < 4; ++j)
                wmma::load_matrix_sync(b[j], &Bs[wc + 16 * j][kk * 16], LD);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 4; ++j)
                    wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j)
            wmma::store_matrix_sync(&C[(size_t)(row0 + wr + 16 * i) * n + col0 + wc + 16 * j],
                                    acc[i][j], n, wmma::mem_row_major);
}

static double cpu_seconds()
{
    return (double)clock() / CLOCKS_PER_SEC;
}

static double wall_seconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static std::vector<__half> random_halves(size_t count, unsigned seed)
{
    std::vector<__half> v(count);
    srand(seed);
    for (auto &x : v)
        x = __float2half((float)rand() / RAND_MAX * 2.0f - 1.0f);
    return v;
}

int main(int argc, char **argv)
{
    const int calls = argc > 1 ? atoi(argv[1]) : 20000;
    const int n = argc > 2 ? atoi(argv[2]) : 1024;
    if (calls < 1 || n < BLOCK_TILE || n % BLOCK_TILE) {
        fprintf(stderr, "usage: wmma_emu_rate [calls >= 1] [n, a multiple of %d]\n", BLOCK_TILE);
        return 2;
    }
    std::vector<__half> hA = random_halves((size_t)n * n, 1), hB = random_halves((size_t)n * n, 2);
    __half *dA, *dB;
    float *dC;
    cudaMalloc(&dA, sizeof(__half) * n * n);
    cudaMalloc(&dB, sizeof(__half) * n * n);
    cudaMalloc(&dC, sizeof(float) * n * n);
    cudaMemcpy(dA, hA.data(), sizeof(__half) * n * n, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, hB.data(), sizeof(__half) * n * n, cudaMemcpyHostToDevice);

    double c0 = cpu_seconds();
    mma_rate<<<1, 32>>>(dA, dB, dC, calls);
    cudaDeviceSynchronize();
    const double rate_us = (cpu_seconds() - c0) * 1e6 / calls;
    printf("mma_sync m16n16k16 f16->f32, one warp: %.2f us CPU a call (%.0f calls/s), %d calls\n",
           rate_us, 1e6 / rate_us, calls);

    c0 = cpu_seconds();
    const double w0 = wall_seconds();
    const dim3 grid(n / BLOCK_TILE, n / BLOCK_TILE);
    tc_gemm<<<grid, 256>>>(dA, dB, dC, n);
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    const double cpu = cpu_seconds() - c0, wall = wall_seconds() - w0;
    if (err != cudaSuccess) {
        fprintf(stderr, "tc_gemm: %s\n", cudaGetErrorString(err));
        return 1;
    }
    std::vector<float> hC((size_t)n * n);
    cudaMemcpy(hC.data(), dC, sizeof(float) * n * n, cudaMemcpyDeviceToHost);
    double worst = 0.0;   // 64 spot checks against the double product, relative to sum |a b|
    for (int s = 0; s < 64; ++s) {
        const int r = (s * 7919) % n, c = (s * 104729) % n;
        double exact = 0.0, scale = 0.0;
        for (int k = 0; k < n; ++k) {
            const double p =
                (double)__half2float(hA[(size_t)r * n + k]) * __half2float(hB[(size_t)c * n + k]);
            exact += p;
            scale += std::fabs(p);
        }
        worst = std::fmax(worst, std::fabs(hC[(size_t)r * n + c] - exact) / scale);
    }
    const double mmas = (double)n * n * n / 4096.0, scale4096 = std::pow(4096.0 / n, 3);
    printf("tc_gemm %d^3: %.1f s CPU, %.1f s wall, %.2f us CPU per mma_sync (%.0f calls); "
           "worst error / sum|ab| %.1e\n",
           n, cpu, wall, cpu * 1e6 / mmas, mmas, worst);
    printf("projected 4096^3 (cudaTensorCoreGemm's default): %.0f s CPU, %.0f s on 2 free cores\n",
           cpu * scale4096, cpu * scale4096 / 2);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    return worst < 1e-3 ? 0 : 1;
}
