// matmul_tf32x3_sm90a.h: tf32x3's WGMMA kernels (sm_90a), included by matmul_tf32x3.cu (its
// header comment says what tf32x3 computes and why) where the CUDA compiler runs; their device
// code exists in its sm_90a pass only (__CUDA_ARCH_FEAT_SM90_ALL), elsewhere they trap.
#pragma once
#include "common.h"

#include "cp_async.h"
#include "wgmma.h"

// ---- sm_90a: the same products by WGMMA ----
//
// Lesson: asynchronous tensor-core products whose operands the tensor core reads from shared
// memory itself, so that the registers hold only accumulators, and loads that run ahead without
// registers. A block of 2 warpgroups (256 threads) computes a 128 x 128 tile of C, each
// warpgroup 64 x 128 with wgmma.mma_async.m64n128k8.f32.tf32.tf32 (3 per k-step of 8: a_small
// b_big, a_big b_small, a_big b_big; 12 per 32-deep k-tile). TF32 wgmma reads both operands
// K-major, so B (K x N row-major) is transposed on its way into shared memory; the split has to
// be written there anyway, so one pass does both. Each k-tile of A and B is copied by cp.async
// (zero-filled outside the matrices: any M, N, K) into a ring of RAW_STAGES plain FP32 tiles,
// RAW_STAGES k-tiles ahead; each thread then splits what it copied itself (so the ring needs no
// barrier) into big and small in the wgmma layout of one of two split stages, while the other
// stage's wgmma run: 128-byte rows of 32 TF32 per row of A or column of B, their 16-byte chunks
// XOR-swizzled by row (the descriptors' 128B swizzle; stores and tensor-core reads without bank
// conflicts). Then fence.proxy.async, wgmma.wait_group 0 and one barrier per k-tile.
// Each k-tile's products are summed by the tensor core into a zeroed fragment (scale-d = 0 on
// the first wgmma) and then added to the running sum in FP32, round to nearest: plainly
// (W3_PLAIN), Kahan-compensated (W3_KAHAN), or into a partial sum that is added to a second one
// every 16 k-tiles (W3_TWO_LEVEL: K / 512 + 16 roundings on a path instead of K / 32, for one
// FADD per k-tile, where Kahan costs four and a select).
// Global traffic: as the mma.sync kernel's 128 x 128 blocking (A read N / 128 times, B M / 128
// times). Shared memory: 2 split stages x (A, B) x (big, small) x 128 x 32 TF32 (128 KiB) and
// RAW_STAGES x 32 KiB of copies: 224 KiB, one block per SM; per k-tile the wgmma read 144 KiB
// of it and the copy and split move 128 KiB more. Measured (H200, 8192^3, the probe's W3_NO_*
// rows): the products alone 8.7 ms, the copies and splits alone 8.8 ms, both 15.1 ms: they
// overlap only in part (shared-memory bandwidth, by this count); with 246-250 registers (acc,
// extra, part: 192) no staging registers or double-buffered accumulators fit. Measured and not
// kept: warp specialisation (a producer warpgroup for copies and splits, setmaxnreg 40, two
// consumer warpgroups for the wgmma, setmaxnreg 232, per-stage mbarriers instead of the block
// barrier) 16.95 ms against this kernel's 15.26 in the same run; with two producer warpgroups
// 17.05 (products alone 7.66, data alone 10.7): the halves share shared-memory bandwidth.
// The registry now runs the variant below it (A from registers, W3R_*); this one stays as the
// probe's reference.
#define W3_BM 128
#define W3_BN 128
#define W3_BK 32
#define W3_THREADS 256                            // two warpgroups
#define W3_RAW_STAGES 3                           // k-tiles copied ahead
#define W3_OPERAND_FLOATS (W3_BM * W3_BK)         // an operand's big (or small) part, one stage
#define W3_STAGE_FLOATS (4 * W3_OPERAND_FLOATS)   // A big, A small, B big, B small
#define W3_RAW_FLOATS (2 * W3_OPERAND_FLOATS)     // A, B as copied
#define W3_SHARED_BYTES \
    ((2 * W3_STAGE_FLOATS + W3_RAW_STAGES * W3_RAW_FLOATS) * sizeof(float) + 1024)   // +align
#define W3_TWO_LEVEL_TILES 16   // k-tiles per partial sum (W3_TWO_LEVEL)

enum { W3_PLAIN, W3_KAHAN, W3_TWO_LEVEL };

