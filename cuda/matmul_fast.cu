// matmul_fast.cu: the fastest FP32 matmul tiledmm teaches without tensor cores. Every idea of
// the ladder below it, plus the ones that take a kernel from ~20% to ~80% of cuBLAS:
//   block tiling       a block computes a BM x BN tile of C (128 x 256 for large problems,
//                      128 x 128 or 64 x 64 for smaller ones) walking K in steps of BK, with
//                      both operand tiles in (dynamic) shared memory;
//   register tiling    each thread accumulates an 8 x 16 (or 8 x 8, 4 x 8) block of C
//                      (lecture 001's 2N^3/V);
//   warp tiling        the block's warps each own a WM x WN sub-tile, and a warp's 32 lanes
//                      an 8 x 4 grid of 4 x 4 pieces inside it, so a warp's shared reads are
//                      a few distinct 16-byte words (broadcasts, no bank conflicts);
//   128-bit loads      global reads of A and B and shared reads of both operands are float4;
//   transposed A tile  A is stored k-major in shared memory (As[k][m]), so the 4 rows a thread
//                      needs at one k are one float4, as B's 4 columns are;
//   double buffering   two shared stages: while the block computes on one, the next K step's
//                      tiles are already in flight from global memory into registers, and are
//                      stored into the other stage afterwards; one barrier per K step.
// Global traffic: M*K*N/BN + K*N*M/BM loads and M*N stores (3N^3/256 at n^3 with 128 x 256).
// Per k a thread does (TM + TN)/4 shared float4 loads for TM*TN multiply-adds: 6 for 128 (8x16).
// The 128 x 256 tiles run one block of 8 warps per SM (up to 255 registers); what they pay for is
// the barrier per K step, so they take a deep one (BK 32, 99 KB of shared memory): see
// benchmarks/fast_notes.md for the measurements behind each choice. Config 6 copies B with
// cp.async (sm_80+) into 2 shared stages instead (matmul_fast_async_kernel). Config 7, which
// config 0 takes for all but small problems, is CUTLASS's SIMT structure (128 x 256 x 8 tiles,
// both operands by cp.async into 4 stages, fragments carried across the barrier); what made it
// as fast as CUTLASS is its name (kernel_tag_ffma_order_as_in_cutlass below, fast_notes.md v8).
//
// Any shape works: every load is guarded. A float4 load is used where the 4 elements are inside
// the matrix and 16-byte aligned (the row length is a multiple of 4 and the base pointer is
// aligned; the launcher checks once per call); otherwise the same 4 elements are loaded one by
// one with bounds checks, 0 outside. The choice is per load, never around a barrier.
// float32 only (float64 would need half the tile per register budget; use `regtile`).
#include "common.h"
#include "cp_async.h"
#include <stdint.h>

