// matmul_tf32x3.cu: FP32 matmul at FP32 accuracy on TF32 tensor cores, by the 3xTF32 split
// (CUTLASS's "3xTF32"; issue 47). cuda only, sm_80+.
//
// TF32 keeps 10 fraction bits of FP32's 23. Each FP32 input x is split into two TF32 numbers,
//     big = tf32(x)            (cvt.rna: round to nearest, ties away)
//     small = tf32(x - big)    (what big missed, itself rounded to TF32)
// so that big + small carries about 21 bits of x. Then
//     a * b ~ a_big * b_big + a_big * b_small + a_small * b_big
// (a_small * b_small is below FP32's precision and dropped): three tensor-core products per
// FP32 product, the two small ones first. The tensor core accumulates with truncation (DESIGN.md,
// "Tensor cores"), which biases long sums of positive terms; here each 16-deep k-tile is
// accumulated by the tensor core into a zeroed fragment and then added to the running sum in
// FP32 with round-to-nearest, so truncation acts on 16-term sums only.
//
// Structure (correct first; speed is measured on the H200): a block of 4 warps computes a
// 64 x 64 tile of C from 64 x 16 and 16 x 64 shared-memory tiles of A and B (FP32, loaded with
// guards, 0 outside the matrices); each warp computes a 32 x 32 piece as 2 x 4 tiles of
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, splitting its fragments from shared
// memory at each k-step of 8. The padded shared rows make the fragment reads conflict-free.
#include "common.h"

#define X3_BM 64
#define X3_BN 64
#define X3_BK 16
#define X3_THREADS 128

#ifndef TM_EMU

// x rounded to TF32 (cvt.rna.tf32.f32), as the .b32 an mma.sync tf32 operand takes.
static __device__ __forceinline__ unsigned tf32_rna(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

static __device__ __forceinline__ void tf32_split(float x, unsigned &big, unsigned &small)
{
    big = tf32_rna(x);
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

template <typename Index>
__global__ void __launch_bounds__(X3_THREADS)
    matmul_tf32x3_kernel(const float *__restrict__ A, const float *__restrict__ B,
                         float *__restrict__ C, Index M, Index N, Index K, unsigned first_block_y)
{
    __shared__ float As[X3_BM][X3_BK + 4];
    __shared__ float Bs[X3_BK][X3_BN + 8];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const int warp_m = (warp / 2) * 32, warp_n = (warp % 2) * 32;
    const Index row0 = (Index)(blockIdx.y + first_block_y) * X3_BM;
    const Index col0 = (Index)blockIdx.x * X3_BN;

    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int q = 0; q < 4; ++q)
                acc[mi][ni][q] = 0.0f;

    for (Index tile_k = 0; tile_k < K; tile_k += X3_BK) {
#pragma unroll
        for (int i = tid; i < X3_BM * X3_BK; i += X3_THREADS) {
            const int r = i / X3_BK, c = i % X3_BK;
            const Index ar = row0 + r, ac = tile_k + c;
            As[r][c] = (ar < M && ac < K) ? A[ar * K + ac] : 0.0f;
        }
#pragma unroll
        for (int i = tid; i < X3_BK * X3_BN; i += X3_THREADS) {
            const int r = i / X3_BN, c = i % X3_BN;
            const Index br = tile_k + r, bc = col0 + c;
            Bs[r][c] = (br < K && bc < N) ? B[br * N + bc] : 0.0f;
        }
        __syncthreads();

        float part[2][4][4];   // this k-tile's sums, on the tensor cores from zero
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    part[mi][ni][q] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < X3_BK; kk += 8) {
            unsigned a_big[2][4], a_small[2][4], b_big[4][2], b_small[4][2];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                const int m = warp_m + mi * 16 + g;
                tf32_split(As[m][kk + t], a_big[mi][0], a_small[mi][0]);
                tf32_split(As[m + 8][kk + t], a_big[mi][1], a_small[mi][1]);
                tf32_split(As[m][kk + t + 4], a_big[mi][2], a_small[mi][2]);
                tf32_split(As[m + 8][kk + t + 4], a_big[mi][3], a_small[mi][3]);
            }
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int n = warp_n + ni * 8 + g;
                tf32_split(Bs[kk + t][n], b_big[ni][0], b_small[ni][0]);
                tf32_split(Bs[kk + t + 4][n], b_big[ni][1], b_small[ni][1]);
            }
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    mma_tf32(part[mi][ni], a_small[mi], b_big[ni]);
                    mma_tf32(part[mi][ni], a_big[mi], b_small[ni]);
                    mma_tf32(part[mi][ni], a_big[mi], b_big[ni]);
                }
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    acc[mi][ni][q] += part[mi][ni][q];   // FP32, rounded
        __syncthreads();
    }

#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const Index r = row0 + warp_m + mi * 16 + g;
            const Index c = col0 + warp_n + ni * 8 + 2 * t;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const Index rr = r + (q >= 2 ? 8 : 0), cc = c + (q & 1);
                if (rr < M && cc < N) C[rr * N + cc] = acc[mi][ni][q];
            }
        }
}

template <typename Index>
static int launch_tf32x3(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = matmul_tf32x3_kernel<Index>;
    const dim3 block(X3_THREADS);
    const dim3 grid(tm_ceil_div(p->N, X3_BN), tm_ceil_div(p->M, X3_BM));
    const size_t shared = sizeof(float) * (X3_BM * (X3_BK + 4) + X3_BK * (X3_BN + 8));
    return tm_launch_row_chunks((const void *)kernel, grid, block, shared, facts,
                                [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, 0, (const float *)p->in0, (const float *)p->in1,
                         (float *)p->out, (Index)p->M, (Index)p->N, (Index)p->K, first_block_y);
    });
}

int tm_matmul_tf32x3_launch(const tm_problem *p, tm_launch_facts *facts)
{
    if (p->dtype != TM_F32) return cudaErrorInvalidValue;
    return tm_int_indices_suffice(p) ? launch_tf32x3<int>(p, facts)
                                     : launch_tf32x3<long long>(p, facts);
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
