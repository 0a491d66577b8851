// matmul_tf32x3.cu: FP32 matmul at FP32 accuracy on TF32 tensor cores, by the 3xTF32 split
// (CUTLASS's "3xTF32"; issue 47). cuda only, sm_80+; on compute capability 9.0, when this file
// was built for sm_90a (setup.py does so where TILEDMM_CUDA_ARCHS has 90), a WGMMA kernel
// (below) runs instead of the mma.sync one.
//
// TF32 keeps 10 fraction bits of FP32's 23. Each FP32 input x is split into two TF32 numbers,
//     big = tf32(x)            (cvt.rna: round to nearest, ties away)
//     small = tf32(x - big)    (what big missed, itself rounded to TF32)
// so that big + small carries about 21 bits of x. Then
//     a * b ~ a_big * b_big + a_big * b_small + a_small * b_big
// (a_small * b_small is below FP32's precision and dropped): three tensor-core products per
// FP32 product, the two small ones first. The tensor core accumulates with truncation (DESIGN.md,
// "Tensor cores"), which biases long sums of positive terms; so each k-step of 8 is summed by the
// tensor core into a zeroed fragment and then added to the running sum in FP32 with
// round-to-nearest: truncation acts on 8-term sums only, and the FP32 additions cost the FMA
// pipe, which the tensor cores leave idle.
//
// Structure, as a tuned FFMA kernel's (fast): a block of 8 warps computes a 128 x 128 tile of C,
// each warp a 64 x 32 piece as 4 x 4 tiles of mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32.
// A and B reach shared memory by cp.async, 3 stages of 128 x 32 and 32 x 128 FP32 tiles, so the
// next tiles' global loads overlap this tile's products; out-of-range elements are zero-filled.
// Each warp splits its own fragments from shared memory (the split costs the ALU pipe, idle
// too). The padded shared rows (36 and 136 floats) make the fragment reads conflict-free.
// Global traffic: A is read N / 128 times and B M / 128 times, as for any 128 x 128 blocking.
// Measured on the H200 and not kept (no faster, within the runs' 4% noise): splitting each k-tile
// once per block into big and small shared tiles behind a second barrier, and rounding to TF32
// with integer instructions instead of cvt. With acc, comp and part at 64 registers each, one
// block of 8 warps fills an SM's registers; more speed needs fewer registers per product and
// asynchronous products (WGMMA, sm_90a: operands read from shared memory by a warpgroup), not
// fewer instructions. H200, 8192^3 (bench, 2026-11-28): this kernel 39.3 TFLOP/s (77% of cuBLAS
// SGEMM); the WGMMA kernel 72.7 (143%; 72.3, 141%, at 4096^3), errors no worse than SGEMM's on
// [-1,1] and within 1.2x on [0,1] (docs/measured.md).
#include "common.h"

#include "cp_async.h"
#include "wgmma.h"
#include <float.h>

#define X3_BM 128
#define X3_BN 128
#define X3_BK 32
#define X3_STAGES 3
#define X3_THREADS 256
#define X3_A_ROW (X3_BK + 4)   // floats in a shared row of A: conflict-free fragment reads
#define X3_B_ROW (X3_BN + 8)   // the same for B
#define X3_A_STAGE (X3_BM * X3_A_ROW)
#define X3_B_STAGE (X3_BK * X3_B_ROW)
#define X3_SHARED_BYTES (X3_STAGES * (X3_A_STAGE + X3_B_STAGE) * sizeof(float))

#ifndef TM_EMU

