// matmul_naive.cu: one thread per element of C, no reuse (CS133 lecture 000, "A Simple
// Matrix Multiplication Kernel"; CMU 15-418 lecture 001, the "strawman" kernel).
//
// Global traffic: every thread reads a whole row of A and a whole column of B, so the kernel
// loads 2*M*N*K elements and stores M*N: one load per multiply-add, which is why it is
// bandwidth-bound (150 GB/s -> 37.5 GFLOP/s in float32, lecture 000).
//
// Two thread mappings teach coalescing (lecture 002):
//   naive              threadIdx.x walks along a row of C: a warp reads 32 adjacent elements
//                      of B (one coalesced transaction) and one broadcast element of A.
//   naive_uncoalesced  threadIdx.x walks down a column of C: a warp reads 32 elements of A
//                      that are K apart (32 transactions) and one element of B.
#include "common.h"

// Row of A (contiguous) times column of B (stride N); pointers walk so the loop does no 64-bit
// multiplications.
template <typename T>
__device__ __forceinline__ T dot_row_col(const T *a_row, const T *b_col, long long K, long long N)
{
    T sum = 0;
    for (long long k = 0; k < K; ++k, b_col += N)
        sum += a_row[k] * *b_col;
    return sum;
}

template <typename T>
__global__ void matmul_naive_kernel(const T *__restrict__ A, const T *__restrict__ B,
                                    T *__restrict__ C, long long M, long long N, long long K,
                                    unsigned first_block_y)
{
    const long long row = (long long)(blockIdx.y + first_block_y) * blockDim.y + threadIdx.y;
    const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    C[row * N + col] = dot_row_col(A + row * K, B + col, K, N);
}

// Same arithmetic; only which thread computes which element changes.
template <typename T>
__global__ void matmul_naive_uncoalesced_kernel(const T *__restrict__ A, const T *__restrict__ B,
                                                T *__restrict__ C, long long M, long long N,
                                                long long K, unsigned first_block_y)
{
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long col = (long long)(blockIdx.y + first_block_y) * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    C[row * N + col] = dot_row_col(A + row * K, B + col, K, N);
}

template <typename T>
static int launch_naive(const tm_problem *p, tm_launch_facts *facts, bool coalesced)
{
    const unsigned edge = (unsigned)p->params[0];
    const dim3 block(edge, edge);
    auto kernel = coalesced ? matmul_naive_kernel<T> : matmul_naive_uncoalesced_kernel<T>;
    // x covers the dimension threadIdx.x walks along; y the other (chunked past 65535 blocks).
    const dim3 grid = coalesced ? dim3(tm_ceil_div(p->N, edge), tm_ceil_div(p->M, edge))
                                : dim3(tm_ceil_div(p->M, edge), tm_ceil_div(p->N, edge));
    return tm_launch_row_chunks((const void *)kernel, grid, block, 0, facts,
                                [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, 0, (const T *)p->in0, (const T *)p->in1, (T *)p->out,
                         p->M, p->N, p->K, first_block_y);
    });
}

int tm_matmul_naive_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_naive<float>(p, facts, true)
                              : launch_naive<double>(p, facts, true);
}

int tm_matmul_naive_uncoalesced_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_naive<float>(p, facts, false)
                              : launch_naive<double>(p, facts, false);
}

// A thread per element of C, nothing shared: a 1 x 1 piece, so 2*M*N*K loads and M*N stores.
void tm_matmul_naive_tile(const tm_problem *p, long long *bm, long long *bn)
{
    (void)p;
    *bm = *bn = 1;
}

double tm_matmul_naive_bytes(const tm_problem *p)
{
    return tm_blocked_matmul_bytes(p, 1, 1);
}

// The uncoalesced mapping loads the same elements; only the number of transactions differs.
double tm_matmul_naive_uncoalesced_bytes(const tm_problem *p)
{
    return tm_matmul_naive_bytes(p);
}
