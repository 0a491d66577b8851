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
// benchmarks/fast_notes.md for the measurements behind each choice. Configs 6 and 7 copy B with
// cp.async (sm_80+) into 2 or 3 shared stages instead (matmul_fast_async_kernel); config 0 takes
// 6 for the largest problems, where it measured +0.7%.
//
// Any shape works: every load is guarded. A float4 load is used where the 4 elements are inside
// the matrix and 16-byte aligned (the row length is a multiple of 4 and the base pointer is
// aligned; the launcher checks once per call); otherwise the same 4 elements are loaded one by
// one with bounds checks, 0 outside. The choice is per load, never around a barrier.
// float32 only (float64 would need half the tile per register budget; use `regtile`).
#include "common.h"
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
    static const int RM = WM / (LANES_M * 4), RN = WN / (LANES_N * 4);  // ... of 4x4 pieces, RM x RN times
    static const int TM = 4 * RM, TN = 4 * RN;               // outputs per thread: TM x TN
    static const int A_STRIDE = BM + 4;                      // +4 floats: fewer store conflicts
    static const int A_LOADS = BM * BK / 4 / THREADS;        // float4 loads per thread per K step
    static const int B_LOADS = BK * BN / 4 / THREADS;
    static const int A_STAGE = BK * A_STRIDE, B_STAGE = BK * BN;  // floats per shared stage
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
__device__ __forceinline__ void load_tile(const float *__restrict__ X, Index rows, Index cols, bool vec,
                                          Index row0, Index col0, float4 *next)
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
    load_tile<Cfg::THREADS, Cfg::A_LOADS, Cfg::BK / 4, Index>(A, M, K, vec_a, block_row, tile_k, a_next);
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
    load_tile<Cfg::THREADS, Cfg::B_LOADS, Cfg::BN / 4, Index>(B, K, N, vec_b, tile_k, block_col, b_next);
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
__device__ __forceinline__ void store_results(float *__restrict__ C, const float (&acc)[Cfg::TM][Cfg::TN],
                                              Index M, Index N, bool vec_c, Index row0, Index col0)
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

