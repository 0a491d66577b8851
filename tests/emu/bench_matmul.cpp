// bench_matmul.cpp: the emulator's speed target. A TILE x TILE shared-memory tiled matmul at
// N^3 (N = 256 by default), checked against a CPU loop, timed with 1 and 2 worker threads and
// with blocks of 64 / 256 / 1024 threads (tiles 8, 16, 32).
// Usage: bench_matmul [N] [repeats]. Prints one line per configuration:
//   "tile T block B threads W: best S s (median M s), max |err| E"
// Exit status 1 when a result is wrong.
#include "common.h"

#include <algorithm>
#include <chrono>
#include <vector>

template <int TILE>
__global__ void matmul_tiled(const float *__restrict__ A, const float *__restrict__ B,
                             float *__restrict__ C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ak = t * TILE + threadIdx.x, bk = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[(size_t)row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[(size_t)bk * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}

template <int TILE>
static int run(int n, int reps, int threads, const std::vector<float> &hA,
               const std::vector<float> &hB, const std::vector<double> &ref)
{
    tm_emu_set_threads(threads);
    size_t bytes = (size_t)n * n * sizeof(float);
    float *A, *B, *C;
    if (cudaMalloc((void **)&A, bytes) || cudaMalloc((void **)&B, bytes) ||
        cudaMalloc((void **)&C, bytes))
        return 1;
    cudaMemcpy(A, hA.data(), bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(B, hB.data(), bytes, cudaMemcpyHostToDevice);
    dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    std::vector<double> times;
    cudaError_t err = tm_launch(matmul_tiled<TILE>, grid, block, 0, (const float *)A,
                                (const float *)B, C, n, n, n);
    for (int r = 0; r < reps && err == cudaSuccess; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        err = tm_launch(matmul_tiled<TILE>, grid, block, 0, (const float *)A, (const float *)B, C,
                        n, n, n);
        times.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (err != cudaSuccess) {
        printf("launch failed: %s %s\n", cudaGetErrorName(err), tm_emu_last_error_detail());
        return 1;
    }
    std::vector<float> hC((size_t)n * n);
    cudaMemcpy(hC.data(), C, bytes, cudaMemcpyDeviceToHost);
    double maxerr = 0;
    for (size_t i = 0; i < hC.size(); ++i)
        maxerr = std::max(maxerr, std::fabs(hC[i] - ref[i]));
    std::sort(times.begin(), times.end());
    printf("tile %2d block %4d threads %d: best %.4f s (median %.4f s), %.3f GFLOP/s, max |err| "
           "%.2e\n",
           TILE, TILE * TILE, threads, times[0], times[times.size() / 2],
           2.0 * n * n * n / times[0] * 1e-9, maxerr);
    fflush(stdout);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    return maxerr > 1e-3 * n ? 1 : 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 256;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    std::vector<float> A((size_t)n * n), B((size_t)n * n);
    unsigned s = 12345;
    for (auto &x : A)
        x = (float)((s = s * 1664525u + 1013904223u) >> 9) / (1u << 23) - 0.5f;
    for (auto &x : B)
        x = (float)((s = s * 1664525u + 1013904223u) >> 9) / (1u << 23) - 0.5f;
    std::vector<double> ref((size_t)n * n, 0.0);
    for (int i = 0; i < n; ++i)
        for (int k = 0; k < n; ++k) {
            double a = A[(size_t)i * n + k];
            for (int j = 0; j < n; ++j)
                ref[(size_t)i * n + j] += a * B[(size_t)k * n + j];
        }
    printf("N = %d, fiber switch: %s, stack %zu KiB\n", n, tm_emu_switch_kind(),
           tm_emu_stack_bytes() / 1024);
    int bad = 0;
    for (int threads : {1, 2}) {
        bad |= run<8>(n, reps, threads, A, B, ref);
        bad |= run<16>(n, reps, threads, A, B, ref);
        bad |= run<32>(n, reps, threads, A, B, ref);
    }
    return bad;
}