static_assert(W3_BM == W3_BN, "A's and B's shared layouts are the same function of (row, k)");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)   // the helpers of the sm_90a device pass
// Where element (row, k) of a 128 x 32 K-major operand lies in a split stage (floats): row after
// row of 128 bytes, 16-byte chunk k / 4 stored at chunk (k / 4) ^ (row % 8) (wgmma's 128B
// swizzle: 8-row atoms of 1024 bytes). (Unswizzled 8 x 16-byte core matrices measured 5% slower.)
static __device__ __forceinline__ int w3_offset(int row, int k)
{
    return row * W3_BK + (((k / 4) ^ (row % 8)) * 4) + k % 4;
}

// x = big + small as tf32_split, rounding with integer instructions (add half a TF32 unit to
// the magnitude, clear the 13 low bits: to nearest, ties away, as cvt.rna, which the compiler
// expands to more instructions for sm_90a). An infinite or NaN x is all small part, x itself
// (the addition would carry a NaN's payload into its sign).
static __device__ __forceinline__ void w3_split1(float x, unsigned &big, unsigned &small)
{
    const bool finite = fabsf(x) <= FLT_MAX;
    big = finite ? (__float_as_uint(x) + 0x1000u) & 0xFFFFE000u : 0u;
    const unsigned rest = __float_as_uint(x - __uint_as_float(big));
    small = finite ? (rest + 0x1000u) & 0xFFFFE000u : __float_as_uint(x);
}

// This thread's share of a k-tile, copied into a ring slot: A as 4 chunks of 4 consecutive k
// (chunk f = i * 256 + tid: row f / 64 * 8 + f % 8, k (f / 8) % 8 * 4; a warp copies 8 rows x 64
// contiguous bytes) at row * 32 + chunk ^ (row % 8); B as one 4 x 4 block, k 4 * (tid % 8) + j,
// n 4 * (tid / 8) + q (a warp copies 8 rows x 64 contiguous bytes), each row's chunk at
// k * 128 + (n / 4) ^ (k / 4): 8 consecutive lanes' 16-byte chunks in distinct banks.
template <bool VEC, typename Index>
static __device__ __forceinline__ void w3_copy(float *raw, const float *A, const float *B, Index M,
                                               Index N, Index K, Index row0, Index col0,
                                               Index tile_k)
{
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int f = i * W3_THREADS + tid, r = f / 64 * 8 + f % 8, c = (f / 8) % 8;
        float *dst = &raw[r * W3_BK + ((c ^ (r % 8)) * 4)];
        const Index ar = row0 + r, ac = tile_k + c * 4;
        if (VEC) {   // K % 4 == 0: a chunk is all in or all out
            const bool in = ar < M && ac < K;
            cp_async16(dst, in ? &A[ar * K + ac] : A, in ? 16 : 0);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool in = ar < M && ac + j < K;
                cp_async4(dst + j, in ? &A[ar * K + ac + j] : A, in ? 4 : 0);
            }
        }
    }
    const int k4 = tid % 8, n4 = tid / 8;
    const Index bc = col0 + n4 * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int k = k4 * 4 + j;
        float *dst = &raw[W3_OPERAND_FLOATS + k * W3_BN + ((n4 ^ k4) * 4)];
        const Index br = tile_k + k;
        if (VEC) {   // N % 4 == 0
            const bool in = br < K && bc < N;
            cp_async16(dst, in ? &B[br * N + bc] : B, in ? 16 : 0);
        } else {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const bool in = br < K && bc + q < N;
                cp_async4(dst + q, in ? &B[br * N + bc + q] : B, in ? 4 : 0);
            }
        }
    }
}