// x rounded to TF32 (cvt.rna.tf32.f32: to nearest, ties away from zero), as the .b32 an mma.sync
// tf32 operand takes. (Rounding with two integer instructions instead measured slower on the
// H200: benchmarks/tf32x3_probe.cu.)
static __device__ __forceinline__ unsigned tf32_rna(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// x = big + small, both TF32. An infinite or NaN x is all small part, its big part 0: a big
// infinity would meet the other side's small part, often exactly 0, in a_big * b_small and make
// NaN where IEEE gives +-Inf. (Left: where both factors of one product are infinite the result
// is NaN, not IEEE's +-Inf: Inf * 0 in a_small * b_big.)
static __device__ __forceinline__ void tf32_split(float x, unsigned &big, unsigned &small)
{
    big = fabsf(x) <= FLT_MAX ? tf32_rna(x) : 0u;
    small = tf32_rna(x - __uint_as_float(big));
}

// d += a * b for one m16n8k8 tile (PTX ISA fragment layouts for .tf32: a0 (g, t), a1 (g+8, t),
// a2 (g, t+4), a3 (g+8, t+4); b0 (t, g), b1 (t+4, g); d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t),
// d3 (g+8, 2t+1), g = lane / 4, t = lane % 4).
static __device__ __forceinline__ void mma_tf32(float d[4], const unsigned a[4],
                                                const unsigned b[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One k-tile of A (X3_BM x X3_BK) and B (X3_BK x X3_BN), global -> a shared stage by cp.async,
// zero-filled outside the matrices. VEC: 16-byte copies (K and N multiples of 4, aligned bases);
// otherwise one float per copy.
template <bool VEC, typename Index>
static __device__ __forceinline__ void x3_load_tile(float *As, float *Bs, const float *A,
                                                    const float *B, Index M, Index N, Index K,
                                                    Index row0, Index col0, Index tile_k)
{
    const int tid = threadIdx.x;
    if (VEC) {
#pragma unroll
        for (int i = 0; i < X3_BM * X3_BK / 4 / X3_THREADS; ++i) {
            const int chunk = tid + i * X3_THREADS, r = chunk / (X3_BK / 4),
                      c = chunk % (X3_BK / 4) * 4;
            const Index ar = row0 + r, ac = tile_k + c;
            const bool in = ar < M && ac < K;
            cp_async16(&As[r * X3_A_ROW + c], in ? &A[ar * K + ac] : A, in ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < X3_BK * X3_BN / 4 / X3_THREADS; ++i) {
            const int chunk = tid + i * X3_THREADS, r = chunk / (X3_BN / 4),
                      c = chunk % (X3_BN / 4) * 4;
            const Index br = tile_k + r, bc = col0 + c;
            const bool in = br < K && bc < N;
            cp_async16(&Bs[r * X3_B_ROW + c], in ? &B[br * N + bc] : B, in ? 16 : 0);
        }
    } else {
#pragma unroll 4
        for (int i = tid; i < X3_BM * X3_BK; i += X3_THREADS) {
            const int r = i / X3_BK, c = i % X3_BK;
            const Index ar = row0 + r, ac = tile_k + c;
            const bool in = ar < M && ac < K;
            cp_async4(&As[r * X3_A_ROW + c], in ? &A[ar * K + ac] : A, in ? 4 : 0);
        }
#pragma unroll 4
        for (int i = tid; i < X3_BK * X3_BN; i += X3_THREADS) {
            const int r = i / X3_BN, c = i % X3_BN;
            const Index br = tile_k + r, bc = col0 + c;
            const bool in = br < K && bc < N;
            cp_async4(&Bs[r * X3_B_ROW + c], in ? &B[br * N + bc] : B, in ? 4 : 0);
        }
    }
}

// Tuning (benchmarks/tf32x3_probe.cu measures each on a GPU): PROMOTE, k-steps of 8 summed by the
// tensor cores (from zero) before each FP32 addition; KAHAN, those additions compensated (the
// running sum's rounding errors kept and added back: K / (8 PROMOTE) plain additions of positive
// terms lose up to sqrt of that many roundings, which is most of a plain kernel's error).
template <bool VEC, typename Index, int PROMOTE, bool KAHAN>
__global__ void __launch_bounds__(X3_THREADS)
    matmul_tf32x3_kernel(const float *__restrict__ A, const float *__restrict__ B,
                         float *__restrict__ C, Index M, Index N, Index K, unsigned first_block_y)
{
    extern __shared__ __align__(16) float x3_shared[];
    float *const As0 = x3_shared, *const Bs0 = x3_shared + X3_STAGES * X3_A_STAGE;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;   // the fragment's row group and thread in group
    const int warp_m = (warp / 4) * 64, warp_n = (warp % 4) * 32;
    const Index row0 = (Index)(blockIdx.y + first_block_y) * X3_BM;
    const Index col0 = (Index)blockIdx.x * X3_BN;
    const Index tiles = (K + X3_BK - 1) / X3_BK;

    float acc[4][4][4], comp[4][4][4], part[4][4][4];   // comp: KAHAN's lost low parts
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
            for (int q = 0; q < 4; ++q)
                acc[mi][ni][q] = comp[mi][ni][q] = 0.0f;
        }
    }

    // The pipeline: stages 0 .. STAGES-2 in flight before the loop; one group committed per
    // k-tile (empty past the end) so that wait<STAGES-2> always means "tile kt has landed".
#pragma unroll
    for (int s = 0; s < X3_STAGES - 1; ++s) {
        if (s < tiles)
            x3_load_tile<VEC>(As0 + s * X3_A_STAGE, Bs0 + s * X3_B_STAGE, A, B, M, N, K, row0, col0,
                              (Index)s * X3_BK);
        cp_async_commit();
    }
    for (Index kt = 0; kt < tiles; ++kt) {
        cp_async_wait<X3_STAGES - 2>();
        __syncthreads();   // tile kt is in shared memory; stage (kt - 1) % STAGES is free
        const Index next = kt + X3_STAGES - 1;
        if (next < tiles) {
            const int ns = (int)(next % X3_STAGES);
            x3_load_tile<VEC>(As0 + ns * X3_A_STAGE, Bs0 + ns * X3_B_STAGE, A, B, M, N, K, row0,
                              col0, next * X3_BK);
        }
        cp_async_commit();
        const int stage = (int)(kt % X3_STAGES);
        const float *As = As0 + stage * X3_A_STAGE, *Bs = Bs0 + stage * X3_B_STAGE;
#pragma unroll
        for (int step = 0; step < X3_BK / 8; ++step) {
            const int kk = step * 8;
            if (step % PROMOTE == 0) {
#pragma unroll
                for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                        for (int q = 0; q < 4; ++q)
                            part[mi][ni][q] = 0.0f;   // the tensor cores sum from zero
            }
            unsigned a_big[4][4], a_small[4][4], b_big[4][2], b_small[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                const float *a = As + (warp_m + mi * 16 + g) * X3_A_ROW + kk + t;
                tf32_split(a[0], a_big[mi][0], a_small[mi][0]);
                tf32_split(a[8 * X3_A_ROW], a_big[mi][1], a_small[mi][1]);
                tf32_split(a[4], a_big[mi][2], a_small[mi][2]);
                tf32_split(a[8 * X3_A_ROW + 4], a_big[mi][3], a_small[mi][3]);
            }
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const float *b = Bs + (kk + t) * X3_B_ROW + warp_n + ni * 8 + g;
                tf32_split(b[0], b_big[ni][0], b_small[ni][0]);
                tf32_split(b[4 * X3_B_ROW], b_big[ni][1], b_small[ni][1]);
            }
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    mma_tf32(part[mi][ni], a_small[mi], b_big[ni]);
                    mma_tf32(part[mi][ni], a_big[mi], b_small[ni]);
                    mma_tf32(part[mi][ni], a_big[mi], b_big[ni]);
                    if (step % PROMOTE == PROMOTE - 1) {
#pragma unroll
                        for (int q = 0; q < 4; ++q) {   // FP32, rounded to nearest
                            if (KAHAN) {
                                const float y = part[mi][ni][q] - comp[mi][ni][q];
                                const float sum = acc[mi][ni][q] + y;
                                const float lost = (sum - acc[mi][ni][q]) - y;
                                comp[mi][ni][q] = lost != lost ? 0.0f : lost;   // sum infinite
                                acc[mi][ni][q] = sum;
                            } else {
                                acc[mi][ni][q] += part[mi][ni][q];
                            }
                        }
                    }
                }
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const Index r = row0 + warp_m + mi * 16 + g;
            const Index c = col0 + warp_n + ni * 8 + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; ++h) {   // rows r and r + 8
                const Index rr = r + 8 * h;
                if (rr >= M) continue;
                if (VEC && c + 1 < N) {
                    *(float2 *)&C[rr * N + c] =
                        make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
                } else {
                    if (c < N) C[rr * N + c] = acc[mi][ni][2 * h];
                    if (c + 1 < N) C[rr * N + c + 1] = acc[mi][ni][2 * h + 1];
                }
            }
        }
}

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
        if (SUM == W3_TWO_LEVEL && ++inner == W3_TWO_LEVEL_TILES) {
            inner = 0;
#pragma unroll
            for (int i = 0; i < 64; ++i) {
                extra[i] += acc[i] + part[i];
                acc[i] = 0.0f;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 64; ++i) {   // FP32, rounded to nearest
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
        fence_proxy_async_shared();   // this thread's split stores, visible to the next wgmma
        __syncthreads();   // the next stage is written; this one's wgmma are done (all threads)
    }
    cp_async_wait<0>();

    const int warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const Index r = row0 + warpgroup * 64 + warp * 16 + g, c = col0 + j * 8 + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {   // rows r and r + 8
            const Index rr = r + 8 * h;
            if (rr >= M) continue;
            float v[2];
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int i = 4 * j + 2 * h + q;
                v[q] = SUM == W3_KAHAN       ? acc[i] - extra[i]
                       : SUM == W3_TWO_LEVEL ? extra[i] + acc[i]
                                             : acc[i];
            }
            if (VEC && c + 1 < N) {
                *(float2 *)&C[rr * N + c] = make_float2(v[0], v[1]);
            } else {
                if (c < N) C[rr * N + c] = v[0];
                if (c + 1 < N) C[rr * N + c + 1] = v[1];
            }
        }
    }