namespace {

template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int MIN_BLOCKS_>
struct FastConfig {
    static const int BM = BM_, BN = BN_, BK = BK_;
    static const int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static const int MIN_BLOCKS = MIN_BLOCKS_;  // __launch_bounds__: blocks per SM to fit
    static const int THREADS = WARPS_M * WARPS_N * 32;
    static const int WM = BM / WARPS_M, WN = BN / WARPS_N;  // a warp's sub-tile of C
    static const int LANES_M = 8, LANES_N = 4;               // a warp's lanes: 8 x 4 ...
    static const int RM = WM / (LANES_M * 4),
                     RN = WN / (LANES_N * 4);  // ... of 4x4 pieces, RM x RN times
    static const int TM = 4 * RM, TN = 4 * RN;               // outputs per thread: TM x TN
    static const int A_STRIDE = BM + 4;                      // +4 floats: fewer store conflicts
    static const int A_LOADS = BM * BK / 4 / THREADS;   // float4 loads per thread per K step
    static const int B_LOADS = BK * BN / 4 / THREADS;
    static const int A_STAGE = BK * A_STRIDE, B_STAGE = BK * BN;   // floats per shared stage
    static const int SHARED_BYTES = 2 * (A_STAGE + B_STAGE) * (int)sizeof(float);
    static_assert(RM >= 1 && RN >= 1 && WM == RM * 32 && WN == RN * 16, "warp tile shape");
    static_assert(A_LOADS >= 1 && A_LOADS * THREADS * 4 == BM * BK, "A tile load split");
    static_assert(B_LOADS >= 1 && B_LOADS * THREADS * 4 == BK * BN, "B tile load split");
};

// Four consecutive elements of a row, at [row][col .. col+3] of a rows x cols matrix:
// one 16-byte load when all four are inside and aligned, else four guarded loads.
template <typename Index>
__device__ __forceinline__ float4 load4(const float *__restrict__ X, Index row, Index col,
                                        Index rows, Index cols, bool vec)
{
    if (vec && row < rows && col + 3 < cols)
        return *reinterpret_cast<const float4 *>(X + row * cols + col);
    float4 v;
    const bool in_row = row < rows;
    v.x = (in_row && col + 0 < cols) ? X[row * cols + col + 0] : 0.0f;
    v.y = (in_row && col + 1 < cols) ? X[row * cols + col + 1] : 0.0f;
    v.z = (in_row && col + 2 < cols) ? X[row * cols + col + 2] : 0.0f;
    v.w = (in_row && col + 3 < cols) ? X[row * cols + col + 3] : 0.0f;
    return v;
}

template <typename Index>
__device__ __forceinline__ void store4(float *__restrict__ X, Index row, Index col, Index rows,
                                       Index cols, bool vec, float4 v)
{
    if (row >= rows) return;
    if (vec && col + 3 < cols) {
        *reinterpret_cast<float4 *>(X + row * cols + col) = v;
        return;
    }
    if (col + 0 < cols) X[row * cols + col + 0] = v.x;
    if (col + 1 < cols) X[row * cols + col + 1] = v.y;
    if (col + 2 < cols) X[row * cols + col + 2] = v.z;
    if (col + 3 < cols) X[row * cols + col + 3] = v.w;
}

// Global -> registers: a tile of rows x (QUADS * 4) floats at (row0, col0) of a rows x cols
// matrix, LOADS float4s per thread. Thread t's e-th float4 is row f / QUADS, column quad
// f % QUADS of the tile (f = t + e*THREADS), so consecutive threads read consecutive bytes.
template <int THREADS, int LOADS, int QUADS, typename Index>
__device__ __forceinline__ void load_tile(const float *__restrict__ X, Index rows, Index cols,
                                          bool vec, Index row0, Index col0, float4 *next)
{
    const int t = threadIdx.x;
#pragma unroll
    for (int e = 0; e < LOADS; ++e) {
        const int f = t + e * THREADS;
        next[e] = load4<Index>(X, row0 + f / QUADS, col0 + (f % QUADS) * 4, rows, cols, vec);
    }
}

// One K step's A tile (BM x BK): 4 threads read a row's 64 contiguous bytes.
template <typename Cfg, typename Index>
__device__ __forceinline__ void load_a(const float *__restrict__ A, Index M, Index K, bool vec_a,
                                       Index block_row, Index tile_k, float4 *a_next)
{
    load_tile<Cfg::THREADS, Cfg::A_LOADS, Cfg::BK / 4, Index>(A, M, K, vec_a, block_row, tile_k,
                                                              a_next);
}

// Registers -> one shared stage: the A tile transposed (k-major, As[k * A_STRIDE + m]).
template <typename Cfg>
__device__ __forceinline__ void store_a(float *As, const float4 *a_next)
{
    const int t = threadIdx.x, BK = Cfg::BK, AS = Cfg::A_STRIDE;
#pragma unroll
    for (int e = 0; e < Cfg::A_LOADS; ++e) {
        const int f = t + e * Cfg::THREADS, m = f / (BK / 4), k = (f % (BK / 4)) * 4;
        As[(k + 0) * AS + m] = a_next[e].x;
        As[(k + 1) * AS + m] = a_next[e].y;
        As[(k + 2) * AS + m] = a_next[e].z;
        As[(k + 3) * AS + m] = a_next[e].w;
    }
}

// Both tiles of one K step, global -> registers. B: row f / (BN/4), column quad f % (BN/4): a
// warp reads 512 contiguous bytes.
template <typename Cfg, typename Index>
__device__ __forceinline__ void load_tiles(const float *__restrict__ A, const float *__restrict__ B,
                                           Index M, Index N, Index K, bool vec_a, bool vec_b,
                                           Index block_row, Index block_col, Index tile_k,
                                           float4 *a_next, float4 *b_next)
{
    load_a<Cfg, Index>(A, M, K, vec_a, block_row, tile_k, a_next);
    load_tile<Cfg::THREADS, Cfg::B_LOADS, Cfg::BN / 4, Index>(B, K, N, vec_b, tile_k, block_col,
                                                              b_next);
}

// Registers -> one shared stage: A transposed (store_a), B as is (Bs[k * BN + n]).
template <typename Cfg>
__device__ __forceinline__ void store_tiles(float *As, float *Bs, const float4 *a_next,
                                            const float4 *b_next)
{
    store_a<Cfg>(As, a_next);
    const int t = threadIdx.x, BN = Cfg::BN;
#pragma unroll
    for (int e = 0; e < Cfg::B_LOADS; ++e) {
        const int f = t + e * Cfg::THREADS;
        *reinterpret_cast<float4 *>(&Bs[(f / (BN / 4)) * BN + (f % (BN / 4)) * 4]) = b_next[e];
    }
}

// The thread's TM x TN results into C: rows m0 + rm * 32 + i, columns n0 + rn * 16 .. + 3 of the
// block tile at (block_row, block_col), float4 stores where store4 can.
template <typename Cfg, typename Index>
__device__ __forceinline__ void store_results(float *__restrict__ C,
                                              const float (&acc)[Cfg::TM][Cfg::TN], Index M,
                                              Index N, bool vec_c, Index row0, Index col0)
{
#pragma unroll
    for (int rm = 0; rm < Cfg::RM; ++rm)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int rn = 0; rn < Cfg::RN; ++rn) {
                const int r = rm * 4 + i, c = rn * 4;
                store4<Index>(C, row0 + rm * 32 + i, col0 + rn * 16, M, N, vec_c,
                              make_float4(acc[r][c], acc[r][c + 1], acc[r][c + 2], acc[r][c + 3]));
            }
}

