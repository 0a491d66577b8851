// matmul_wmma.cu: the tiled matmul on tensor cores (issue 47): lecture 003's tiled kernel with
// its inner loop of multiply-adds replaced by warp matrix operations (nvcuda::wmma, the CUDA
// Programming Guide's "Warp Matrix Functions").
//
// A block of 4 warps computes a 32 x 32 tile of C; each warp owns a 16 x 16 piece of it, held in
// an accumulator fragment (FP32) spread over the warp's 32 lanes. The block walks along K one
// 32 x 16 tile of A and one 16 x 32 tile of B at a time: every thread loads a few elements into
// shared memory, converting them from FP32 to the tensor core's input type (FP16, or TF32 with
// round-to-nearest), the block waits at a barrier, then each warp loads its A and B fragments
// from shared memory and issues mma_sync: acc += A_frag * B_frag, 16 x 16 x 16 multiply-adds in
// one warp instruction (two k-steps of 8 for TF32).
//
// As in matmul_tiled.cu, every thread takes part in every load and barrier, loading 0 outside
// the matrices; the accumulators go through shared memory so that only the write to C is
// guarded: correct for any M, N, K.
//
// precision (parameter): 0 TF32 inputs (10-bit fraction), 1 FP16 inputs (10-bit fraction, range
// +-65504); FP32 accumulation either way. Expect errors of about 2^-11 relative per product
// against float64, growing with K; `tf32x3` keeps FP32 accuracy.
#include "common.h"
#ifdef TM_EMU
#include "user/mma.h"   // the emulator's nvcuda::wmma (tiledmm/include/user/mma.h)
#else
#include <mma.h>
#endif

using namespace nvcuda;

#define WMMA_TILE 32     // C tile per block (2 x 2 warps of 16 x 16)
#define WMMA_TILE_K 16   // K per shared-memory tile
#define WMMA_THREADS 128

// The tensor core's input element: what the shared tiles hold and the fragments take.
template <int PRECISION>
struct wmma_input;
template <>
struct wmma_input<0> {   // TF32: floats rounded to TF32, k-steps of 8
    typedef float shared_type;
    typedef wmma::precision::tf32 fragment_type;
    static constexpr int k_step = 8;
    static __device__ __forceinline__ float convert(float x) { return wmma::__float_to_tf32(x); }
};
template <>
struct wmma_input<1> {   // FP16, k-steps of 16
    typedef __half shared_type;
    typedef __half fragment_type;
    static constexpr int k_step = 16;
    static __device__ __forceinline__ __half convert(float x) { return __float2half(x); }
};

template <int PRECISION, typename Index>
__global__ void matmul_wmma_kernel(const float *__restrict__ A, const float *__restrict__ B,
                                   float *__restrict__ C, Index M, Index N, Index K,
                                   unsigned first_block_y)
{
    typedef wmma_input<PRECISION> In;
    typedef typename In::shared_type S;
    constexpr int KS = In::k_step;
    // fragments load from 256-bit aligned addresses
    __shared__ __align__(32) S A_tile[WMMA_TILE][WMMA_TILE_K];
    __shared__ __align__(32) S B_tile[WMMA_TILE_K][WMMA_TILE];
    __shared__ __align__(32) float C_tile[WMMA_TILE][WMMA_TILE];
    const int tid = threadIdx.x;
    const int warp = tid / 32, warp_row = warp / 2, warp_col = warp % 2;
    const Index row0 = (Index)(blockIdx.y + first_block_y) * WMMA_TILE;
    const Index col0 = (Index)blockIdx.x * WMMA_TILE;

    wmma::fragment<wmma::accumulator, 16, 16, KS, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (Index tile_k = 0; tile_k < K; tile_k += WMMA_TILE_K) {
        for (int i = tid; i < WMMA_TILE * WMMA_TILE_K; i += WMMA_THREADS) {
            const int r = i / WMMA_TILE_K, c = i % WMMA_TILE_K;
            const Index a_row = row0 + r, a_col = tile_k + c;
            A_tile[r][c] = In::convert(a_row < M && a_col < K ? A[a_row * K + a_col] : 0.0f);
        }
        for (int i = tid; i < WMMA_TILE_K * WMMA_TILE; i += WMMA_THREADS) {
            const int r = i / WMMA_TILE, c = i % WMMA_TILE;
            const Index b_row = tile_k + r, b_col = col0 + c;
            B_tile[r][c] = In::convert(b_row < K && b_col < N ? B[b_row * N + b_col] : 0.0f);
        }
        __syncthreads();  // the tiles are loaded before any warp reads them
#pragma unroll
        for (int k = 0; k < WMMA_TILE_K; k += KS) {
            wmma::fragment<wmma::matrix_a, 16, 16, KS, typename In::fragment_type, wmma::row_major>
                a;
            wmma::fragment<wmma::matrix_b, 16, 16, KS, typename In::fragment_type, wmma::row_major>
                b;
            wmma::load_matrix_sync(a, &A_tile[warp_row * 16][k], WMMA_TILE_K);
            wmma::load_matrix_sync(b, &B_tile[k][warp_col * 16], WMMA_TILE);
            wmma::mma_sync(acc, a, b, acc);
        }
        __syncthreads();  // every warp is done reading before the next load overwrites them
    }
    wmma::store_matrix_sync(&C_tile[warp_row * 16][warp_col * 16], acc, WMMA_TILE,
                            wmma::mem_row_major);
    __syncthreads();
    for (int i = tid; i < WMMA_TILE * WMMA_TILE; i += WMMA_THREADS) {
        const int r = i / WMMA_TILE, c = i % WMMA_TILE;
        if (row0 + r < M && col0 + c < N) C[(row0 + r) * N + col0 + c] = C_tile[r][c];
    }
}

template <int PRECISION, typename Index>
static int launch_wmma(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = matmul_wmma_kernel<PRECISION, Index>;
    const dim3 block(WMMA_THREADS);
    const dim3 grid(tm_ceil_div(p->N, WMMA_TILE), tm_ceil_div(p->M, WMMA_TILE));
    const size_t in_bytes = PRECISION == 0 ? 4 : 2;
    const size_t shared = 2 * WMMA_TILE * WMMA_TILE_K * in_bytes + WMMA_TILE * WMMA_TILE * 4;
    return tm_launch_row_chunks((const void *)kernel, grid, block, shared, facts,
                                [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, 0, (const float *)p->in0, (const float *)p->in1,
                         (float *)p->out, (Index)p->M, (Index)p->N, (Index)p->K, first_block_y);
    });
}

int tm_matmul_wmma_launch(const tm_problem *p, tm_launch_facts *facts)
{
    if (p->dtype != TM_F32) return cudaErrorInvalidValue;   // the row takes float32 only
    return tm_dispatch<TM_VALUES_WMMA_PRECISION>(p->params[0], [&](auto precision) {
        return tm_int_indices_suffice(p) ? launch_wmma<precision, int>(p, facts)
                                         : launch_wmma<precision, long long>(p, facts);
    });
}

void tm_matmul_wmma_tile(const tm_problem *p, long long *bm, long long *bn)
{
    (void)p;
    *bm = *bn = WMMA_TILE;
}

// A is read once per block-column of C, B once per block-row (as float32); C written once.
double tm_matmul_wmma_bytes(const tm_problem *p)
{
    return tm_blocked_matmul_bytes(p, WMMA_TILE, WMMA_TILE);
}