// What w3_copy copied (this thread's own copies: no barrier needed once cp.async.wait_group
// says they landed), split into big and small, into a split stage: 16-byte loads and stores, B's
// 4 x 4 block transposed in registers (8 consecutive lanes write distinct banks).
static __device__ __forceinline__ void w3_split(float *stage, const float *raw)
{
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int f = i * W3_THREADS + tid, r = f / 64 * 8 + f % 8, c = (f / 8) % 8;
        const float4 v = *(const float4 *)&raw[r * W3_BK + ((c ^ (r % 8)) * 4)];
        uint4 big, small;
        w3_split1(v.x, big.x, small.x);
        w3_split1(v.y, big.y, small.y);
        w3_split1(v.z, big.z, small.z);
        w3_split1(v.w, big.w, small.w);
        const int off = w3_offset(r, c * 4);
        *(uint4 *)&stage[off] = big;
        *(uint4 *)&stage[W3_OPERAND_FLOATS + off] = small;
    }
    const int k4 = tid % 8, n4 = tid / 8;
    float b[4][4];   // b[j][q]: k 4 * k4 + j, n 4 * n4 + q
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float4 v =
            *(const float4 *)&raw[W3_OPERAND_FLOATS + (k4 * 4 + j) * W3_BN + ((n4 ^ k4) * 4)];
        b[j][0] = v.x;
        b[j][1] = v.y;
        b[j][2] = v.z;
        b[j][3] = v.w;
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {   // column n = 4 * n4 + q: k 4 * k4 .. + 3
        uint4 big, small;
        w3_split1(b[0][q], big.x, small.x);
        w3_split1(b[1][q], big.y, small.y);
        w3_split1(b[2][q], big.z, small.z);
        w3_split1(b[3][q], big.w, small.w);
        const int off = w3_offset(n4 * 4 + q, k4 * 4);
        *(uint4 *)&stage[2 * W3_OPERAND_FLOATS + off] = big;
        *(uint4 *)&stage[3 * W3_OPERAND_FLOATS + off] = small;
    }
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One k-tile's products (part, summed by the tensor core from zero) added to the running sum in
// FP32, rounded to nearest: plainly, Kahan-compensated (extra: the lost low parts), or in two
// levels (every W3_TWO_LEVEL_TILES k-tiles the partial sum acc joins the outer one, extra).
template <int SUM>
static __device__ __forceinline__ void w3_add(float acc[64], float extra[64], const float part[64],
                                              int &inner)
{
    if (SUM == W3_TWO_LEVEL && ++inner == W3_TWO_LEVEL_TILES) {
        inner = 0;
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            extra[i] += acc[i] + part[i];
            acc[i] = 0.0f;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            if (SUM == W3_KAHAN) {
                const float y = part[i] - extra[i];
                const float sum = acc[i] + y;
                const float lost = (sum - acc[i]) - y;
                extra[i] = lost != lost ? 0.0f : lost;   // sum infinite
                acc[i] = sum;
            } else {
                acc[i] += part[i];
            }
        }
    }
}

// Two adjacent values of C, (r, c) and (r, c + 1), those inside it.
template <bool VEC, typename Index>
static __device__ __forceinline__ void w3_store_pair(float *__restrict__ C, float v0, float v1,
                                                     Index M, Index N, Index r, Index c)
{
    if (r >= M) return;
    if (VEC && c + 1 < N) {
        *(float2 *)&C[r * N + c] = make_float2(v0, v1);
    } else {
        if (c < N) C[r * N + c] = v0;
        if (c + 1 < N) C[r * N + c + 1] = v1;
    }
}

// The final value of accumulator i (acc and extra as w3_add leaves them).
template <int SUM>
static __device__ __forceinline__ float w3_final(const float acc[64], const float extra[64], int i)
{
    return SUM == W3_KAHAN ? acc[i] - extra[i] : SUM == W3_TWO_LEVEL ? extra[i] + acc[i] : acc[i];
}

// The warpgroup's 64 x 128 piece of C (rows from row0, columns from col0), this thread's 64
// values (wgmma's accumulator layout: wgmma.h; i = 4j + 2h + q at row 16 warp + g + 8h, column
// 8j + 2t + q), each the sum's final value.
template <bool VEC, int SUM, typename Index>
static __device__ __forceinline__ void w3_store(float *__restrict__ C, const float acc[64],
                                                const float extra[64], Index M, Index N, Index row0,
                                                Index col0, int tid)
{
    const int warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {   // rows g and g + 8
            const int i = 4 * j + 2 * h;
            w3_store_pair<VEC>(C, w3_final<SUM>(acc, extra, i), w3_final<SUM>(acc, extra, i + 1), M,
                               N, row0 + warp * 16 + g + 8 * h, col0 + j * 8 + 2 * t);
        }
    }
}

#endif