// One K step's B tile, global -> a shared stage (Bs[k * BN + n]) by cp.async, in the same
// thread-to-float4 split as load_tiles. Out-of-range elements are zero-filled (0 source bytes,
// source pointer left at B so that it is never out of bounds). With vec_b (N % 4 == 0, aligned)
// a float4 is wholly inside or wholly outside; otherwise each float is copied on its own.
template <typename Cfg, typename Index>
__device__ __forceinline__ void copy_b_async(const float *__restrict__ B, Index N, Index K,
                                             bool vec_b, Index block_col, Index tile_k, float *Bs)
{
    const int t = threadIdx.x, BN = Cfg::BN;
#pragma unroll
    for (int e = 0; e < Cfg::B_LOADS; ++e) {
        const int f = t + e * Cfg::THREADS, r = f / (BN / 4), c = (f % (BN / 4)) * 4;
        const Index row = tile_k + r, col = block_col + c;
        float *const dst = Bs + r * BN + c;
        if (vec_b) {
            const bool in = row < K && col < N;
            cp_async16(dst, in ? B + row * N + col : B, in ? 16 : 0);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool in = row < K && col + j < N;
                cp_async4(dst + j, in ? B + row * N + col + j : B, in ? 4 : 0);
            }
        }
    }
}

// One k of the warp's product (SGEMM_CUDA's processFromSmem, CUTLASS's MmaSimt): this thread's
// fragments, TM values of A from Ak (rows rm * 32 + 0..3 of its column) and TN values of B from Bk
// (columns rn * 16 + 0..3), then their outer product into acc. With PAIRS the order of the
// multiply-adds is CUTLASS's (thread/mma_sm50.h): 2 x 2 blocks (m,n) (m+1,n) (m+1,n+1) (m,n+1), each sharing a
// multiplicand with the one before, so that both operands of most FFMAs come from the operand
// reuse cache; the blocks run down a column pair, then back up the next. ptxas keeps this order
// only in kernels named as below (kernel_tag); elsewhere it re-sorts the FFMAs into column sweeps.
template <typename Cfg, bool PAIRS>
__device__ __forceinline__ void warp_mma_k(const float *Ak, const float *Bk,
                                           float (&acc)[Cfg::TM][Cfg::TN])
{
    const int TM = Cfg::TM, TN = Cfg::TN;
    float a[TM], b[TN];
#pragma unroll
    for (int rm = 0; rm < Cfg::RM; ++rm) {
        const float4 v = *reinterpret_cast<const float4 *>(Ak + rm * 32);
        a[rm * 4 + 0] = v.x;
        a[rm * 4 + 1] = v.y;
        a[rm * 4 + 2] = v.z;
        a[rm * 4 + 3] = v.w;
    }
#pragma unroll
    for (int rn = 0; rn < Cfg::RN; ++rn) {
        const float4 v = *reinterpret_cast<const float4 *>(Bk + rn * 16);
        b[rn * 4 + 0] = v.x;
        b[rn * 4 + 1] = v.y;
        b[rn * 4 + 2] = v.z;
        b[rn * 4 + 3] = v.w;
    }
    if (PAIRS) {
#pragma unroll
        for (int n = 0; n < TN; n += 2)
#pragma unroll
            for (int mm = 0; mm < TM; mm += 2) {
                const int m = (n % 4) ? TM - 2 - mm : mm;
                acc[m][n] += a[m] * b[n];
                acc[m + 1][n] += a[m + 1] * b[n];
                acc[m + 1][n + 1] += a[m + 1] * b[n + 1];
                acc[m][n + 1] += a[m] * b[n + 1];
            }
    } else {   // row by row: ptxas re-sorts these anyway (PAIRS measured 11 points slower there)
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j)
                acc[i][j] += a[i] * b[j];
    }
}

// ptxas (CUDA 12 and 13, sm_80/sm_90, checked with 13.0) schedules the FFMAs of a kernel whose
// name contains "cutlass" as the source orders them and updates every accumulator in place; any
// other kernel gets its independent FFMAs re-sorted into column sweeps that reuse one operand at
// best (benchmarks/fast_notes.md v8: the same PTX, renamed, goes from 93 to 493 of 1,024 FFMAs
// reusing both operands; the PTX bisection found nothing else that moves it). This tag type is a
// template argument of both kernels for that reason alone: it puts the word in their mangled names.
struct kernel_tag_ffma_order_as_in_cutlass {};
// The register-staged kernel (configs 1-5) keeps ptxas's own order: with the source order kept it
// spills (config 4: 224 bytes at 255 registers), since its 48 staging registers leave no room for
// the fragments the 2 x 2 order keeps live. The async kernel has them free (228 registers).
struct kernel_tag_default_ffma_order {};

}   // namespace

