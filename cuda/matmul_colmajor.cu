// matmul_colmajor.cu: B stored column-major, read naively or through corner turning
// (lecture 002, "Memory Coalescing", example C = AB with B in column-major order; PMPP 6.1).
//
// tiledmm's arrays arrive row-major, so the launcher first writes B's column-major copy Bt
// (N x K row-major: Bt[col*K + k] = B[k*N + col]) into the call's scratch with a small tiled
// transpose kernel. That transpose is part of every timed call (it is launched by the same
// launcher; it moves 2*K*N elements, about one copy of B), so it is not timed separately; for
// square n^3 problems it is a 1/n fraction of the kernel's traffic.
//
//   corner=0  naive: one thread per element of C, threadIdx.x along a row of C. A warp's 32
//             threads read Bt[col*K + k] for 32 adjacent columns: addresses K elements apart,
//             32 transactions per load (the lecture's Figure 2). Traffic: 2*M*N*K loads,
//             as `naive`, but uncoalesced on B.
//   corner=1  corner turning: the tiled kernel, but the B tile is loaded with threadIdx.x
//             walking down a column of B (along k, contiguous in Bt: coalesced) and stored
//             transposed in shared memory, where the multiply reads it as in `tiled`.
//             Shared memory has no coalescing rule, so the turn is free. Traffic: about
//             2*M*N*K/TILE loads, as `tiled`.
#include "common.h"

// out (cols x rows, row-major) = transpose of in (rows x cols, row-major), through a shared
// tile so that both the reads and the writes are coalesced. Grid-stride along y, so any number
// of rows fits one launch; the loop bound depends only on blockIdx, so no thread skips a barrier.
template <typename T>
__global__ void transpose_kernel(const T *__restrict__ in, T *__restrict__ out, long long rows,
                                 long long cols)
{
    const int TILE = 32;
    __shared__ T tile[TILE][TILE + 1];  // +1: column reads hit 32 different banks
    const int tx = threadIdx.x, ty = threadIdx.y;  // block 32 x 8: each thread moves 4 elements
    const long long col = (long long)blockIdx.x * TILE + tx;
    for (long long tile_row = (long long)blockIdx.y * TILE; tile_row < rows;
         tile_row += (long long)gridDim.y * TILE) {
        for (int r = ty; r < TILE; r += 8) {
            const long long row = tile_row + r;
            if (row < rows && col < cols) tile[r][tx] = in[row * cols + col];
        }
        __syncthreads();
        // write row (blockIdx.x*TILE + r) of out, columns tile_row + tx
        for (int r = ty; r < TILE; r += 8) {
            const long long out_row = (long long)blockIdx.x * TILE + r, out_col = tile_row + tx;
            if (out_row < cols && out_col < rows) out[out_row * rows + out_col] = tile[tx][r];
        }
        __syncthreads();  // the tile is read before the next iteration overwrites it
    }
}

// B column-major: Bt is N x K row-major.
template <typename T>
__global__ void matmul_colmajor_naive_kernel(const T *__restrict__ A, const T *__restrict__ Bt,
                                             T *__restrict__ C, long long M, long long N,
                                             long long K, unsigned first_block_y)
{
    const long long row = (long long)(blockIdx.y + first_block_y) * blockDim.y + threadIdx.y;
    const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    T sum = 0;
    for (long long k = 0; k < K; ++k)
        sum += A[row * K + k] * Bt[col * K + k];  // neighbours in a warp: K elements apart
    C[row * N + col] = sum;
}

template <typename T, int TILE>
__global__ void matmul_colmajor_turned_kernel(const T *__restrict__ A, const T *__restrict__ Bt,
                                              T *__restrict__ C, long long M, long long N,
                                              long long K, unsigned first_block_y)
{
    __shared__ T A_tile[TILE][TILE];
    __shared__ T B_tile[TILE][TILE + 1];  // [k][col]; +1 keeps the turned stores conflict-free
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long block_row = (long long)(blockIdx.y + first_block_y) * TILE;
    const long long block_col = (long long)blockIdx.x * TILE;
    const long long row = block_row + ty, col = block_col + tx;

    T sum = 0;
    for (long long tile_k = 0; tile_k < K; tile_k += TILE) {
        const long long a_col = tile_k + tx;
        A_tile[ty][tx] = (row < M && a_col < K) ? A[row * K + a_col] : T(0);
        // Corner turn: thread (tx, ty) loads Bt[block_col + ty][tile_k + tx] -- tx runs along k,
        // contiguous in column-major B -- and stores it at B_tile[k = tx][col = ty].
        const long long b_col = block_col + ty, b_k = tile_k + tx;
        B_tile[tx][ty] = (b_col < N && b_k < K) ? Bt[b_col * K + b_k] : T(0);
        __syncthreads();   // both tiles are loaded before anyone reads them
#pragma unroll
        for (int k = 0; k < TILE; ++k)
            sum += A_tile[ty][k] * B_tile[k][tx];
        __syncthreads();   // everyone is done reading before the next load overwrites them
    }
    if (row < M && col < N) C[row * N + col] = sum;
}

