// matmul_tiled.cu: shared-memory tiling (CS133 lecture 000, "Tiled Matrix Multiplication
// Kernel"; lecture 003, tiled kernel; CMU 15-418 lecture 001, block tiling 2N^3/L).
//
// A block of TILE x TILE threads computes a TILE x TILE tile of C. It walks along K one tile
// at a time: every thread loads one element of A and one of B into shared memory, the block
// waits at a barrier, then each thread does TILE multiply-adds from shared memory.
// Global traffic: each element of A is loaded once per block-column of C and each element of
// B once per block-row: about 2*M*N*K/TILE loads instead of 2*M*N*K (tile 16 -> 16x fewer).
//
// The lecture's listing assumes Width is a multiple of TILE_WIDTH. Here every thread still
// takes part in every load and barrier, loading 0 outside the matrices, and only the write
// is guarded: correct for any M, N, K, and no thread skips a __syncthreads.
#include "common.h"

// Index is int when the matrices are small enough (tm_int_indices_suffice), else long long.
template <typename T, int TILE, typename Index>
__global__ void matmul_tiled_kernel(const T *__restrict__ A, const T *__restrict__ B,
                                    T *__restrict__ C, Index M, Index N, Index K,
                                    unsigned first_block_y)
{
    __shared__ T A_tile[TILE][TILE];
    __shared__ T B_tile[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const Index row = (Index)(blockIdx.y + first_block_y) * TILE + ty;
    const Index col = (Index)blockIdx.x * TILE + tx;

    T sum = 0;
    for (Index tile_k = 0; tile_k < K; tile_k += TILE) {
        const Index a_col = tile_k + tx, b_row = tile_k + ty;
        A_tile[ty][tx] = (row < M && a_col < K) ? A[row * K + a_col] : T(0);
        B_tile[ty][tx] = (b_row < K && col < N) ? B[b_row * N + col] : T(0);
        __syncthreads();  // the tile is loaded before anyone reads it
#pragma unroll
        for (int k = 0; k < TILE; ++k)
            sum += A_tile[ty][k] * B_tile[k][tx];
        __syncthreads();  // everyone is done reading before the next load overwrites it
    }
    if (row < M && col < N) C[row * N + col] = sum;
}

template <typename T, int TILE, typename Index>
static int launch_tiled(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = matmul_tiled_kernel<T, TILE, Index>;
    const dim3 block(TILE, TILE);
    const dim3 grid(tm_ceil_div(p->N, TILE), tm_ceil_div(p->M, TILE));
    return tm_launch_row_chunks((const void *)kernel, grid, block, 2 * TILE * TILE * sizeof(T),
                                facts, [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, 0, (const T *)p->in0, (const T *)p->in1, (T *)p->out,
                         (Index)p->M, (Index)p->N, (Index)p->K, first_block_y);
    });
}

template <typename T, int TILE>
static int launch_tiled_index(const tm_problem *p, tm_launch_facts *facts)
{
    return tm_int_indices_suffice(p) ? launch_tiled<T, TILE, int>(p, facts)
                                     : launch_tiled<T, TILE, long long>(p, facts);
}

template <typename T>
static int launch_tiled_dtype(const tm_problem *p, tm_launch_facts *facts)
{
    return tm_dispatch<TM_VALUES_TILE>(
        p->params[0], [&](auto tile) { return launch_tiled_index<T, tile>(p, facts); });
}

int tm_matmul_tiled_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_tiled_dtype<float>(p, facts)
                              : launch_tiled_dtype<double>(p, facts);
}

// A block computes a tile x tile piece of C.
void tm_matmul_tiled_tile(const tm_problem *p, long long *bm, long long *bn)
{
    *bm = *bn = p->params[0];
}

// A is read once per block-column of C, B once per block-row; C is written once.
double tm_matmul_tiled_bytes(const tm_problem *p)
{
    long long bm, bn;
    tm_matmul_tiled_tile(p, &bm, &bn);
    return tm_blocked_matmul_bytes(p, bm, bn);
}