// Index is int when every matrix has fewer than 2^31 elements (cheaper address arithmetic,
// fewer registers), long long otherwise. Shared memory is dynamic (the large tiles need more
// than 48 KB): two stages of A (transposed) then two stages of B.
template <typename Cfg, typename Index, typename Tag = kernel_tag_default_ffma_order>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    matmul_fast_kernel(const float *__restrict__ A, const float *__restrict__ B,
                       float *__restrict__ C, Index M, Index N, Index K, int vec_a, int vec_b,
                       int vec_c, unsigned first_block_y)
{
    const int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, AS = Cfg::A_STRIDE;
    const int TM = Cfg::TM, TN = Cfg::TN;
    TM_DYNAMIC_SHARED(float, smem);
    float *const As0 = smem;   // stage s: As0 + s * A_STAGE
    float *const Bs0 = smem + 2 * Cfg::A_STAGE;   // stage s: Bs0 + s * B_STAGE

    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    // Where this thread's outputs sit in the block tile: rows m0 + rm*32 + i, cols n0 + rn*16 + j.
    const int m0 = (warp / Cfg::WARPS_N) * Cfg::WM + (lane / Cfg::LANES_N) * 4;
    const int n0 = (warp % Cfg::WARPS_N) * Cfg::WN + (lane % Cfg::LANES_N) * 4;
    const Index block_row = (Index)(blockIdx.y + first_block_y) * BM;
    const Index block_col = (Index)blockIdx.x * BN;

    // The next K step's tiles, in registers between their global load and their shared store.
    float4 a_next[Cfg::A_LOADS], b_next[Cfg::B_LOADS];
    const Index num_k_steps = (K + BK - 1) / BK;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0.0f;

    if (num_k_steps > 0) {
        load_tiles<Cfg, Index>(A, B, M, N, K, vec_a, vec_b, block_row, block_col, 0, a_next,
                               b_next);
        store_tiles<Cfg>(As0, Bs0, a_next, b_next);
    }
    __syncthreads();   // stage 0 is filled

    for (Index step = 0; step < num_k_steps; ++step) {
        const int stage = (int)(step & 1);
        const bool has_next = step + 1 < num_k_steps;   // the same for every thread of the block
        if (has_next)   // in flight while we compute below
            load_tiles<Cfg, Index>(A, B, M, N, K, vec_a, vec_b, block_row, block_col,
                                   (step + 1) * BK, a_next, b_next);
        const float *const Ak = As0 + stage * Cfg::A_STAGE + m0;   // this thread's A column
        const float *const Bk = Bs0 + stage * Cfg::B_STAGE + n0;   // this thread's B row
#pragma unroll
        for (int kk = 0; kk < BK; ++kk)
            warp_mma_k<Cfg, false>(Ak + kk * AS, Bk + kk * BN, acc);
        // The other stage was last read before the previous barrier: safe to overwrite.
        if (has_next)
            store_tiles<Cfg>(As0 + (stage ^ 1) * Cfg::A_STAGE, Bs0 + (stage ^ 1) * Cfg::B_STAGE,
                             a_next, b_next);
        __syncthreads();   // the next stage is filled, and this one is free again
    }

    store_results<Cfg, Index>(C, acc, M, N, vec_c, block_row + m0, block_col + n0);
}

// The same computation with B copied by cp.async into S_B shared stages (the copy for step
// s + S_B - 1 is issued at the start of step s, so S_B - 1 K steps of B are in flight), A as in
// matmul_fast_kernel (through registers, transposed, two stages). No registers hold B between
// its load and its store. Groups: one commit per copy issued (empty ones too), so that
// wait<S_B - 2> at the end of step s means B of step s + 1 has landed.
template <typename Cfg, int S_B, typename Index, typename Tag = kernel_tag_ffma_order_as_in_cutlass>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    matmul_fast_async_kernel(const float *__restrict__ A, const float *__restrict__ B,
                             float *__restrict__ C, Index M, Index N, Index K, int vec_a, int vec_b,
                             int vec_c, unsigned first_block_y)
{
    const int BN = Cfg::BN, BK = Cfg::BK, AS = Cfg::A_STRIDE;
    const int TM = Cfg::TM, TN = Cfg::TN;
    TM_DYNAMIC_SHARED(float, smem);
    float *const As0 = smem;   // stage s: As0 + s * A_STAGE (2 stages)
    float *const Bs0 = smem + 2 * Cfg::A_STAGE;   // stage s: Bs0 + s * B_STAGE (S_B stages)

    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const int m0 = (warp / Cfg::WARPS_N) * Cfg::WM + (lane / Cfg::LANES_N) * 4;
    const int n0 = (warp % Cfg::WARPS_N) * Cfg::WN + (lane % Cfg::LANES_N) * 4;
    const Index block_row = (Index)(blockIdx.y + first_block_y) * Cfg::BM;
    const Index block_col = (Index)blockIdx.x * BN;

    float4 a_next[Cfg::A_LOADS];
    const Index num_k_steps = (K + BK - 1) / BK;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0.0f;

#pragma unroll
    for (int s = 0; s < S_B - 1; ++s) {
        if (s < num_k_steps)
            copy_b_async<Cfg, Index>(B, N, K, vec_b, block_col, (Index)s * BK,
                                     Bs0 + s * Cfg::B_STAGE);
        cp_async_commit();
    }
    if (num_k_steps > 0) {
        load_a<Cfg, Index>(A, M, K, vec_a, block_row, 0, a_next);
        store_a<Cfg>(As0, a_next);
    }
    cp_async_wait<S_B - 2>();
    __syncthreads();   // stage 0 of A and of B is filled

    int b_stage = 0;   // step % S_B
    for (Index step = 0; step < num_k_steps; ++step) {
        const int a_stage = (int)(step & 1);
        const bool has_next = step + 1 < num_k_steps;
        // B of step + S_B - 1 into the stage read at step - 1 (free since the last barrier).
        const int b_fill = b_stage == 0 ? S_B - 1 : b_stage - 1;
        if (step + S_B - 1 < num_k_steps)
            copy_b_async<Cfg, Index>(B, N, K, vec_b, block_col, (step + S_B - 1) * BK,
                                     Bs0 + b_fill * Cfg::B_STAGE);
        cp_async_commit();
        if (has_next) load_a<Cfg, Index>(A, M, K, vec_a, block_row, (step + 1) * BK, a_next);
        const float *const Ak = As0 + a_stage * Cfg::A_STAGE + m0;
        const float *const Bk = Bs0 + b_stage * Cfg::B_STAGE + n0;
#pragma unroll
        for (int kk = 0; kk < BK; ++kk)
            warp_mma_k<Cfg, true>(Ak + kk * AS, Bk + kk * BN, acc);
        if (has_next) store_a<Cfg>(As0 + (a_stage ^ 1) * Cfg::A_STAGE, a_next);
        cp_async_wait<S_B - 2>();   // this thread's copies of B for step + 1 have landed
        __syncthreads();   // everyone's have, A's next stage is stored, this stage is free
        b_stage = b_stage + 1 == S_B ? 0 : b_stage + 1;
    }

    store_results<Cfg, Index>(C, acc, M, N, vec_c, block_row + m0, block_col + n0);
}