// SUM: W3_PLAIN, W3_KAHAN or W3_TWO_LEVEL (above). LEAVE_OUT
// (benchmarks/tf32x3_probe.cu's timing of the parts; wrong results): W3_NO_DATA, no copies or
// splits after the first k-tile's; W3_NO_PRODUCTS, no wgmma.
enum { W3_ALL, W3_NO_DATA, W3_NO_PRODUCTS };
template <bool VEC, typename Index, int SUM, int LEAVE_OUT = W3_ALL>
__global__ void __launch_bounds__(W3_THREADS, 1)
    matmul_tf32x3_wgmma_kernel(const float *__restrict__ A, const float *__restrict__ B,
                               float *__restrict__ C, Index M, Index N, Index K,
                               unsigned first_block_y)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(16) unsigned char w3_bytes[];
    // 1024-byte aligned (the 128B swizzle's atoms): split stages first, then the copy ring
    const unsigned misalign = (unsigned)__cvta_generic_to_shared(w3_bytes) & 1023u;
    float *const split0 = (float *)(w3_bytes + (misalign ? 1024 - misalign : 0));
    float *const raw0 = split0 + 2 * W3_STAGE_FLOATS;
    const int tid = threadIdx.x, warpgroup = tid / 128;
    const Index row0 = (Index)(blockIdx.y + first_block_y) * W3_BM;
    const Index col0 = (Index)blockIdx.x * W3_BN;
    const Index tiles = (K + W3_BK - 1) / W3_BK;
    // descriptors: this base plus an operand's offset in 16-byte units; 128B swizzle, 8-row
    // groups 1024 bytes apart (the leading offset is unused with this swizzle: 1)
    const uint64_t desc0 = wgmma_desc(split0, 16, 1024) | (1ull << 62);

    float acc[64], extra[64], part[64];   // extra: KAHAN's lost low parts, or TWO_LEVEL's outer sum
#pragma unroll
    for (int i = 0; i < 64; ++i)
        acc[i] = extra[i] = part[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < W3_RAW_STAGES; ++s) {
        if (s < tiles)
            w3_copy<VEC>(raw0 + s * W3_RAW_FLOATS, A, B, M, N, K, row0, col0, (Index)s * W3_BK);
        cp_async_commit();
    }
    if (tiles > 0) {
        cp_async_wait<W3_RAW_STAGES - 1>();
        w3_split(split0, raw0);
    }
    fence_proxy_async_shared();
    __syncthreads();
    int raw_free = 0;   // the ring slot of k-tile kt (split already): the next copy goes there
    int inner = 0;   // k-tiles in TWO_LEVEL's partial sum
    for (Index kt = 0; kt < tiles; ++kt) {
        const int stage = (int)(kt & 1);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < (LEAVE_OUT == W3_NO_PRODUCTS ? 0 : W3_BK / 8); ++s) {
            // offsets in 16-byte units: k-step s, this warpgroup's 64 rows of A
            const int a_big = (stage * W3_STAGE_FLOATS + w3_offset(warpgroup * 64, s * 8)) / 4;
            const int a_small = a_big + W3_OPERAND_FLOATS / 4;
            const int b_big =
                (stage * W3_STAGE_FLOATS + 2 * W3_OPERAND_FLOATS + w3_offset(0, s * 8)) / 4;
            const int b_small = b_big + W3_OPERAND_FLOATS / 4;
            wgmma_m64n128k8_tf32(part, desc0 + a_small, desc0 + b_big, s > 0);
            wgmma_m64n128k8_tf32(part, desc0 + a_big, desc0 + b_small, 1);
            wgmma_m64n128k8_tf32(part, desc0 + a_big, desc0 + b_big, 1);
        }
        wgmma_commit();
        // while they run: copy k-tile kt + RAW_STAGES, split k-tile kt + 1
        if (kt + W3_RAW_STAGES < tiles && LEAVE_OUT != W3_NO_DATA)
            w3_copy<VEC>(raw0 + raw_free * W3_RAW_FLOATS, A, B, M, N, K, row0, col0,
                         (kt + W3_RAW_STAGES) * W3_BK);
        cp_async_commit();
        raw_free = raw_free == W3_RAW_STAGES - 1 ? 0 : raw_free + 1;   // now k-tile kt + 1's
        if (kt + 1 < tiles && LEAVE_OUT != W3_NO_DATA) {
            cp_async_wait<W3_RAW_STAGES - 1>();
            w3_split(split0 + (stage ^ 1) * W3_STAGE_FLOATS, raw0 + raw_free * W3_RAW_FLOATS);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 64; ++i)
            wgmma_fence_operand(part[i]);
        w3_add<SUM>(acc, extra, part, inner);
        fence_proxy_async_shared();   // this thread's split stores, visible to the next wgmma
        __syncthreads();   // the next stage is written; this one's wgmma are done (all threads)
    }
    cp_async_wait<0>();

    w3_store<VEC, SUM>(C, acc, extra, M, N, row0 + warpgroup * 64, col0, tid);
