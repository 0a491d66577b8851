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
// SGEMM); the WGMMA kernel with A from registers (the registry's) 83.9 (163% of 51.3; 84.6, 165%,
// at 4096^3; 2026-11-29), errors no worse than SGEMM's on [-1,1] and within 1.2x on [0,1]
// (docs/measured.md).
#include "common.h"

#include "cp_async.h"
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

#include "matmul_tf32x3_sm90a.h"   // the WGMMA kernels (sm_90a)

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

// The registry's wgmma kernel (benchmarks/tf32x3_probe.cu measures it beside the others): A from
// registers, the sum of W3_SUM.
#define W3_SUM W3_TWO_LEVEL
#define W3R_MAX_SPLITS 8   // the largest portable cluster

// The tiles of C in w3r_tile's order. With one block per multiprocessor, the last wave's `rest`
// tiles (tiles % sm_count) would keep a few multiprocessors busy for a whole tile's time while
// the others idle (4 of 4096 tiles at 8192^3: 32 waves' time for 31.03 waves' work), so they are
// computed by clusters of `splits` blocks, each a k-range of a tile (splits: the largest power
// of two to 8 whose blocks fit one wave, with 2 k-tiles or more each); the other tiles by one
// launch (in row chunks) whose blocks past them exit. Measured (the probe, 8192^3): 1-3% faster
// than whole tiles only, in each of the session's runs. LEAVE_OUT: the probe's timing of the parts.
template <bool VEC, typename Index, int LEAVE_OUT = W3_ALL>
static int launch_tf32x3_wgmma(const tm_problem *p, tm_launch_facts *facts)
{
    const auto kernel = matmul_tf32x3_wgmma_rs_kernel<VEC, Index, W3_SUM, LEAVE_OUT>;
    const size_t shared = W3R_SHARED_BYTES;
    cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    if (err != cudaSuccess) return err;
    const long long tiles_x = tm_ceil_div(p->N, W3_BN), tiles = tiles_x * tm_ceil_div(p->M, W3_BM);
    const long long tiles_k = tm_ceil_div(p->K, W3_BK), sms = p->sm_count > 0 ? p->sm_count : 1;
    const long long rest = tiles % sms;
    int splits = W3R_MAX_SPLITS;
    while (splits > 1 && (splits * rest > sms || 2 * splits > tiles_k))
        splits /= 2;
    const long long tail = splits > 1 ? tiles - rest : tiles;
    const dim3 block(W3_THREADS);
    const float *A = (const float *)p->in0, *B = (const float *)p->in1;
    float *C = (float *)p->out;
    const Index M = (Index)p->M, N = (Index)p->N, K = (Index)p->K;
    int status = cudaSuccess, launches = 0;
    if (tail > 0) {
        const dim3 grid((unsigned)tiles_x, (unsigned)tm_ceil_div(tail, tiles_x));
        status = tm_launch_row_chunks((const void *)kernel, grid, block, shared, facts,
                                      [&](dim3 chunk, unsigned first_block_y) {
            return tm_launch(kernel, chunk, block, shared, A, B, C, M, N, K, first_block_y,
                             (Index)tail, 1);
        });
        launches = facts->launches;
    }
    if (status == cudaSuccess && tail < tiles) {
        cudaLaunchAttribute cluster;
        cluster.id = cudaLaunchAttributeClusterDimension;
        cluster.val.clusterDim.x = splits;
        cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3((unsigned)(rest * splits));
        config.blockDim = block;
        config.dynamicSmemBytes = shared;
        config.attrs = &cluster;
        config.numAttrs = 1;
        status = cudaLaunchKernelEx(&config, kernel, A, B, C, M, N, K, 0u, (Index)tail, splits);
        if (launches == 0)
            tm_facts_set(facts, (const void *)kernel, config.gridDim, block, shared, shared, 0);
        ++launches;
    }
    facts->launches = launches;
    facts->dynamic_shared_bytes = shared;
    return status;
}

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