// ---- Config 7: CUTLASS's SIMT structure (fast_notes.md v7, v8), 4 shared stages. ----
// 128 x 256 x 8 block tiles, 8 warps of 64 x 64, a warp's lanes a 4 x 8 grid laid out as CUTLASS's
// RowMajorInterleaved<2>, each lane 16 x 8 outputs as 4 x 2 pieces of 4 x 4; A (transposed by
// 4-byte cp.async) and B (16-byte cp.async where rows allow) in STAGES shared stages; the
// fragments of k + 1 loaded before k's FFMAs and carried across the barrier; the partial K step
// first, so that later copies need only row and column masks. Rebuilt in plain CUDA C in v7, it
// ran 86-89% of cuBLAS: ptxas re-sorted its FFMAs. Named with the tag (v8), ptxas keeps them.
namespace {

struct SimtShape {
    static const int BM = 128, BN = 256, BK = 8, THREADS = 256;
    static const int WARPS_N = 4, WM = 64, WN = 64;   // 2 x 4 warps
    static const int A_STRIDE = BM + 4;   // As[k][m]; +4: the transposing copies hit 32 banks
    static const int A_STAGE = BK * A_STRIDE, B_STAGE = BK * BN;   // floats per stage
    static const int A_COPIES = BM * BK / THREADS;   // 4 single floats per thread
    static const int B_SLOTS = BK * BN / 4 / THREADS;   // 2 float4 slots per thread
};

__device__ __forceinline__ float4 lds128(const float *p)
{
    return *reinterpret_cast<const float4 *>(p);
}

// Fragments of one k from a shared stage: A rows wm + lr*4 + i*16 (4 float4), B columns
// wn + lc*4 + j*32 (2 float4).
__device__ __forceinline__ void simt_load_frags(const float *As, const float *Bs, int kk,
                                                float (&a)[16], float (&b)[8])
{
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float4 v = lds128(As + kk * SimtShape::A_STRIDE + i * 16);
        a[4 * i + 0] = v.x;
        a[4 * i + 1] = v.y;
        a[4 * i + 2] = v.z;
        a[4 * i + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const float4 v = lds128(Bs + kk * SimtShape::BN + j * 32);
        b[4 * j + 0] = v.x;
        b[4 * j + 1] = v.y;
        b[4 * j + 2] = v.z;
        b[4 * j + 3] = v.w;
    }
}

// The 16 x 8 outer product of one k. In 2 x 2 blocks (m,n) (m+1,n) (m+1,n+1) (m,n+1): each FFMA
// shares a multiplicand with the one before; the block column runs down, then back up.
__device__ __forceinline__ void simt_outer(float (&acc)[16][8], const float (&a)[16],
                                           const float (&b)[8])
{
#pragma unroll
    for (int n = 0; n < 8; n += 2)
#pragma unroll
        for (int mm = 0; mm < 16; mm += 2) {
            const int m = (n % 4) ? 14 - mm : mm;
            acc[m][n] += a[m] * b[n];
            acc[m + 1][n] += a[m + 1] * b[n];
            acc[m + 1][n + 1] += a[m + 1] * b[n + 1];
            acc[m][n + 1] += a[m] * b[n + 1];
        }
}

}   // namespace

// STAGES shared stages (3 or 4); VEC_B: B's rows are whole float4s (N % 4 == 0, aligned), so a
// B copy is one 16-byte cp.async, else four 4-byte ones. Dynamic shared memory: STAGES stages of
// A, then STAGES of B.
template <int STAGES, bool VEC_B, typename Index,
          typename Tag = kernel_tag_ffma_order_as_in_cutlass>