#else
    __trap();   // built without sm_90a: the launcher never chooses this kernel then
#endif
}

// ---- sm_90a, A from registers (W3R_*): the same products with wgmma reading A from registers ----
//
// Each thread copies by cp.async exactly the A elements its own wgmma fragments need (rows
// 16w + g and 16w + g + 8 of its warpgroup's 64, 8 consecutive k of the k-tile, two 16-byte
// chunks a row), loads them from the ring one k-step pair at a time and splits them in registers;
// only B is split into shared memory. The k of a k-tile is permuted, identically for A and B
// (the product does not change): wgmma k 8s + t + 4h of k-step s is k-tile k
// 16 (s / 2) + 4t + 2 (s % 2) + h, so a thread's fragments for all 4 k-steps are two 16-byte
// chunks of each of its rows, and the 4 lanes of a row copy 64 contiguous bytes (whole sectors;
// 8t + 2s + h, 32 bytes a lane: copies and splits alone 10.8 ms instead of 6.9); B's 16-byte
// chunk c of a column holds k 16 (c / 4) + c % 4 + 4j, j = 0 .. 3 (its copying thread takes
// those rows). A's split stores, A's split stages and the wgmma's shared reads of A are gone: per
// k-tile the wgmma read 96 KiB, the copies and splits move 80 KiB (A 16 KiB in, 16 out; B 16 in,
// 16 out, 32 stored). Global traffic: as the kernel above.
// k-steps are committed one group each so that a k-step's A registers (8) are rewritten only
// after wgmma.wait_group 1 says their products are done: 16 A registers beside the 192.
// A k-tile's last products are still running at the barrier that ends it: the next k-tile waits
// for them (wgmma.wait_group 0) and adds the fragment to the running sum after that barrier, so
// the tensor core works through the barrier's wait. That needs 3 split stages of B: the stage
// written in k-tile kt + 1 held k-tile kt - 2, whose products every thread waited for before
// k-tile kt's barrier. Shared memory: 3 split stages (96 KiB) and a ring of W3R_RAW = 4 k-tiles
// (128 KiB). 255 registers, no spills (the variants for 64-bit indices or unaligned operands
// spill 4 to 24 bytes). Measured (H200, 8192^3, the probe, A and B distinct, 2026-11-29; the same
// kernel varied by up to 5% from run to run): 13.0-13.8 ms against 14.5 with the sum before the
// barrier (2 split stages, the kernel before this one); bench 13.11 ms, 83.9 TFLOP/s, 163% of
// SGEMM (84.6, 165%, at 4096^3); the products alone 8.3 ms (9.4 before), the copies and splits
// alone 7.5. Measured and not kept: warpgroup 1 summing k-steps 2, 3 of one k-tile and 0, 1 of the
// next (the two waits for the tensor core at different times) 13.7-14.6 ms; the copies and splits
// after k-step 0 or 1 rather than 2, alike within the runs' spread.
#define W3R_A_CHUNK(i) ((i) * W3_THREADS * 4)   // this thread's chunk i: + tid * 4 floats
#define W3R_STAGE_FLOATS (2 * W3_OPERAND_FLOATS)   // B big, B small
#define W3R_SPLIT_STAGES 3
#define W3R_RAW 4   // k-tiles in the copy ring
#define W3R_SHARED_BYTES \
    ((W3R_SPLIT_STAGES * W3R_STAGE_FLOATS + W3R_RAW * W3_RAW_FLOATS) * sizeof(float) + 1024)
#define W3R_GROUP 16   // tile-rows per group of the launch order (w3r_tile)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The k-tile row of B that wgmma k 4 c + j holds (the permutation above).
static __device__ __forceinline__ int w3r_b_row(int c, int j)
{
    return 16 * (c / 4) + c % 4 + 4 * j;
}

