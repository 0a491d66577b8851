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

// Global -> registers: one K step's tiles. Thread t's e-th float4 of A is row f / (BK/4),
// k-quad f % (BK/4) of the tile (f = t + e*THREADS): 4 threads read a row's 64 contiguous bytes.
// Of B: row f / (BN/4), column quad f % (BN/4): a warp reads 512 contiguous bytes.
template <typename Cfg, typename Index>
__device__ __forceinline__ void load_tiles(const float *__restrict__ A, const float *__restrict__ B,
                                           Index M, Index N, Index K, bool vec_a, bool vec_b,
                                           Index block_row, Index block_col, Index tile_k,
                                           float4 *a_next, float4 *b_next)
{
    const int t = threadIdx.x, BK = Cfg::BK, BN = Cfg::BN;
#pragma unroll
    for (int e = 0; e < Cfg::A_LOADS; ++e) {
        const int f = t + e * Cfg::THREADS;
        a_next[e] = load4<Index>(A, block_row + f / (BK / 4), tile_k + (f % (BK / 4)) * 4, M, K, vec_a);
    }
#pragma unroll
    for (int e = 0; e < Cfg::B_LOADS; ++e) {
        const int f = t + e * Cfg::THREADS;
        b_next[e] = load4<Index>(B, tile_k + f / (BN / 4), block_col + (f % (BN / 4)) * 4, K, N, vec_b);
    }
}

// Registers -> one shared stage: A transposed (k-major, As[k * A_STRIDE + m]), B as is
// (Bs[k * BN + n]).
template <typename Cfg>
__device__ __forceinline__ void store_tiles(float *As, float *Bs, const float4 *a_next,
                                            const float4 *b_next)
{
    const int t = threadIdx.x, BK = Cfg::BK, BN = Cfg::BN, AS = Cfg::A_STRIDE;
#pragma unroll
    for (int e = 0; e < Cfg::A_LOADS; ++e) {
        const int f = t + e * Cfg::THREADS, m = f / (BK / 4), k = (f % (BK / 4)) * 4;
        As[(k + 0) * AS + m] = a_next[e].x;
        As[(k + 1) * AS + m] = a_next[e].y;
        As[(k + 2) * AS + m] = a_next[e].z;
        As[(k + 3) * AS + m] = a_next[e].w;
    }
#pragma unroll
    for (int e = 0; e < Cfg::B_LOADS; ++e) {
        const int f = t + e * Cfg::THREADS;
        *reinterpret_cast<float4 *>(&Bs[(f / (BN / 4)) * BN + (f % (BN / 4)) * 4]) = b_next[e];
    }
}

// ---- cp.async (sm_80+): global -> shared without passing through registers. ----
// cp_async16 copies `bytes` (0 or 16) bytes and zero-fills the rest of the 16; cp_async4 the
// same for one float (0 or 4 bytes). commit closes a group of copies; wait<N> returns once at
// most N of the committed groups are still in flight. On the emulator the copy happens at once
// (the destination stage is not being read: the kernel's barriers ensure that), so commit and
// wait have nothing to do; the same plain copies serve GPUs older than sm_80 (Turing), which
// have no cp.async, in the default multi-architecture build.
#if defined(TM_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
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

// A only: global -> registers and registers -> a shared stage (transposed), as in
// load_tiles / store_tiles.
template <typename Cfg, typename Index>
__device__ __forceinline__ void load_a(const float *__restrict__ A, Index M, Index K, bool vec_a,
                                       Index block_row, Index tile_k, float4 *a_next)
{
    const int t = threadIdx.x, BK = Cfg::BK;
#pragma unroll
    for (int e = 0; e < Cfg::A_LOADS; ++e) {
        const int f = t + e * Cfg::THREADS;
        a_next[e] = load4<Index>(A, block_row + f / (BK / 4), tile_k + (f % (BK / 4)) * 4, M, K, vec_a);
    }
}

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