__global__ void __launch_bounds__(SimtShape::THREADS, 1)
    matmul_fast_simt_kernel(const float *__restrict__ A, const float *__restrict__ B,
                            float *__restrict__ C, Index M, Index N, Index K, int vec_c,
                            unsigned first_block_y)
{
    typedef SimtShape S;
    TM_DYNAMIC_SHARED(float, smem);
    float *const As = smem;   // stage s: As + s * A_STAGE
    float *const Bs = smem + STAGES * S::A_STAGE;   // stage s: Bs + s * B_STAGE

    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const int lr = (lane / 16) * 2 + lane % 2, lc = (lane / 2) % 8;   // the lane's place, 4 x 8
    const int a_frag = (warp / S::WARPS_N) * S::WM + lr * 4;   // + i * 16 (shared A column)
    const int b_frag = (warp % S::WARPS_N) * S::WN + lc * 4;   // + j * 32 (shared B row)
    const Index block_row = (Index)(blockIdx.y + first_block_y) * S::BM;
    const Index block_col = (Index)blockIdx.x * S::BN;

    // Copies. A: thread t copies k = t % 8 of rows t / 8 + 32 i (8 threads read a row's 32
    // bytes); B: float4 slot (t % 64) of rows t / 64 + 4 e (a warp reads 512 bytes of a row).
    const int a_k = t % 8, a_m = t / 8, b_k = t / 64, b_n = (t % 64) * 4;
    bool a_ok[S::A_COPIES], b_ok[4];   // B: the slot's columns (all four alike when VEC_B)
#pragma unroll
    for (int i = 0; i < S::A_COPIES; ++i)
        a_ok[i] = block_row + a_m + 32 * i < M;
#pragma unroll
    for (int j = 0; j < 4; ++j)
        b_ok[j] = block_col + b_n + (VEC_B ? 0 : j) < N;
    const float *a_src = A + (block_row + a_m) * K + a_k;   // advanced along k per K step
    const float *b_src = B + (Index)b_k * N + block_col + b_n;
    const Index a_rows32 = 32 * K, b_rows4 = 4 * N;
    const int a_dst = a_k * S::A_STRIDE + a_m, b_dst = b_k * S::BN + b_n;

    const Index num_k_steps = (K + S::BK - 1) / S::BK;
    const int first_k = (int)(K - (num_k_steps - 1) * S::BK);   // 1..8: the partial step, first

    // Copy number c (0 .. A_COPIES + B_SLOTS - 1) of a K step into stage pointers (as, bs), for
    // the k < k_limit of the step (k_limit 0: nothing, zero-fill only).
    auto copy = [&](int c, float *as, float *bs, int k_limit) {
        if (c < S::A_COPIES) {
            const bool in = a_ok[c] && a_k < k_limit;
            cp_async4(as + a_dst + 32 * c, in ? a_src + c * a_rows32 : A, in ? 4 : 0);
        } else {
            const int e = c - S::A_COPIES;
            const bool row_in = b_k + 4 * e < k_limit;
            float *const dst = bs + b_dst + 4 * e * S::BN;
            if (VEC_B) {
                const bool in = row_in && b_ok[0];
                cp_async16(dst, in ? b_src + e * b_rows4 : B, in ? 16 : 0);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const bool in = row_in && b_ok[j];
                    cp_async4(dst + j, in ? b_src + e * b_rows4 + j : B, in ? 4 : 0);
                }
            }
        }
    };
    const int COPIES = S::A_COPIES + S::B_SLOTS;

    // Prologue: steps 0 .. STAGES-2 into stages 0 .. STAGES-2, one commit each.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        const int k_limit = s < num_k_steps ? (s == 0 ? first_k : S::BK) : 0;
#pragma unroll
        for (int c = 0; c < COPIES; ++c)
            copy(c, As + s * S::A_STAGE, Bs + s * S::B_STAGE, k_limit);
        cp_async_commit();
        a_src += s == 0 ? first_k : S::BK;
        b_src += (Index)(s == 0 ? first_k : S::BK) * N;
    }

    float acc[16][8];
#pragma unroll
    for (int i = 0; i < 16; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
            acc[i][j] = 0.0f;

    float a[2][16], b[2][8];
    int read = 0, write = STAGES - 1;   // the stage read now, the stage being filled
    cp_async_wait<STAGES - 2>();
    __syncthreads();   // step 0 has landed
    simt_load_frags(As + a_frag, Bs + b_frag, 0, a[0], b[0]);

    const Index b_step = (Index)S::BK * N;
    for (Index step = 0; step < num_k_steps; ++step) {
        // This step fills stage `write` with step + STAGES - 1 (nothing past the last step).
        const int k_limit = step + STAGES - 1 < num_k_steps ? S::BK : 0;
        float *const as_w = As + write * S::A_STAGE, *const bs_w = Bs + write * S::B_STAGE;
#pragma unroll
        for (int kk = 0; kk < S::BK; ++kk) {
            // k + 1's fragments (for kk = 7: k = 0 of the next stage, read after the barrier).
            simt_load_frags(As + read * S::A_STAGE + a_frag, Bs + read * S::B_STAGE + b_frag,
                            (kk + 1) % S::BK, a[(kk + 1) % 2], b[(kk + 1) % 2]);
            simt_outer(acc, a[kk % 2], b[kk % 2]);
            // The next stage's copies, a few per k step (CUTLASS's copy groups).
#pragma unroll
            for (int c = 0; c < COPIES; ++c)
                if (c * (S::BK - 1) / COPIES == kk) copy(c, as_w, bs_w, k_limit);
            if (kk == S::BK - 2) {
                // Before the last k step (its fragments are loaded): step + 1 must have landed,
                // and everyone must be done reading stage `read`, which becomes the next `write`.
                cp_async_commit();
                cp_async_wait<STAGES - 2>();
                __syncthreads();
                write = read;
                read = read + 1 == STAGES ? 0 : read + 1;
                a_src += S::BK;
                b_src += b_step;
            }
        }
    }

    // Results: row wm + (m/4)*16 + lr*4 + m%4, columns wn + j*32 + lc*4 .. + 3.
    const Index row0 = block_row + a_frag, col0 = block_col + b_frag;
#pragma unroll
    for (int m = 0; m < 16; ++m)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            store4<Index>(C, row0 + (m / 4) * 16 + m % 4, col0 + j * 32, M, N, vec_c,
                          make_float4(acc[m][4 * j], acc[m][4 * j + 1], acc[m][4 * j + 2],
                                      acc[m][4 * j + 3]));
}