// This thread's share of a k-tile into a ring slot. A: chunk i = 2 * hi + q, row
// 16 * (tid / 32) + g + 8 * hi (tid / 32: the warp in the block, 4 per warpgroup of 64 rows), k
// 16q + 4t .. + 3, stored at W3R_A_CHUNK(i) + 4 tid (a warp's chunks contiguous). B: rows
// w3r_b_row(k4, j) (k4 = tid % 8), columns 4 n4 .. + 3 (n4 = tid / 8), row k's chunk at
// k * 128 + (n4 ^ k4) * 4.
template <bool VEC, typename Index>
static __device__ __forceinline__ void w3r_copy(float *raw, const float *A, const float *B, Index M,
                                                Index N, Index K, Index row0, Index col0,
                                                Index tile_k)
{
    const int tid = threadIdx.x, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = (tid / 32) * 16 + g + 8 * (i / 2), c = 16 * (i % 2) + 4 * t;
        float *dst = &raw[W3R_A_CHUNK(i) + tid * 4];
        const Index ar = row0 + r, ac = tile_k + c;
        if (VEC) {
            const bool in = ar < M && ac < K;
            cp_async16(dst, in ? &A[ar * K + ac] : A, in ? 16 : 0);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool in = ar < M && ac + j < K;
                cp_async4(dst + j, in ? &A[ar * K + ac + j] : A, in ? 4 : 0);
            }
        }
    }
    const int k4 = tid % 8, n4 = tid / 8;
    const Index bc = col0 + n4 * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int k = w3r_b_row(k4, j);
        float *dst = &raw[W3_OPERAND_FLOATS + k * W3_BN + ((n4 ^ k4) * 4)];
        const Index br = tile_k + k;
        if (VEC) {
            const bool in = br < K && bc < N;
            cp_async16(dst, in ? &B[br * N + bc] : B, in ? 16 : 0);
        } else {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const bool in = br < K && bc + q < N;
                cp_async4(dst + q, in ? &B[br * N + bc + q] : B, in ? 4 : 0);
            }
        }
    }
}

// B of what w3r_copy copied (this thread's own copies), split into a B-only split stage:
// column n's chunk k4 (wgmma k 4 k4 .. + 3) holds k-tile rows w3r_b_row(k4, 0 .. 3).
static __device__ __forceinline__ void w3r_split_b(float *stage, const float *raw)
{
    const int tid = threadIdx.x, k4 = tid % 8, n4 = tid / 8;
    float b[4][4];   // b[j][q]: k k4 + 8j, n 4 n4 + q
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float4 v =
            *(const float4 *)&raw[W3_OPERAND_FLOATS + w3r_b_row(k4, j) * W3_BN + ((n4 ^ k4) * 4)];
        b[j][0] = v.x;
        b[j][1] = v.y;
        b[j][2] = v.z;
        b[j][3] = v.w;
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        uint4 big, small;
        w3_split1(b[0][q], big.x, small.x);
        w3_split1(b[1][q], big.y, small.y);
        w3_split1(b[2][q], big.z, small.z);
        w3_split1(b[3][q], big.w, small.w);
        const int off = w3_offset(n4 * 4 + q, k4 * 4);
        *(uint4 *)&stage[off] = big;
        *(uint4 *)&stage[W3_OPERAND_FLOATS + off] = small;
    }
}

// k-step s's A fragment from this thread's chunks lo (row g) and hi (row g + 8) of its k-half
// s / 2: wgmma k t (h = 0) and t + 4 (h = 1) are chunk elements 2 (s % 2) + h.
static __device__ __forceinline__ void w3r_split_a(float4 lo, float4 hi, bool odd, unsigned big[4],
                                                   unsigned small[4])
{
    w3_split1(odd ? lo.z : lo.x, big[0], small[0]);
    w3_split1(odd ? hi.z : hi.x, big[1], small[1]);
    w3_split1(odd ? lo.w : lo.y, big[2], small[2]);
    w3_split1(odd ? hi.w : hi.y, big[3], small[3]);
}