// ---- cp.async (sm_80+): global -> shared without passing through registers. ----
// cp_async16 copies `bytes` (0 or 16) bytes and zero-fills the rest of the 16; cp_async4 the
// same for one float (0 or 4 bytes). commit closes a group of copies; wait<N> returns once at
// most N of the committed groups are still in flight. On the emulator the copy happens at once
// (the destination stage is not being read: the kernel's barriers ensure that), so commit and
// wait have nothing to do; the same plain copies serve GPUs older than sm_80 (Turing), which
// have no cp.async, in the default multi-architecture build.
// The emulator's profile build (TM_EMU_PROFILE, docs/profile.md) counts what an sm_80+ GPU runs:
// one cp.async per call, which tm_profile_cp_async (csrc/profile/emu_profile.cpp) copies and
// counts as Nsight Compute does (ldgsts requests and sectors, not a global load and a shared store).
#if defined(TM_EMU_PROFILE)
extern "C" void tm_profile_cp_async(void *dst, const void *src, int size, int src_bytes);
__device__ __forceinline__ void cp_async16(float *dst, const float *src, int bytes)
{
    tm_profile_cp_async(dst, src, 16, bytes);
}
__device__ __forceinline__ void cp_async4(float *dst, const float *src, int bytes)
{
    tm_profile_cp_async(dst, src, 4, bytes);
}
__device__ __forceinline__ void cp_async_commit() {}
template <int N> __device__ __forceinline__ void cp_async_wait() {}
#elif defined(TM_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
__device__ __forceinline__ void cp_async16(float *dst, const float *src, int bytes)
{
    for (int i = 0; i < 4; ++i) dst[i] = 4 * i < bytes ? src[i] : 0.0f;
}
__device__ __forceinline__ void cp_async4(float *dst, const float *src, int bytes)
{
    dst[0] = bytes > 0 ? src[0] : 0.0f;
}
__device__ __forceinline__ void cp_async_commit() {}
template <int N> __device__ __forceinline__ void cp_async_wait() {}
#else
__device__ __forceinline__ void cp_async16(float *dst, const float *src, int bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(float *dst, const float *src, int bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

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
// (columns rn * 16 + 0..3), then their outer product into acc. The order of the multiply-adds is
// CUTLASS's (thread/mma_sm50.h): 2 x 2 blocks (m,n) (m+1,n) (m+1,n+1) (m,n+1), each sharing a
// multiplicand with the one before, so that both operands of most FFMAs come from the operand
// reuse cache; the blocks run down a column pair, then back up the next. ptxas keeps this order
// only in kernels named as below (kernel_tag); elsewhere it re-sorts the FFMAs into column sweeps.
template <typename Cfg>
__device__ __forceinline__ void warp_mma_k(const float *Ak, const float *Bk,
                                           float (&acc)[Cfg::TM][Cfg::TN])
{
    const int TM = Cfg::TM, TN = Cfg::TN;
    float a[TM], b[TN];
#pragma unroll
    for (int rm = 0; rm < Cfg::RM; ++rm) {
        const float4 v = *reinterpret_cast<const float4 *>(Ak + rm * 32);
        a[rm * 4 + 0] = v.x; a[rm * 4 + 1] = v.y; a[rm * 4 + 2] = v.z; a[rm * 4 + 3] = v.w;
    }
#pragma unroll
    for (int rn = 0; rn < Cfg::RN; ++rn) {
        const float4 v = *reinterpret_cast<const float4 *>(Bk + rn * 16);
        b[rn * 4 + 0] = v.x; b[rn * 4 + 1] = v.y; b[rn * 4 + 2] = v.z; b[rn * 4 + 3] = v.w;
    }
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

}  // namespace

// Index is int when every matrix has fewer than 2^31 elements (cheaper address arithmetic,
// fewer registers), long long otherwise. Shared memory is dynamic (the large tiles need more
// than 48 KB): two stages of A (transposed) then two stages of B.
template <typename Cfg, typename Index, typename Tag = kernel_tag_default_ffma_order>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
matmul_fast_kernel(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C,
                   Index M, Index N, Index K, int vec_a, int vec_b, int vec_c,
                   unsigned first_block_y)
{
    const int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, AS = Cfg::A_STRIDE;
    const int TM = Cfg::TM, TN = Cfg::TN;
    TM_DYNAMIC_SHARED(float, smem);
    float *const As0 = smem;                       // stage s: As0 + s * A_STAGE
    float *const Bs0 = smem + 2 * Cfg::A_STAGE;    // stage s: Bs0 + s * B_STAGE

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
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    if (num_k_steps > 0) {
        load_tiles<Cfg, Index>(A, B, M, N, K, vec_a, vec_b, block_row, block_col, 0, a_next, b_next);
        store_tiles<Cfg>(As0, Bs0, a_next, b_next);
    }
    __syncthreads();  // stage 0 is filled

    for (Index step = 0; step < num_k_steps; ++step) {
        const int stage = (int)(step & 1);
        const bool has_next = step + 1 < num_k_steps;  // the same for every thread of the block
        if (has_next)  // in flight while we compute below
            load_tiles<Cfg, Index>(A, B, M, N, K, vec_a, vec_b, block_row, block_col,
                                   (step + 1) * BK, a_next, b_next);
        const float *const Ak = As0 + stage * Cfg::A_STAGE + m0;  // this thread's A column
        const float *const Bk = Bs0 + stage * Cfg::B_STAGE + n0;  // this thread's B row
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) warp_mma_k<Cfg>(Ak + kk * AS, Bk + kk * BN, acc);
        // The other stage was last read before the previous barrier: safe to overwrite.
        if (has_next)
            store_tiles<Cfg>(As0 + (stage ^ 1) * Cfg::A_STAGE, Bs0 + (stage ^ 1) * Cfg::B_STAGE,
                             a_next, b_next);
        __syncthreads();  // the next stage is filled, and this one is free again
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
    float *const As0 = smem;                       // stage s: As0 + s * A_STAGE (2 stages)
    float *const Bs0 = smem + 2 * Cfg::A_STAGE;    // stage s: Bs0 + s * B_STAGE (S_B stages)

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
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

#pragma unroll
    for (int s = 0; s < S_B - 1; ++s) {
        if (s < num_k_steps)
            copy_b_async<Cfg, Index>(B, N, K, vec_b, block_col, (Index)s * BK, Bs0 + s * Cfg::B_STAGE);
        cp_async_commit();
    }
    if (num_k_steps > 0) {
        load_a<Cfg, Index>(A, M, K, vec_a, block_row, 0, a_next);
        store_a<Cfg>(As0, a_next);
    }
    cp_async_wait<S_B - 2>();
    __syncthreads();  // stage 0 of A and of B is filled

    int b_stage = 0;  // step % S_B
    for (Index step = 0; step < num_k_steps; ++step) {
        const int a_stage = (int)(step & 1);
        const bool has_next = step + 1 < num_k_steps;
        // B of step + S_B - 1 into the stage read at step - 1 (free since the last barrier).
        const int b_fill = b_stage == 0 ? S_B - 1 : b_stage - 1;
        if (step + S_B - 1 < num_k_steps)
            copy_b_async<Cfg, Index>(B, N, K, vec_b, block_col, (step + S_B - 1) * BK,
                                     Bs0 + b_fill * Cfg::B_STAGE);
        cp_async_commit();
        if (has_next)
            load_a<Cfg, Index>(A, M, K, vec_a, block_row, (step + 1) * BK, a_next);
        const float *const Ak = As0 + a_stage * Cfg::A_STAGE + m0;
        const float *const Bk = Bs0 + b_stage * Cfg::B_STAGE + n0;
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) warp_mma_k<Cfg>(Ak + kk * AS, Bk + kk * BN, acc);
        if (has_next) store_a<Cfg>(As0 + (a_stage ^ 1) * Cfg::A_STAGE, a_next);
        cp_async_wait<S_B - 2>();  // this thread's copies of B for step + 1 have landed
        __syncthreads();           // everyone's have, A's next stage is stored, this stage is free
        b_stage = b_stage + 1 == S_B ? 0 : b_stage + 1;
    }

    store_results<Cfg, Index>(C, acc, M, N, vec_c, block_row + m0, block_col + n0);
}

// The configurations `config` picks from (0 = choose by problem size).
//                      BM   BN  BK  warps  min blocks/SM
typedef FastConfig<128, 128, 16, 2, 4, 2> FastLarge;    // 1: 256 threads, 8 x 8 per thread
typedef FastConfig<128, 128, 8, 2, 4, 2> FastLargeK8;   // 2: the same with half the K step
typedef FastConfig<64, 64, 16, 2, 2, 4> FastSmall;      // 3: 128 threads, 4 x 8 per thread
typedef FastConfig<128, 256, 32, 2, 4, 1> FastWide;     // 4: 256 threads, 8 x 16 per thread
typedef FastConfig<128, 256, 16, 2, 4, 1> FastWideK16;  // 5: the same with half the K step
// 6, 7: FastWide with B copied by cp.async, 2 or 3 shared stages of B (matmul_fast_async_kernel)

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// S_B = 0: matmul_fast_kernel; S_B >= 2: matmul_fast_async_kernel with S_B stages of B.
template <typename Cfg, int S_B, typename Index>
static auto fast_kernel_for()
{
    if constexpr (S_B == 0) return matmul_fast_kernel<Cfg, Index>;
    else return matmul_fast_async_kernel<Cfg, S_B, Index>;
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
    const size_t shared = S_B == 0 ? (size_t)Cfg::SHARED_BYTES
                                   : (size_t)(2 * Cfg::A_STAGE + S_B * Cfg::B_STAGE) * sizeof(float);
    if (shared > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)shared);
        if (err != cudaSuccess) return err;
    }
    int err = tm_launch_row_chunks((const void *)kernel, grid, block, shared, facts,
                                   [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, shared, (const float *)p->in0, (const float *)p->in1,
                         (float *)p->out, (Index)p->M, (Index)p->N, (Index)p->K, vec_a, vec_b, vec_c,
                         first_block_y);
    });
    facts->dynamic_shared_bytes = shared;
    return err;
}