// The configurations `config` picks from (0 = choose by problem size).
//                      BM   BN  BK  warps  min blocks/SM
typedef FastConfig<128, 128, 16, 2, 4, 2> FastLarge;   // 1: 256 threads, 8 x 8 per thread
typedef FastConfig<128, 128, 8, 2, 4, 2> FastLargeK8;   // 2: the same with half the K step
typedef FastConfig<64, 64, 16, 2, 2, 4> FastSmall;   // 3: 128 threads, 4 x 8 per thread
typedef FastConfig<128, 256, 32, 2, 4, 1> FastWide;   // 4: 256 threads, 8 x 16 per thread
typedef FastConfig<128, 256, 16, 2, 4, 1> FastWideK16;   // 5: the same with half the K step
// 6, 7: FastWide with B copied by cp.async, 2 or 3 shared stages of B (matmul_fast_async_kernel)

// S_B = 0: matmul_fast_kernel; S_B >= 2: matmul_fast_async_kernel with S_B stages of B.
template <typename Cfg, int S_B, typename Index>
static auto fast_kernel_for()
{
    if constexpr (S_B == 0)
        return matmul_fast_kernel<Cfg, Index>;
    else
        return matmul_fast_async_kernel<Cfg, S_B, Index>;
}

// Launch one of fast's kernels with `shared` bytes of dynamic shared memory: above 48 KiB the
// kernel must opt in first; grids taller than gridDim.y allows go in row chunks, the kernel's
// last argument being the chunk's first block row.
template <typename Kernel, typename... Args>
static int launch_fast_grid(Kernel kernel, dim3 grid, dim3 block, size_t shared,
                            tm_launch_facts *facts, Args... args)
{
    if (shared > TM_SHARED_DEFAULT_BYTES) {
        cudaError_t err =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
        if (err != cudaSuccess) return err;
    }
    int err = tm_launch_row_chunks((const void *)kernel, grid, block, shared, facts,
                                   [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, shared, args..., first_block_y);
    });
    facts->dynamic_shared_bytes = shared;
    return err;
}

template <typename Cfg, int S_B, typename Index>
static int launch_fast_index(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = fast_kernel_for<Cfg, S_B, Index>();
    const dim3 block(Cfg::THREADS);
    const dim3 grid(tm_ceil_div(p->N, Cfg::BN), tm_ceil_div(p->M, Cfg::BM));
    const int vec_a = p->K % 4 == 0 && aligned16(p->in0);
    const int vec_b = p->N % 4 == 0 && aligned16(p->in1);
    const int vec_c = p->N % 4 == 0 && aligned16(p->out);
    const size_t shared = S_B == 0
                              ? (size_t)Cfg::SHARED_BYTES
                              : (size_t)(2 * Cfg::A_STAGE + S_B * Cfg::B_STAGE) * sizeof(float);
    return launch_fast_grid(kernel, grid, block, shared, facts, (const float *)p->in0,
                            (const float *)p->in1, (float *)p->out, (Index)p->M, (Index)p->N,
                            (Index)p->K, vec_a, vec_b, vec_c);
}

// Config 7: matmul_fast_simt_kernel with STAGES shared stages of both operands.
template <int STAGES, bool VEC_B, typename Index>
static int launch_simt_index(const tm_problem *p, tm_launch_facts *facts)
{
    typedef SimtShape S;
    auto kernel = matmul_fast_simt_kernel<STAGES, VEC_B, Index>;
    const dim3 block(S::THREADS);
    const dim3 grid(tm_ceil_div(p->N, S::BN), tm_ceil_div(p->M, S::BM));
    const int vec_c = p->N % 4 == 0 && aligned16(p->out);
    const size_t shared = (size_t)STAGES * (S::A_STAGE + S::B_STAGE) * sizeof(float);
    return launch_fast_grid(kernel, grid, block, shared, facts, (const float *)p->in0,
                            (const float *)p->in1, (float *)p->out, (Index)p->M, (Index)p->N,
                            (Index)p->K, vec_c);
}