#else
    __trap();   // built without sm_90a: the launcher never chooses this kernel then
#endif
}

// The variant the registry runs: on the H200, the fastest that meets issue 47's accuracy targets
// (benchmarks/tf32x3_probe.cu; docs/measured.md).
#define X3_PROMOTE 4
#define X3_KAHAN true

// One launch of a tf32x3 kernel of BM x BN tiles: its dynamic shared memory allowed, then the
// grid's rows of blocks in chunks a grid dimension holds.
template <typename Index, typename Kernel>
static int launch_tiles(Kernel kernel, int bm, int bn, int threads, size_t shared,
                        const tm_problem *p, tm_launch_facts *facts)
{
    const dim3 block(threads);
    const dim3 grid(tm_ceil_div(p->N, bn), tm_ceil_div(p->M, bm));
    cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    if (err != cudaSuccess) return err;
    int status = tm_launch_row_chunks((const void *)kernel, grid, block, shared, facts,
                                      [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, shared, (const float *)p->in0, (const float *)p->in1,
                         (float *)p->out, (Index)p->M, (Index)p->N, (Index)p->K, first_block_y);
    });
    facts->dynamic_shared_bytes = shared;
    return status;
}

template <bool VEC, typename Index>
static int launch_tf32x3(const tm_problem *p, tm_launch_facts *facts)
{
    return launch_tiles<Index>(matmul_tf32x3_kernel<VEC, Index, X3_PROMOTE, X3_KAHAN>, X3_BM, X3_BN,
                               X3_THREADS, X3_SHARED_BYTES, p, facts);
}