// k-step s's three products (B's offsets in 16-byte units from desc0).
static __device__ __forceinline__ void w3r_products(float part[64], const unsigned big[4],
                                                    const unsigned small[4], uint64_t desc_b_big,
                                                    uint64_t desc_b_small, int accumulate)
{
    wgmma_m64n128k8_tf32_rs(part, small, desc_b_big, accumulate);
    wgmma_m64n128k8_tf32_rs(part, big, desc_b_small, 1);
    wgmma_m64n128k8_tf32_rs(part, big, desc_b_big, 1);
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Tile t of the launch order (row `tile_y`, column `tile_x` of C's tiles): groups of W3R_GROUP
// tile-rows, each column by column, so that the blocks running at once share their k-tiles in
// L2 (a wave of 132 blocks reads 16 row-tiles of A and 8-9 column-tiles of B: 97 MiB at
// 8192^3, against 2 of A and all 64 of B, 264 MiB, in row-major order). Measured (the probe, one
// run): 13.1 ms against 13.3 with groups of 8 and 13.8 row-major, within the runs' spread.
template <typename Index>
static __device__ __forceinline__ void w3r_tile(Index t, Index tiles_x, Index tiles_y,
                                                Index &tile_y, Index &tile_x)
{
    const Index group = t / (W3R_GROUP * tiles_x), first = group * W3R_GROUP;
    const Index rows = tiles_y - first < W3R_GROUP ? tiles_y - first : W3R_GROUP;
    const Index local = t - first * tiles_x;
    tile_y = first + local % rows;
    tile_x = local / rows;
}
#endif

// The tiles of C in w3r_tile's order: with splits = 1, a block computes tile
// (blockIdx.y + first_block_y) * gridDim.x + blockIdx.x whole, if it is below `tail` (blocks past
// it exit); with splits > 1 (launched in clusters of `splits` blocks), block b computes k-tiles
// [tiles_k * p / splits, tiles_k * (p + 1) / splits) of tile tail + b / splits (p = b % splits,
// its rank in the cluster) and the cluster adds its sums through distributed shared memory.
template <bool VEC, typename Index, int SUM, int LEAVE_OUT = W3_ALL>
__global__ void __launch_bounds__(W3_THREADS, 1)
    matmul_tf32x3_wgmma_rs_kernel(const float *__restrict__ A, const float *__restrict__ B,
                                  float *__restrict__ C, Index M, Index N, Index K,
                                  unsigned first_block_y, Index tail, int splits)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(16) unsigned char w3_bytes[];
    const unsigned misalign = (unsigned)__cvta_generic_to_shared(w3_bytes) & 1023u;
    float *const split0 = (float *)(w3_bytes + (misalign ? 1024 - misalign : 0));
    float *const raw0 = split0 + W3R_SPLIT_STAGES * W3R_STAGE_FLOATS;
    const int tid = threadIdx.x, warpgroup = tid / 128;
    const Index tiles_k = (K + W3_BK - 1) / W3_BK;
    const Index tiles_x = (N + W3_BN - 1) / W3_BN, tiles_y = (M + W3_BM - 1) / W3_BM;
    const int piece = (int)(blockIdx.x % splits);
    Index tile = tail + blockIdx.x / splits, kt0 = 0, kt1 = tiles_k;   // k-tiles [kt0, kt1)
    if (splits == 1) {
        tile = ((Index)blockIdx.y + (Index)first_block_y) * tiles_x + (Index)blockIdx.x;
        if (tile >= tail) return;
    } else {
        kt0 = tiles_k * piece / splits;
        kt1 = tiles_k * (piece + 1) / splits;
    }
    Index tile_y, tile_x;
    w3r_tile(tile, tiles_x, tiles_y, tile_y, tile_x);
    const Index row0 = tile_y * W3_BM, col0 = tile_x * W3_BN;
    const uint64_t desc0 = wgmma_desc(split0, 16, 1024) | (1ull << 62);

    float acc[64], extra[64], part[64];
#pragma unroll
    for (int i = 0; i < 64; ++i)
        acc[i] = extra[i] = part[i] = 0.0f;

        // the ring: k-tile x in slot (x - kt0) % W3R_RAW, copied W3R_RAW - 1 k-tiles ahead
#pragma unroll
    for (int s = 0; s < W3R_RAW - 1; ++s) {
        if (kt0 + s < kt1)
            w3r_copy<VEC>(raw0 + s * W3_RAW_FLOATS, A, B, M, N, K, row0, col0, (kt0 + s) * W3_BK);
        cp_async_commit();
    }
    if (kt0 < kt1) {
        cp_async_wait<W3R_RAW - 2>();
        w3r_split_b(split0, raw0);
    }
    fence_proxy_async_shared();
    __syncthreads();
    int slot = 0, stage = 0, inner = 0;   // k-tile kt's ring slot and split stage
    unsigned big[2][4], small[2][4];   // k-steps 2m and 2m + 1's A fragments (m = 0, 1)
    for (Index kt = kt0; kt < kt1; ++kt) {
        const int copy_slot = slot == 0 ? W3R_RAW - 1 : slot - 1;   // k-tile kt - 1's: all read
        const int next_slot = slot == W3R_RAW - 1 ? 0 : slot + 1;
        const int next_stage = stage == W3R_SPLIT_STAGES - 1 ? 0 : stage + 1;
        const float *ra = raw0 + slot * W3_RAW_FLOATS + tid * 4;
        const int b_big0 = stage * W3R_STAGE_FLOATS / 4;   // 16-byte units
        float4 lo, hi;
#pragma unroll
        for (int s = 0; s < W3_BK / 8; ++s) {
            if (s % 2 == 0) {   // this k-half's chunks (k-steps s, s + 1)
                lo = *(const float4 *)&ra[W3R_A_CHUNK(s / 2)];
                hi = *(const float4 *)&ra[W3R_A_CHUNK(s / 2 + 2)];
            }
            if (s == 0) {   // the last k-tile's products done: into the running sum (at kt0:
                wgmma_wait<0>();   // the zeroed fragment, no change)
#pragma unroll
                for (int i = 0; i < 64; ++i)
                    wgmma_fence_operand(part[i]);
                w3_add<SUM>(acc, extra, part, inner);
            } else if (s > 1) {
                wgmma_wait<1>();   // k-step s - 2's products done: its A registers free
            }
            w3r_split_a(lo, hi, s % 2, big[s % 2], small[s % 2]);
            wgmma_fence();
            if (LEAVE_OUT != W3_NO_PRODUCTS)
                w3r_products(part, big[s % 2], small[s % 2],
                             desc0 + b_big0 + w3_offset(0, 8 * s) / 4,
                             desc0 + b_big0 + (W3_OPERAND_FLOATS + w3_offset(0, 8 * s)) / 4, s > 0);
            wgmma_commit();
            if (s == 2) {   // while they run: copy k-tile kt + W3R_RAW - 1, split B of kt + 1
                if (kt + W3R_RAW - 1 < kt1 && LEAVE_OUT != W3_NO_DATA)
                    w3r_copy<VEC>(raw0 + copy_slot * W3_RAW_FLOATS, A, B, M, N, K, row0, col0,
                                  (kt + W3R_RAW - 1) * W3_BK);
                cp_async_commit();
                if (kt + 1 < kt1 && LEAVE_OUT != W3_NO_DATA) {
                    cp_async_wait<W3R_RAW - 2>();
                    w3r_split_b(split0 + next_stage * W3R_STAGE_FLOATS,
                                raw0 + next_slot * W3_RAW_FLOATS);
                }
            }
        }
        slot = next_slot;
        stage = next_stage;
        fence_proxy_async_shared();   // this thread's split stores, visible to the next wgmma
        __syncthreads();
    }
    cp_async_wait<0>();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < 64; ++i)
        wgmma_fence_operand(part[i]);
    w3_add<SUM>(acc, extra, part, inner);

    if (splits == 1) {
        w3_store<VEC, SUM>(C, acc, extra, M, N, row0 + warpgroup * 64, col0, tid);
        return;
    }
    // Each block's sums to its shared memory (value i of thread tid at i * 256 + tid: no bank
    // conflicts), then block `piece` adds values [64 piece / splits, 64 (piece + 1) / splits)
    // of every thread position across the cluster in rank order and stores them.
    float *const sums = split0;
    __syncthreads();   // all wgmma and copies of the block done: its shared memory is free
#pragma unroll
    for (int i = 0; i < 64; ++i)
        sums[i * W3_THREADS + tid] = w3_final<SUM>(acc, extra, i);
    cluster_sync();
    const int warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    for (int i = 64 * piece / splits; i < 64 * (piece + 1) / splits; i += 2) {
        float v[2];
        for (int q = 0; q < 2; ++q) {
            const float *const own = &sums[(i + q) * W3_THREADS + tid];
            v[q] = *cluster_peer(own, 0);
            for (int r = 1; r < splits; ++r)
                v[q] += *cluster_peer(own, r);
        }
        const int j = i / 4, h = (i / 2) % 2;
        w3_store_pair<VEC>(C, v[0], v[1], M, N, row0 + warpgroup * 64 + warp * 16 + g + 8 * h,
                           col0 + j * 8 + 2 * t);
    }
    cluster_sync();   // no block leaves while the others read its shared memory
#else
    __trap();
#endif
}