template <typename T>
static int launch_transpose_b(const tm_problem *p, int *launches)
{
    // B is K x N row-major; write Bt = N x K row-major into scratch.
    const dim3 block(32, 8);
    const unsigned rows_blocks = tm_ceil_div(p->K, 32);
    const dim3 grid(tm_ceil_div(p->N, 32),
                    rows_blocks < TM_MAX_GRID_YZ ? rows_blocks : TM_MAX_GRID_YZ);
    cudaError_t err = tm_launch(transpose_kernel<T>, grid, block, 0, (const T *)p->in1,
                                (T *)p->scratch, p->K, p->N);
    if (err == cudaSuccess) ++*launches;
    return err;
}

template <typename T, int TILE>
static int launch_colmajor(const tm_problem *p, tm_launch_facts *facts, bool turned)
{
    int transposes = 0;
    int err = launch_transpose_b<T>(p, &transposes);
    if (err != cudaSuccess) return err;
    const T *Bt = (const T *)p->scratch;
    const dim3 block(TILE, TILE);
    const dim3 grid(tm_ceil_div(p->N, TILE), tm_ceil_div(p->M, TILE));
    if (turned) {
        auto kernel = matmul_colmajor_turned_kernel<T, TILE>;
        err = tm_launch_row_chunks((const void *)kernel, grid, block,
                                   (size_t)TILE * (2 * TILE + 1) * sizeof(T), facts,
                                   [&](dim3 chunk, unsigned first_block_y) {
            return tm_launch(kernel, chunk, block, 0, (const T *)p->in0, Bt, (T *)p->out, p->M,
                             p->N, p->K, first_block_y);
        });
    } else {
        auto kernel = matmul_colmajor_naive_kernel<T>;
        err = tm_launch_row_chunks((const void *)kernel, grid, block, 0, facts,
                                   [&](dim3 chunk, unsigned first_block_y) {
            return tm_launch(kernel, chunk, block, 0, (const T *)p->in0, Bt, (T *)p->out, p->M,
                             p->N, p->K, first_block_y);
        });
    }
    facts->launches += transposes;   // facts describe the matmul kernel; the count includes all
    return err;
}

template <typename T>
static int launch_colmajor_dtype(const tm_problem *p, tm_launch_facts *facts)
{
    // corner picks the kernel at run time; tile (the block edge of both) is a template argument
    return tm_dispatch<TM_VALUES_CORNER>(p->params[0], [&](auto corner) {
        return tm_dispatch<TM_VALUES_TILE>(p->params[1], [&](auto tile) {
            return launch_colmajor<T, tile>(p, facts, corner != 0);
        });
    });
}

int tm_matmul_colmajor_b_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_colmajor_dtype<float>(p, facts)
                              : launch_colmajor_dtype<double>(p, facts);
}

// The column-major copy of B.
double tm_matmul_colmajor_b_scratch(const tm_problem *p)
{
    return (p->dtype == TM_F32 ? 4.0 : 8.0) * (double)p->K * p->N;
}

// The matmul's piece of C per block: naive (corner 0) shares nothing, 1 x 1; corner turning
// shares tile x tile, as `tiled`.
void tm_matmul_colmajor_b_tile(const tm_problem *p, long long *bm, long long *bn)
{
    *bm = *bn = p->params[0] == 0 ? 1 : p->params[1];
}

// Transpose (read and write B once) plus the matmul.
double tm_matmul_colmajor_b_bytes(const tm_problem *p)
{
    long long bm, bn;
    tm_matmul_colmajor_b_tile(p, &bm, &bn);
    const double transpose = (p->dtype == TM_F32 ? 4.0 : 8.0) * 2.0 * p->K * p->N;
    return transpose + tm_blocked_matmul_bytes(p, bm, bn);
}