// The registry's wgmma variant (benchmarks/tf32x3_probe.cu measures the others).
#define W3_SUM W3_TWO_LEVEL

#if defined(TM_TF32X3_WGMMA)   // setup.py: this file was also compiled for sm_90a
template <bool VEC, typename Index>
static int launch_tf32x3_wgmma(const tm_problem *p, tm_launch_facts *facts)
{
    return launch_tiles<Index>(matmul_tf32x3_wgmma_kernel<VEC, Index, W3_SUM>, W3_BM, W3_BN,
                               W3_THREADS, W3_SHARED_BYTES, p, facts);
}
#endif

// Whether the current device runs the sm_90a build (compute capability 9.0 exactly: a 90a
// binary has no PTX to fall back on elsewhere); 0, or a CUDA error.
static int tf32x3_use_wgmma(bool *use)
{
    *use = false;
#if defined(TM_TF32X3_WGMMA)
    int device = 0, major = 0, minor = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    *use = major == 9 && minor == 0;
#endif
    return 0;
}

int tm_matmul_tf32x3_launch(const tm_problem *p, tm_launch_facts *facts)
{
    if (p->dtype != TM_F32) return cudaErrorInvalidValue;
    const bool vec = p->K % 4 == 0 && p->N % 4 == 0 && aligned16(p->in0) && aligned16(p->in1) &&
                     aligned16(p->out);
    const bool ints = tm_int_indices_suffice(p);
    bool wgmma = false;
    if (int err = tf32x3_use_wgmma(&wgmma)) return err;
#if defined(TM_TF32X3_WGMMA)
    if (wgmma) {
        if (ints)
            return vec ? launch_tf32x3_wgmma<true, int>(p, facts)
                       : launch_tf32x3_wgmma<false, int>(p, facts);
        return vec ? launch_tf32x3_wgmma<true, long long>(p, facts)
                   : launch_tf32x3_wgmma<false, long long>(p, facts);
    }
#endif
    if (ints) return vec ? launch_tf32x3<true, int>(p, facts) : launch_tf32x3<false, int>(p, facts);
    return vec ? launch_tf32x3<true, long long>(p, facts)
               : launch_tf32x3<false, long long>(p, facts);
}

#else

int tm_matmul_tf32x3_launch(const tm_problem *p, tm_launch_facts *facts)
{
    (void)p;
    (void)facts;
    return cudaErrorNotSupported;   // inline PTX (mma.sync, cvt.rna.tf32): not on the CPU emulator
}

#endif

void tm_matmul_tf32x3_tile(const tm_problem *p, long long *bm, long long *bn)
{
    (void)p;
    *bm = X3_BM;
    *bn = X3_BN;
}

double tm_matmul_tf32x3_bytes(const tm_problem *p)
{
    return tm_blocked_matmul_bytes(p, X3_BM, X3_BN);
}
