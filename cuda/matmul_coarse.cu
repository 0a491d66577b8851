// matmul_coarse.cu: thread coarsening of the tiled kernel (lecture 002, "Thread Coarsening";
// PMPP chapter 6.3).
//
// A block of TILE x TILE threads computes COARSEN adjacent output tiles along a row of C
// (a TILE x COARSEN*TILE strip). Per step along K it loads ONE tile of A and COARSEN tiles of
// B, then every thread reads A_tile[ty][k] once into a register and uses it for its COARSEN
// outputs. Compared with `tiled` at the same tile:
//   global traffic  A is loaded once per strip instead of once per tile: about
//                   M*K*N/(COARSEN*TILE) + K*N*M/TILE loads instead of 2*M*N*K/TILE;
//   shared reads    (1 + COARSEN) per COARSEN multiply-adds instead of 2 per one;
//   barriers        2 per K step for COARSEN tiles instead of 2 per tile;
//   price           COARSEN accumulators per thread (registers) and COARSEN x fewer blocks.
//
// The lecture's listing has two bugs that this kernel avoids: it writes and reads column
// `colStart + c*TILE_WIDTH` without `+ tx` (every thread of a row hits the same column), and it
// assumes the width is a multiple of TILE_WIDTH (no bounds checks; it loops `width/TILE_WIDTH`
// phases and drops the remainder). Here every thread takes part in every load and barrier,
// loading 0 outside the matrices; only the writes are guarded.
//
// The B strip (TILE x COARSEN*TILE) lives in dynamic shared memory: in float64 with tile 32 and
// coarsen 8 it is 64 KiB, over the 48 KiB a block gets without opting in.
#include "common.h"

template <typename T, int TILE, int COARSEN>
__global__ void matmul_coarse_kernel(const T *__restrict__ A, const T *__restrict__ B,
                                     T *__restrict__ C, long long M, long long N, long long K,
                                     unsigned first_block_y)
{
    __shared__ T A_tile[TILE][TILE];
    TM_DYNAMIC_SHARED(T, B_strip);  // [TILE][COARSEN * TILE], row-major
    const int STRIP = COARSEN * TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long row = (long long)(blockIdx.y + first_block_y) * TILE + ty;
    const long long col0 =
        (long long)blockIdx.x * STRIP + tx;  // column of output c is col0 + c*TILE

    T sum[COARSEN];
#pragma unroll
    for (int c = 0; c < COARSEN; ++c)
        sum[c] = 0;

    for (long long tile_k = 0; tile_k < K; tile_k += TILE) {
        const long long a_col = tile_k + tx, b_row = tile_k + ty;
        A_tile[ty][tx] = (row < M && a_col < K) ? A[row * K + a_col] : T(0);
#pragma unroll
        for (int c = 0; c < COARSEN; ++c) {
            const long long col = col0 + c * TILE;
            B_strip[ty * STRIP + c * TILE + tx] =
                (b_row < K && col < N) ? B[b_row * N + col] : T(0);
        }
        __syncthreads();  // the A tile and the B strip are loaded before anyone reads them
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            const T a = A_tile[ty][k];  // loaded once, used COARSEN times
#pragma unroll
            for (int c = 0; c < COARSEN; ++c)
                sum[c] += a * B_strip[k * STRIP + c * TILE + tx];
        }
        __syncthreads();  // everyone is done reading before the next load overwrites them
    }
    if (row < M) {
#pragma unroll
        for (int c = 0; c < COARSEN; ++c) {
            const long long col = col0 + c * TILE;
            if (col < N) C[row * N + col] = sum[c];
        }
    }
}

template <typename T, int TILE, int COARSEN>
static int launch_coarse(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = matmul_coarse_kernel<T, TILE, COARSEN>;
    const dim3 block(TILE, TILE);
    const dim3 grid(tm_ceil_div(p->N, (long long)TILE * COARSEN), tm_ceil_div(p->M, TILE));
    const size_t strip_bytes = (size_t)TILE * TILE * COARSEN * sizeof(T);
    const size_t tile_bytes = (size_t)TILE * TILE * sizeof(T);
    if (strip_bytes + tile_bytes > TM_SHARED_DEFAULT_BYTES) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)strip_bytes);
        if (err != cudaSuccess) return err;
    }
    int err = tm_launch_row_chunks((const void *)kernel, grid, block, tile_bytes + strip_bytes,
                                   facts, [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, strip_bytes, (const T *)p->in0, (const T *)p->in1,
                         (T *)p->out, p->M, p->N, p->K, first_block_y);
    });
    facts->dynamic_shared_bytes = strip_bytes;
    return err;
}

template <typename T, int TILE>
static int launch_coarse_tile(const tm_problem *p, tm_launch_facts *facts)
{
    return tm_dispatch<TM_VALUES_COARSEN>(
        p->params[0], [&](auto coarsen) { return launch_coarse<T, TILE, coarsen>(p, facts); });
}

template <typename T>
static int launch_coarse_dtype(const tm_problem *p, tm_launch_facts *facts)
{
    return tm_dispatch<TM_VALUES_TILE>(
        p->params[1], [&](auto tile) { return launch_coarse_tile<T, tile>(p, facts); });
}

int tm_matmul_coarse_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_coarse_dtype<float>(p, facts)
                              : launch_coarse_dtype<double>(p, facts);
}

// A block computes a strip of COARSEN tiles along a row of C: tile x (tile * coarsen).
void tm_matmul_coarse_tile(const tm_problem *p, long long *bm, long long *bn)
{
    *bm = p->params[1];
    *bn = (long long)p->params[1] * p->params[0];
}

// A is read once per strip of C, B once per block-row; C is written once.
double tm_matmul_coarse_bytes(const tm_problem *p)
{
    long long bm, bn;
    tm_matmul_coarse_tile(p, &bm, &bn);
    return tm_blocked_matmul_bytes(p, bm, bn);
}
