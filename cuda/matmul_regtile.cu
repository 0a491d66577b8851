// matmul_regtile.cu: register tiling on top of shared-memory block tiles (CMU 15-418 lecture
// 001, "Optimization 1: Thread-Level Register Tiling", total global and shared access 2N^3/V).
//
// A block computes a BM x BN tile of C, walking K in steps of BK: it copies a BM x BK tile of A
// and a BK x BN tile of B into shared memory, waits at a barrier, and every thread then
// accumulates its own TM x TN outputs in registers. Per k, a thread loads TM values of A and TN
// values of B from shared memory and does TM*TN multiply-adds: the shared-memory reads per
// multiply-add fall from 2 (tiled) to (TM+TN)/(TM*TN).
//   dims=1  a column of TM = 8 outputs per thread (TN = 1), 64 x 64 block tile, 512 threads:
//           one B value in a register serves 8 multiply-adds.
//   dims=2  a V x V = 8 x 8 block of outputs per thread, 128 x 128 block tile, 256 threads:
//           16 shared loads for 64 multiply-adds.
// Global traffic: A is loaded once per block-column of C and B once per block-row:
// M*K*N/BN + K*N*M/BM loads (2N^3/128 for dims=2 at n^3, against 2N^3/32 for tiled tile 32).
//
// Thread (ty, tx) owns rows ty + i*(BM/TM) and columns tx + j*(BN/TN): neighbours in a warp
// own neighbouring columns, so the shared reads of B and the global writes of C are contiguous.
// Every thread takes part in every load and barrier (0 outside the matrices); writes are guarded.
#include "common.h"

template <typename T, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    matmul_regtile_kernel(const T *__restrict__ A, const T *__restrict__ B, T *__restrict__ C,
                          long long M, long long N, long long K, unsigned first_block_y)
{
    const int THREADS = (BM / TM) * (BN / TN);
    const int ROW_STRIDE = BM / TM, COL_STRIDE = BN / TN;  // threads along a column / a row
    __shared__ T A_tile[BM][BK];
    __shared__ T B_tile[BK][BN];
    const int t = threadIdx.x;
    const int ty = t / COL_STRIDE, tx = t % COL_STRIDE;
    const long long block_row = (long long)(blockIdx.y + first_block_y) * BM;
    const long long block_col = (long long)blockIdx.x * BN;

    T acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0;

    for (long long tile_k = 0; tile_k < K; tile_k += BK) {
        // Cooperative copies: consecutive threads take consecutive elements of a row.
#pragma unroll
        for (int e = t; e < BM * BK; e += THREADS) {
            const int r = e / BK, kk = e % BK;
            const long long row = block_row + r, k = tile_k + kk;
            A_tile[r][kk] = (row < M && k < K) ? A[row * K + k] : T(0);
        }
#pragma unroll
        for (int e = t; e < BK * BN; e += THREADS) {
            const int kk = e / BN, c = e % BN;
            const long long k = tile_k + kk, col = block_col + c;
            B_tile[kk][c] = (k < K && col < N) ? B[k * N + col] : T(0);
        }
        __syncthreads();  // both tiles are loaded before anyone reads them
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            T a[TM], b[TN];  // the register tile's operands: TM + TN loads ...
#pragma unroll
            for (int i = 0; i < TM; ++i)
                a[i] = A_tile[ty + i * ROW_STRIDE][kk];
#pragma unroll
            for (int j = 0; j < TN; ++j)
                b[j] = B_tile[kk][tx + j * COL_STRIDE];
#pragma unroll
            for (int i = 0; i < TM; ++i)  // ... for TM * TN multiply-adds
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();  // everyone is done reading before the next copy overwrites them
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const long long row = block_row + ty + i * ROW_STRIDE;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const long long col = block_col + tx + j * COL_STRIDE;
            if (row < M && col < N) C[row * N + col] = acc[i][j];
        }
    }
}

template <typename T, int BM, int BN, int BK, int TM, int TN>
static int launch_regtile(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = matmul_regtile_kernel<T, BM, BN, BK, TM, TN>;
    const dim3 block((BM / TM) * (BN / TN));
    const dim3 grid(tm_ceil_div(p->N, BN), tm_ceil_div(p->M, BM));
    return tm_launch_row_chunks((const void *)kernel, grid, block, (BM + BN) * BK * sizeof(T),
                                facts, [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, 0, (const T *)p->in0, (const T *)p->in1, (T *)p->out,
                         p->M, p->N, p->K, first_block_y);
    });
}

// The variants by `dims` (TM_VALUES_REGTILE_DIMS): block tile BM x BN, K step BK, and TM x TN
// outputs per thread. The launcher and the traffic model both read BM and BN from here.
template <int DIMS>
struct RegtileShape;
template <>
struct RegtileShape<1> {
    static const int BM = 64, BN = 64, BK = 8, TM = 8, TN = 1;
};
template <>
struct RegtileShape<2> {
    static const int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
};

template <typename T>
static int launch_regtile_dtype(const tm_problem *p, tm_launch_facts *facts)
{
    return tm_dispatch<TM_VALUES_REGTILE_DIMS>(p->params[0], [&](auto dims) {
        typedef RegtileShape<dims> S;
        return launch_regtile<T, S::BM, S::BN, S::BK, S::TM, S::TN>(p, facts);
    });
}

int tm_matmul_regtile_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_regtile_dtype<float>(p, facts)
                              : launch_regtile_dtype<double>(p, facts);
}

void tm_matmul_regtile_tile(const tm_problem *p, long long *bm, long long *bn)
{
    *bm = *bn = 0;   // stays 0 x 0 for a value not in the list (the glue refuses those first)
    tm_dispatch<TM_VALUES_REGTILE_DIMS>(p->params[0], [&](auto dims) {
        *bm = RegtileShape<dims>::BM, *bn = RegtileShape<dims>::BN;
        return 0;
    });
}

double tm_matmul_regtile_bytes(const tm_problem *p)
{
    long long bm, bn;
    tm_matmul_regtile_tile(p, &bm, &bn);
    return tm_blocked_matmul_bytes(p, bm, bn);
}