template <typename Cfg, int S_B = 0>
static int launch_fast(const tm_problem *p, tm_launch_facts *facts)
{
    return tm_int_indices_suffice(p) ? launch_fast_index<Cfg, S_B, int>(p, facts)
                                     : launch_fast_index<Cfg, S_B, long long>(p, facts);
}

// Multiprocessors of the current device, asked once (0 when it cannot be asked).
static int multiprocessor_count()
{
    static int cached = -1;
    if (cached < 0) {
        int device = 0, n = 0;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
            (void)cudaGetLastError();
            n = 0;
        }
        cached = n;
    }
    return cached;
}

// config 0: 128 x 256 tiles (config 4) when there are at least two per multiprocessor, else
// 128 x 128 tiles when there are at least as many as multiprocessors, else 64 x 64 tiles (4x the
// blocks) so that small problems still fill the device. Measured on an H100 (132 SMs): at 1024^3
// 64 x 64 gives 85% of cuBLAS against 58% for 128 x 128; at 2048^3 (256 tiles of 128 x 128,
// 128 of 128 x 256) 128 x 128 gives 98%; at 4096^3 and 8192^3 128 x 256 / BK 32 gives 87-89%
// against 84-85% for 128 x 128. From at least 8 such tiles per multiprocessor, config 6 (the same
// tiles with B copied by cp.async): at 8192^3 (15.5 tiles per SM) 89.0% of cuBLAS against 88.3%
// for config 4; at 4096^3 (3.9 per SM) it lost, 86.6% against 87.1%, so 4 stays there. The
// threshold of 8 lies between the two measured sizes; sizes in between were not measured.
static int choose_fast_config(const tm_problem *p)
{
    const int sms = multiprocessor_count() > 0 ? multiprocessor_count() : 132;
    const long long wide_blocks = (long long)tm_ceil_div(p->M, 128) * tm_ceil_div(p->N, 256);
    const long long large_blocks = (long long)tm_ceil_div(p->M, 128) * tm_ceil_div(p->N, 128);
    if (wide_blocks >= 8LL * sms) return 6;
    if (wide_blocks >= 2LL * sms) return 4;
    return large_blocks >= sms ? 1 : 3;
}