template <int STAGES>
static int launch_simt(const tm_problem *p, tm_launch_facts *facts)
{
    // B's copies are whole 16-byte cp.async where every row starts 16-byte aligned.
    const bool vec_b = p->N % 4 == 0 && aligned16(p->in1);
    if (tm_int_indices_suffice(p))
        return vec_b ? launch_simt_index<STAGES, true, int>(p, facts)
                     : launch_simt_index<STAGES, false, int>(p, facts);
    return vec_b ? launch_simt_index<STAGES, true, long long>(p, facts)
                 : launch_simt_index<STAGES, false, long long>(p, facts);
}

template <typename Cfg, int S_B = 0>
static int launch_fast(const tm_problem *p, tm_launch_facts *facts)
{
    return tm_int_indices_suffice(p) ? launch_fast_index<Cfg, S_B, int>(p, facts)
                                     : launch_fast_index<Cfg, S_B, long long>(p, facts);
}

// What each `config` value (TM_VALUES_FAST_CONFIG) launches: its tile shape (Shape::BM, BN,
// which config 0's choice and the traffic model read too) and its launcher. A value in the
// list without an entry here fails to compile.
template <int CONFIG>
struct FastConfigOf;
template <>
struct FastConfigOf<0> {
    typedef void Shape;
};   // chosen by choose_fast_config
template <typename Cfg, int S_B = 0>
struct FastLaunch {
    typedef Cfg Shape;
    static int launch(const tm_problem *p, tm_launch_facts *f)
    {
        return launch_fast<Cfg, S_B>(p, f);
    }
};
template <>
struct FastConfigOf<1> : FastLaunch<FastLarge> {};
template <>
struct FastConfigOf<2> : FastLaunch<FastLargeK8> {};
template <>
struct FastConfigOf<3> : FastLaunch<FastSmall> {};
template <>
struct FastConfigOf<4> : FastLaunch<FastWide> {};
template <>
struct FastConfigOf<5> : FastLaunch<FastWideK16> {};
template <>
struct FastConfigOf<6> : FastLaunch<FastWide, 2> {};
template <>
struct FastConfigOf<7> {
    typedef SimtShape Shape;
    static int launch(const tm_problem *p, tm_launch_facts *f) { return launch_simt<4>(p, f); }
};

// config 0: CUTLASS's structure (config 7, 128 x 256 tiles) when there are at least half as many
// such tiles as multiprocessors, else 128 x 128 tiles (config 1) when there are at least as many
// of those as multiprocessors, else 64 x 64 tiles (config 3, 4x the blocks) so that small
// problems still fill the device. Measured on an H200 (fast_notes.md v8): config 7 against the
// others at 2048^3, 4096^3, 8192^3 and 5000 x 3000 x 4000; earlier, on an H100, 64 x 64 gave 85%
// of cuBLAS at 1024^3 against 58% for 128 x 128. The multiprocessors are the problem's sm_count
// (the glue sets the device's; tm.model passes its own), 132 (an H100's) where it is unset.
// (As written config 1 is never taken: there are never more than twice as many 128 x 128 tiles
// as 128 x 256 ones, so 2 x wide < sms <= large cannot hold.)
static int choose_fast_config(const tm_problem *p)
{
    typedef FastConfigOf<7>::Shape Wide;
    typedef FastConfigOf<1>::Shape Large;
    const int sms = p->sm_count > 0 ? p->sm_count : 132;
    const long long wide_blocks =
        (long long)tm_ceil_div(p->M, Wide::BM) * tm_ceil_div(p->N, Wide::BN);
    const long long large_blocks =
        (long long)tm_ceil_div(p->M, Large::BM) * tm_ceil_div(p->N, Large::BN);
    if (2 * wide_blocks >= sms) return 7;
    return large_blocks >= sms ? 1 : 3;
}

// The configuration a problem runs: its own, or choose_fast_config's for 0.
static int fast_config(const tm_problem *p)
{
    return p->params[0] == 0 ? choose_fast_config(p) : p->params[0];
}

int tm_matmul_fast_launch(const tm_problem *p, tm_launch_facts *facts)
{
    if (p->dtype != TM_F32) return cudaErrorInvalidValue;   // the glue refuses float64 first
    return tm_dispatch<TM_VALUES_FAST_CONFIG>(fast_config(p), [&](auto config) -> int {
        if constexpr (decltype(config)::value == 0)
            return cudaErrorInvalidValue;   // never chosen
        else
            return FastConfigOf<config>::launch(p, facts);
    });
}

// The block tile of the configuration the launcher runs for this problem and sm_count.
void tm_matmul_fast_tile(const tm_problem *p, long long *bm, long long *bn)
{
    *bm = *bn = 0;   // stays 0 x 0 for a value not in the list (the glue refuses those first)
    tm_dispatch<TM_VALUES_FAST_CONFIG>(fast_config(p), [&](auto config) {
        if constexpr (decltype(config)::value != 0) {
            *bm = FastConfigOf<config>::Shape::BM;
            *bn = FastConfigOf<config>::Shape::BN;
        }
        return 0;
    });
}

// A is read once per block-column of C, B once per block-row, C written once (float32).
double tm_matmul_fast_bytes(const tm_problem *p)
{
    long long bm, bn;
    tm_matmul_fast_tile(p, &bm, &bn);
    return tm_blocked_matmul_bytes(p, bm, bn);
}
