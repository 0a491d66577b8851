"""The emulator's tensor-core speed (issue 47): how many mma_sync a second one CPU core runs, and
what that makes of NVIDIA's cudaTensorCoreGemm, whose default problem is 4096^3.

1. The micro-benchmark: one warp issues `--calls` mma_sync on m16n16k16 fragments, __half inputs,
   float accumulator (the accumulator fed back, inputs fixed): microseconds per call.
2. A GEMM in cudaTensorCoreGemm's structure (a block of 8 warps computes a 128 x 128 tile of C;
   each warp a 32 x 64 piece, 2 x 4 accumulator fragments; A row-major and B column-major
   staged through shared memory K-chunk by K-chunk; per chunk and k-step each warp loads 2 A
   and 4 B fragments and issues 8 mma_sync), written here, not copied: at `--n`^3, checked
   against NumPy, then extrapolated to 4096^3 by the count of mma_sync (n^3 / 4096) at the
   measured time per call of the whole kernel, on `--threads` OS threads.

    TILEDMM_EMU_THREADS=1 python benchmarks/wmma_emu_rate.py [--calls 20000] [--n 1024]
"""
import argparse
import os
import time

import numpy as np

import tiledmm as tm

RATE = r"""
#include <mma.h>
using namespace nvcuda;
__global__ void mma_rate(const unsigned short *A16, const unsigned short *B16, float *C, int calls)
{
    const __half *A = reinterpret_cast<const __half *>(A16), *B = reinterpret_cast<const __half *>(B16);
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
"""

# cudaTensorCoreGemm's compute_gemm, in outline: 8 warps, a 128 x 128 block tile, K in chunks of
# CHUNK_K 16-wide k-steps (4 here, so that A's and B's chunks fit 48 KiB of static shared memory;
# the sample uses 8 and dynamic shared memory), rows padded by SKEW halves against bank conflicts.
GEMM = r"""
#include <mma.h>
using namespace nvcuda;
#define BLOCK_TILE 128
#define CHUNK_K 4
#define SKEW 8
#define LD (CHUNK_K * 16 + SKEW)
__global__ void tc_gemm(const unsigned short *A16, const unsigned short *B16, float *C, int n)
{
    const __half *A = reinterpret_cast<const __half *>(A16), *B = reinterpret_cast<const __half *>(B16);
    __shared__ __align__(32) __half As[BLOCK_TILE][LD];
    __shared__ __align__(32) __half Bs[BLOCK_TILE][LD];   // B column-major: Bs[col][k]
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
            Bs[r][c] = B[(size_t)(col0 + r) * n + k0 + c];
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
"""


def _halves(rng, shape):
    """Random FP16 values in [-1, 1) (the kernels take their bits as unsigned short *)."""
    return rng.uniform(-1, 1, shape).astype(np.float16)


def rate(calls):
    kernel = tm.compile(RATE, backend="emu")
    rng = np.random.default_rng(47)
    A, B = _halves(rng, (16, 16)), _halves(rng, (16, 16))
    C = np.zeros((16, 16), np.float32)
    kernel((1,), (32,), A.view(np.uint16).ravel(), B.view(np.uint16).ravel(), C.ravel(), calls, warmup=0, repeat=1,
           timeout=None)                                                          # compile, warm
    t0 = time.process_time()
    res = kernel((1,), (32,), A.view(np.uint16).ravel(), B.view(np.uint16).ravel(), C.ravel(), calls, warmup=0,
                 repeat=3, timeout=None)
    us = res.timing.kernel_ms * 1e3 / calls
    print(f"mma_sync m16n16k16 f16->f32, one warp: {us:.2f} us a call "
          f"({1e6 / us:,.0f} calls/s; {calls} calls, median of 3; caller CPU "
          f"{time.process_time() - t0:.1f} s)")
    return us


def gemm(n, threads):
    kernel = tm.compile(GEMM, backend="emu")
    rng = np.random.default_rng(48)
    A, Bt = _halves(rng, (n, n)), _halves(rng, (n, n))   # Bt: B column-major (row j = column j)
    C = np.zeros((n, n), np.float32)
    res = kernel((n // 128, n // 128), (256,), A.view(np.uint16).ravel(), Bt.view(np.uint16).ravel(), C.ravel(), n,
                 warmup=0, repeat=1, timeout=None)
    exact = A.astype(np.float64) @ Bt.astype(np.float64).T
    err = np.abs(C - exact).max() / np.abs(exact).max()
    s = res.timing.kernel_ms / 1e3
    mmas = n ** 3 // 4096
    projected = s * (4096 / n) ** 3
    print(f"tc_gemm {n}^3 on {threads} thread(s): {s:.1f} s, {s * 1e6 / mmas:.2f} us per "
          f"mma_sync of the kernel ({mmas} calls), max error / max |C| {err:.1e}; projected "
          f"4096^3 (cudaTensorCoreGemm's default): {projected:.0f} s")
    return projected


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--n", type=int, default=1024, help="GEMM size (a multiple of 128)")
    parser.add_argument("--skip-gemm", action="store_true")
    args = parser.parse_args(argv)
    threads = int(os.environ.get("TILEDMM_EMU_THREADS", os.cpu_count()))
    rate(args.calls)
    if not args.skip_gemm:
        gemm(args.n, threads)


if __name__ == "__main__":
    main()