int tm_matmul_fast_launch(const tm_problem *p, tm_launch_facts *facts)
{
    if (p->dtype != TM_F32) return cudaErrorInvalidValue;  // the glue refuses float64 first
    int config = p->params[0];
    if (config == 0) config = choose_fast_config(p);
    switch (config) {
    case 1: return launch_fast<FastLarge>(p, facts);
    case 2: return launch_fast<FastLargeK8>(p, facts);
    case 3: return launch_fast<FastSmall>(p, facts);
    case 4: return launch_fast<FastWide>(p, facts);
    case 5: return launch_fast<FastWideK16>(p, facts);
    case 6: return launch_fast<FastWide, 2>(p, facts);
    case 7: return launch_fast<FastWide, 3>(p, facts);
    default: return cudaErrorInvalidValue;
    }
}

double tm_matmul_fast_bytes(const tm_problem *p)
{
    int config = p->params[0];
    if (config == 0) config = choose_fast_config(p);
    long long bm = 128, bn = 128;
    if (config == 3) bm = bn = 64;
    if (config >= 4) bn = 256;
    return 4.0 * ((double)p->M * p->K * tm_ceil_div(p->N, bn) +
                  (double)p->K * p->N * tm_ceil_div(p->M, bm) + (double)p->M * p->N);
}