// ---- The main loop, shared by both kernels ----
// K steps [step_begin, step_end) of one BM x BN tile of C, added into acc. Double buffered:
// while the block computes on one shared stage, the next step's tiles are on their way. With
// S_B = 0 both operands go global -> registers -> shared (two stages); with S_B >= 2, B goes
// by cp.async into S_B stages (the copy for step s + S_B - 1 issued at step s; one commit per
// step, empty ones too, so that wait<S_B - 2> at the end of step s means B of step s + 1 has
// landed) and A as before. Every step ends with a barrier, so on return the stages are free.
template <typename Cfg, int S_B, typename Index>
__device__ __forceinline__ void fast_k_steps(const float *__restrict__ A, const float *__restrict__ B,
                                             Index M, Index N, Index K, bool vec_a, bool vec_b,
                                             Index block_row, Index block_col, Index step_begin,
                                             Index step_end, float *smem, int m0, int n0,
                                             float (&acc)[Cfg::TM][Cfg::TN])
{
    const int BN = Cfg::BN, BK = Cfg::BK, AS = Cfg::A_STRIDE;
    const int TM = Cfg::TM, TN = Cfg::TN, RM = Cfg::RM, RN = Cfg::RN;
    float *const As0 = smem;                     // A stage s: As0 + s * A_STAGE (2 stages)
    float *const Bs0 = smem + 2 * Cfg::A_STAGE;  // B stage s: Bs0 + s * B_STAGE (2 or S_B)
    // The next K step's tiles, in registers between their global load and their shared store
    // (B only without cp.async).
    float4 a_next[Cfg::A_LOADS], b_next[S_B == 0 ? Cfg::B_LOADS : 1];

    if constexpr (S_B == 0) {
        if (step_begin < step_end) {
            load_tiles<Cfg, Index>(A, B, M, N, K, vec_a, vec_b, block_row, block_col,
                                   step_begin * BK, a_next, b_next);
            store_tiles<Cfg>(As0, Bs0, a_next, b_next);
        }
    } else {
#pragma unroll
        for (int s = 0; s < S_B - 1; ++s) {
            if (step_begin + s < step_end)
                copy_b_async<Cfg, Index>(B, N, K, vec_b, block_col, (step_begin + s) * BK,
                                         Bs0 + s * Cfg::B_STAGE);
            cp_async_commit();
        }
        if (step_begin < step_end) {
            load_a<Cfg, Index>(A, M, K, vec_a, block_row, step_begin * BK, a_next);
            store_a<Cfg>(As0, a_next);
        }
        cp_async_wait<S_B - 2>();
    }
    __syncthreads();  // the first stage is filled

    int b_stage = 0;  // (step - step_begin) % S_B, with cp.async
    for (Index step = step_begin; step < step_end; ++step) {
        const int a_stage = (int)((step - step_begin) & 1);
        const bool has_next = step + 1 < step_end;  // the same for every thread of the block
        if constexpr (S_B == 0) {
            if (has_next)  // in flight while we compute below
                load_tiles<Cfg, Index>(A, B, M, N, K, vec_a, vec_b, block_row, block_col,
                                       (step + 1) * BK, a_next, b_next);
        } else {
            // B of step + S_B - 1 into the stage read at step - 1 (free since the last barrier).
            const int b_fill = b_stage == 0 ? S_B - 1 : b_stage - 1;
            if (step + S_B - 1 < step_end)
                copy_b_async<Cfg, Index>(B, N, K, vec_b, block_col, (step + S_B - 1) * BK,
                                         Bs0 + b_fill * Cfg::B_STAGE);
            cp_async_commit();
            if (has_next) load_a<Cfg, Index>(A, M, K, vec_a, block_row, (step + 1) * BK, a_next);
        }
        const float *const Ak = As0 + a_stage * Cfg::A_STAGE + m0;  // this thread's A column
        const float *const Bk = Bs0 + (S_B == 0 ? a_stage : b_stage) * Cfg::B_STAGE + n0;
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
#pragma unroll
            for (int rm = 0; rm < RM; ++rm) {
                const float4 v = *reinterpret_cast<const float4 *>(Ak + kk * AS + rm * 32);
                a[rm * 4 + 0] = v.x; a[rm * 4 + 1] = v.y; a[rm * 4 + 2] = v.z; a[rm * 4 + 3] = v.w;
            }
#pragma unroll
            for (int rn = 0; rn < RN; ++rn) {
                const float4 v = *reinterpret_cast<const float4 *>(Bk + kk * BN + rn * 16);
                b[rn * 4 + 0] = v.x; b[rn * 4 + 1] = v.y; b[rn * 4 + 2] = v.z; b[rn * 4 + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        // The other stage was last read before the previous barrier: safe to overwrite.
        if constexpr (S_B == 0) {
            if (has_next)
                store_tiles<Cfg>(As0 + (a_stage ^ 1) * Cfg::A_STAGE, Bs0 + (a_stage ^ 1) * Cfg::B_STAGE,
                                 a_next, b_next);
        } else {
            if (has_next) store_a<Cfg>(As0 + (a_stage ^ 1) * Cfg::A_STAGE, a_next);
            cp_async_wait<S_B - 2>();  // this thread's copies of B for step + 1 have landed
            b_stage = b_stage + 1 == S_B ? 0 : b_stage + 1;
        }
        __syncthreads();  // the next stage is filled, and this one is free again
    }
}

// A thread's TM x TN outputs: rows row0 + rm*32 + i, columns col0 + rn*16 + j.
template <typename Cfg, typename Index>
__device__ __forceinline__ void store_c(float *__restrict__ C, Index M, Index N, bool vec_c,
                                        Index row0, Index col0, const float (&acc)[Cfg::TM][Cfg::TN])
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

// Where a thread's outputs sit in the block tile: rows m0 + rm*32 + i, columns n0 + rn*16 + j
// (the block's warps in a WARPS_M x WARPS_N grid, a warp's lanes in 8 x 4 pieces of 4 x 4).
template <typename Cfg>
__device__ __forceinline__ int thread_row0()
{
    return (threadIdx.x / 32 / Cfg::WARPS_N) * Cfg::WM + (threadIdx.x % 32 / Cfg::LANES_N) * 4;
}
template <typename Cfg>
__device__ __forceinline__ int thread_col0()
{
    return (threadIdx.x / 32 % Cfg::WARPS_N) * Cfg::WN + (threadIdx.x % 32 % Cfg::LANES_N) * 4;
}

}  // namespace

// One block per tile of C. Index is int when every matrix has fewer than 2^31 elements (cheaper
// address arithmetic, fewer registers), long long otherwise. Shared memory is dynamic (the large
// tiles need more than 48 KB): the stages of A (transposed) then those of B.
template <typename Cfg, int S_B, typename Index>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
matmul_fast_kernel(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C,
                   Index M, Index N, Index K, int vec_a, int vec_b, int vec_c,
                   unsigned first_block_y)
{
    TM_DYNAMIC_SHARED(float, smem);
    const int m0 = thread_row0<Cfg>(), n0 = thread_col0<Cfg>();
    const Index block_row = (Index)(blockIdx.y + first_block_y) * Cfg::BM;
    const Index block_col = (Index)blockIdx.x * Cfg::BN;
    float acc[Cfg::TM][Cfg::TN];
#pragma unroll
    for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = 0.0f;
    fast_k_steps<Cfg, S_B, Index>(A, B, M, N, K, vec_a, vec_b, block_row, block_col, 0,
                                  (K + Cfg::BK - 1) / Cfg::BK, smem, m0, n0, acc);
    store_c<Cfg, Index>(C, M, N, vec_c, block_row + m0, block_col + n0, acc);
}

// ---- Stream-K: no partial last wave ----
// With one block per tile, a grid of T tiles on P resident blocks runs ceil(T / P) waves, and
// the last is partly idle: 4096^3 in 128 x 256 tiles is 512 tiles on an H100's 132 SMs, 3.88
// waves run as 4 (3% of the time idle); 8192^3 is 15.5 waves run as 16. Stream-K (Osama et al.,
// PPoPP 2023) launches exactly P persistent blocks. The first tiles go one per block, in whole
// waves, as before; the last tiles (one wave plus the remainder) are cut along K: their K steps,
// taken in order, are shared out evenly, so every block does the same amount of work. A tile
// split between blocks is summed by the last of them to finish: each writes its partial tile to
// scratch, and an atomic count per tile says who is last (no block ever waits for another, so
// no co-residency is assumed and the emulator runs it as it is). The last adds the partials in
// block order, so results do not depend on which finished first.
// Extra global traffic: at most two partial tiles written and read per block.
struct StreamKPlan {
    long long tiles_n;   // tiles along N (tile t is row t / tiles_n, column t % tiles_n)
    long long dp_tiles;  // tiles [0, dp_tiles): one block each, block b takes b, b + blocks, ...
    long long k_steps;   // K steps per tile
    long long sk_steps;  // K steps of tiles [dp_tiles, tiles), shared out evenly
    int blocks;          // the grid
};

// The block whose share of the stream-K steps holds step i, and the first step of block b's share.
__device__ __forceinline__ long long streamk_block_of(const StreamKPlan &plan, long long i)
{
    return ((i + 1) * plan.blocks - 1) / plan.sk_steps;
}
__device__ __forceinline__ long long streamk_share_begin(const StreamKPlan &plan, long long b)
{
    return b * plan.sk_steps / plan.blocks;
}

template <typename Cfg, int S_B, typename Index>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
matmul_fast_streamk_kernel(const float *__restrict__ A, const float *__restrict__ B,
                           float *__restrict__ C, Index M, Index N, Index K, int vec_a, int vec_b,
                           int vec_c, StreamKPlan plan, float4 *__restrict__ partials,
                           unsigned *__restrict__ arrivals)
{
    // Partial tiles: two slots per block (the first and the last piece of its share; the
    // pieces between are whole tiles), each THREADS x PIECES float4s, a warp's 32 adjacent.
    const int PIECES = Cfg::TM * Cfg::TN / 4;
    TM_DYNAMIC_SHARED(float, smem);
    __shared__ int last_to_arrive;
    const int t = threadIdx.x, m0 = thread_row0<Cfg>(), n0 = thread_col0<Cfg>();
    const long long block = blockIdx.x;
    float acc[Cfg::TM][Cfg::TN];

    // Work items, in order: whole tiles block, block + blocks, ... below dp_tiles, then the
    // pieces of this block's share of the stream-K steps [share_begin, share_end).
    const long long share_begin = streamk_share_begin(plan, block);
    const long long share_end = streamk_share_begin(plan, block + 1);
    long long next_whole_tile = block, next_step = share_begin;
    while (next_whole_tile < plan.dp_tiles || next_step < share_end) {
        long long tile, sk_tile = -1, tile_first = 0;  // sk_tile >= 0: a stream-K piece
        Index begin = 0, end = (Index)plan.k_steps;    // K steps of the tile to do
        if (next_whole_tile < plan.dp_tiles) {
            tile = next_whole_tile;
            next_whole_tile += plan.blocks;
        } else {
            sk_tile = next_step / plan.k_steps;
            tile_first = sk_tile * plan.k_steps;
            tile = plan.dp_tiles + sk_tile;
            begin = (Index)(next_step - tile_first);
            if (share_end - tile_first < plan.k_steps) end = (Index)(share_end - tile_first);
            next_step = tile_first + end;
        }
        const Index block_row = (Index)(tile / plan.tiles_n) * Cfg::BM;
        const Index block_col = (Index)(tile % plan.tiles_n) * Cfg::BN;
#pragma unroll
        for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
            for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = 0.0f;
        fast_k_steps<Cfg, S_B, Index>(A, B, M, N, K, vec_a, vec_b, block_row, block_col, begin,
                                      end, smem, m0, n0, acc);
        if (begin > 0 || end < (Index)plan.k_steps) {
            // A piece of a shared tile: leave it in this block's slot, then count arrivals.
            const int slot = tile_first + begin == share_begin ? 0 : 1;
            float4 *const mine = partials + (block * 2 + slot) * PIECES * Cfg::THREADS + t;
#pragma unroll
            for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
                for (int j = 0; j < Cfg::TN; j += 4)
                    __stcg(mine + (i * Cfg::TN + j) / 4 * Cfg::THREADS,
                           make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
            const long long first_block = streamk_block_of(plan, tile_first);
            const long long last_block = streamk_block_of(plan, tile_first + plan.k_steps - 1);
            __threadfence();  // this block's partial is visible before its arrival is counted
            __syncthreads();
            if (t == 0)
                last_to_arrive =
                    atomicAdd(&arrivals[sk_tile], 1u) == (unsigned)(last_block - first_block);
            __syncthreads();
            if (!last_to_arrive) continue;
            __threadfence();  // the others' partials, as they were when they were counted
#pragma unroll
            for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
                for (int j = 0; j < Cfg::TN; j += 4) {
                    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    for (long long b = first_block; b <= last_block; ++b) {  // in block order
                        const int b_slot = streamk_share_begin(plan, b) >= tile_first ? 0 : 1;
                        const float4 v = __ldcg(partials + (b * 2 + b_slot) * PIECES * Cfg::THREADS +
                                                (i * Cfg::TN + j) / 4 * Cfg::THREADS + t);
                        sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
                    }
                    acc[i][j] = sum.x; acc[i][j + 1] = sum.y; acc[i][j + 2] = sum.z; acc[i][j + 3] = sum.w;
                }
        }
        store_c<Cfg, Index>(C, M, N, vec_c, block_row + m0, block_col + n0, acc);
    }
}

// The configurations `config` picks from (0 = choose by problem size).
//                      BM   BN  BK  warps  min blocks/SM
typedef FastConfig<128, 128, 16, 2, 4, 2> FastLarge;    // 1: 256 threads, 8 x 8 per thread
typedef FastConfig<128, 128, 8, 2, 4, 2> FastLargeK8;   // 2: the same with half the K step
typedef FastConfig<64, 64, 16, 2, 2, 4> FastSmall;      // 3: 128 threads, 4 x 8 per thread
typedef FastConfig<128, 256, 32, 2, 4, 1> FastWide;     // 4: 256 threads, 8 x 16 per thread
typedef FastConfig<128, 256, 16, 2, 4, 1> FastWideK16;  // 5: the same with half the K step
// 6, 7: FastWide with B copied by cp.async, 2 or 3 shared stages of B

enum { SCHEDULE_CHOOSE = 0, SCHEDULE_TILES = 1, SCHEDULE_STREAMK = 2 };

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// Multiprocessors of the current device (0 when it cannot be asked). Asked on every call: the
// emulator's count is its worker threads, which can change between calls.
static int multiprocessor_count()
{
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    return n;
}

template <typename Cfg, int S_B>
static size_t fast_shared_bytes()
{
    return (size_t)(2 * Cfg::A_STAGE + (S_B == 0 ? 2 : S_B) * Cfg::B_STAGE) * sizeof(float);
}

// Grid and split for the stream-K kernel: as many blocks as fit on the device at once. Whole
// waves but the last go one tile per block; the last full wave and the remainder are shared
// out by K steps (so each block's share is one to two tiles' worth: few splits). When the
// tiles fill whole waves, or K is empty, every tile goes whole.
// Shared memory past 48 KB must be asked for, per kernel, before a launch or an occupancy query.
template <typename Kernel>
static cudaError_t allow_shared(Kernel kernel, size_t shared)
{
    if (shared <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
}

template <typename Cfg, int S_B, typename Index>
static StreamKPlan streamk_plan(const tm_problem *p)
{
    auto kernel = matmul_fast_streamk_kernel<Cfg, S_B, Index>;
    const size_t shared = fast_shared_bytes<Cfg, S_B>();
    int per_sm = 0;
    if (allow_shared(kernel, shared) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::THREADS, shared) != cudaSuccess ||
        per_sm < 1) {
        (void)cudaGetLastError();  // the launch reports what is wrong
        per_sm = 1;
    }
    const long long sms = multiprocessor_count() > 0 ? multiprocessor_count() : 1;
    StreamKPlan plan;
    plan.tiles_n = tm_ceil_div(p->N, Cfg::BN);
    plan.k_steps = (p->K + Cfg::BK - 1) / Cfg::BK;
    const long long tiles = plan.tiles_n * tm_ceil_div(p->M, Cfg::BM);
    long long blocks = sms * per_sm;
    const long long waves = tiles / blocks;
    plan.dp_tiles = (tiles % blocks == 0 || plan.k_steps == 0) ? tiles : (waves > 0 ? waves - 1 : 0) * blocks;
    plan.sk_steps = (tiles - plan.dp_tiles) * plan.k_steps;
    if (plan.dp_tiles == 0 && plan.sk_steps < blocks) blocks = plan.sk_steps;  // no empty shares
    plan.blocks = (int)blocks;
    return plan;
}

// Scratch of the stream-K kernel: two partial tiles per block, then one arrival count per
// stream-K tile.
template <typename Cfg>
static size_t streamk_partial_bytes(const StreamKPlan &plan)
{
    return plan.sk_steps ? (size_t)plan.blocks * 2 * Cfg::BM * Cfg::BN * sizeof(float) : 0;
}
template <typename Cfg>
static size_t streamk_scratch_bytes(const StreamKPlan &plan)
{
    return plan.sk_steps ? streamk_partial_bytes<Cfg>(plan) + (size_t)(plan.sk_steps / plan.k_steps) * sizeof(unsigned)
                         : 0;
}

template <typename Cfg, int S_B, typename Index>
static int launch_fast_index(const tm_problem *p, bool streamk, tm_launch_facts *facts)
{
    const int vec_a = p->K % 4 == 0 && aligned16(p->in0);
    const int vec_b = p->N % 4 == 0 && aligned16(p->in1);
    const int vec_c = p->N % 4 == 0 && aligned16(p->out);
    const size_t shared = fast_shared_bytes<Cfg, S_B>();
    const dim3 block(Cfg::THREADS);
    cudaError_t err;
    if (streamk) {
        auto kernel = matmul_fast_streamk_kernel<Cfg, S_B, Index>;
        if ((err = allow_shared(kernel, shared))) return err;
        const StreamKPlan plan = streamk_plan<Cfg, S_B, Index>(p);
        float4 *const partials = (float4 *)p->scratch;
        unsigned *const arrivals = (unsigned *)((char *)p->scratch + streamk_partial_bytes<Cfg>(plan));
        if (plan.sk_steps &&
            (err = cudaMemsetAsync(arrivals, 0, (size_t)(plan.sk_steps / plan.k_steps) * sizeof(unsigned), 0)))
            return err;
        const dim3 grid((unsigned)plan.blocks);
        if ((err = tm_launch(kernel, grid, block, shared, (const float *)p->in0, (const float *)p->in1,
                             (float *)p->out, (Index)p->M, (Index)p->N, (Index)p->K, vec_a, vec_b, vec_c,
                             plan, partials, arrivals)))
            return err;
        tm_facts_set(facts, (const void *)kernel, grid, block, shared, shared, 1);
        return cudaSuccess;
    }
    auto kernel = matmul_fast_kernel<Cfg, S_B, Index>;
    if ((err = allow_shared(kernel, shared))) return err;
    const dim3 grid(tm_ceil_div(p->N, Cfg::BN), tm_ceil_div(p->M, Cfg::BM));
    int launch_err = tm_launch_row_chunks((const void *)kernel, grid, block, shared, facts,
                                          [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, shared, (const float *)p->in0, (const float *)p->in1,
                         (float *)p->out, (Index)p->M, (Index)p->N, (Index)p->K, vec_a, vec_b, vec_c,
                         first_block_y);
    });
    facts->dynamic_shared_bytes = shared;
    return launch_err;
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

// schedule 0: stream-K for the 128 x 256 tiles (the large problems, where a partial last wave
// is the whole of the difference), one block per tile for the others.
static bool choose_streamk(const tm_problem *p, int config)
{
    const int schedule = p->params[1];
    if (schedule != SCHEDULE_CHOOSE) return schedule == SCHEDULE_STREAMK;
    return config >= 4;
}

// What the entry points need of one configuration (tile shape Cfg, stages of B S_B, index type).
struct FastVariant {
    int config;  // the configuration number, after config 0 has chosen; -1: no such config
    int (*launch)(const tm_problem *p, bool streamk, tm_launch_facts *facts);
    double (*scratch_bytes)(const tm_problem *p);  // of the stream-K schedule
    double (*global_bytes)(const tm_problem *p, bool streamk);
};

template <typename Cfg, int S_B, typename Index>
static double fast_streamk_scratch(const tm_problem *p)
{
    return (double)streamk_scratch_bytes<Cfg>(streamk_plan<Cfg, S_B, Index>(p));
}

// Operand tiles loaded once per tile of C, C stored once; stream-K adds its partial tiles
// (written once and read once; counted as if every block left two).
template <typename Cfg, int S_B, typename Index>
static double fast_global_bytes(const tm_problem *p, bool streamk)
{
    double bytes = 4.0 * ((double)p->M * p->K * tm_ceil_div(p->N, Cfg::BN) +
                          (double)p->K * p->N * tm_ceil_div(p->M, Cfg::BM) + (double)p->M * p->N);
    if (streamk) bytes += 2.0 * (double)streamk_partial_bytes<Cfg>(streamk_plan<Cfg, S_B, Index>(p));
    return bytes;
}

template <typename Cfg, int S_B>
static FastVariant fast_variant(int config, const tm_problem *p)
{
    if (tm_int_indices_suffice(p))
        return {config, launch_fast_index<Cfg, S_B, int>, fast_streamk_scratch<Cfg, S_B, int>,
                fast_global_bytes<Cfg, S_B, int>};
    return {config, launch_fast_index<Cfg, S_B, long long>, fast_streamk_scratch<Cfg, S_B, long long>,
            fast_global_bytes<Cfg, S_B, long long>};
}

static FastVariant fast_variant_for(const tm_problem *p)
{
    const int config = p->params[0] == 0 ? choose_fast_config(p) : p->params[0];
    switch (config) {
    case 1: return fast_variant<FastLarge, 0>(config, p);
    case 2: return fast_variant<FastLargeK8, 0>(config, p);
    case 3: return fast_variant<FastSmall, 0>(config, p);
    case 4: return fast_variant<FastWide, 0>(config, p);
    case 5: return fast_variant<FastWideK16, 0>(config, p);
    case 6: return fast_variant<FastWide, 2>(config, p);
    case 7: return fast_variant<FastWide, 3>(config, p);
    default: return {-1, NULL, NULL, NULL};
    }
}

int tm_matmul_fast_launch(const tm_problem *p, tm_launch_facts *facts)
{
    if (p->dtype != TM_F32) return cudaErrorInvalidValue;  // the glue refuses float64 first
    const FastVariant v = fast_variant_for(p);
    if (v.config < 0) return cudaErrorInvalidValue;
    return v.launch(p, choose_streamk(p, v.config), facts);
}

double tm_matmul_fast_scratch(const tm_problem *p)
{
    const FastVariant v = fast_variant_for(p);
    return v.config < 0 || !choose_streamk(p, v.config) ? 0.0 : v.scratch_bytes(p);
}

double tm_matmul_fast_bytes(const tm_problem *p)
{
    const FastVariant v = fast_variant_for(p);
    return v.config < 0 ? 0.0 : v.global_bytes(p, choose_streamk(p, v.config));
}
