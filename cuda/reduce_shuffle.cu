// reduce_shuffle.cu: the fast reductions. Both read the input with 128-bit loads (float4, or
// double2) in a grid-stride loop: a grid that just fills the device, each thread summing many
// vectors with several loads in flight, so the kernel streams memory at the copy rate. Lessons:
// lecture 002 (coalescing, latency hiding, thread coarsening), warp shuffles
// (__shfl_down_sync: lanes exchange registers, no shared memory, no block barrier).
//
// shuffle (the default of tm.reduce, the fastest): each warp sums with shuffles, the block sums
// its warps' sums, and writes one partial; the last block to finish (a ticket taken with
// atomicAdd after __threadfence) adds the partials in a fixed order and writes the total: ONE
// launch, and the same result whichever block finishes last.
// vectorized: the same loads, the block's sum as a shared-memory tree (sequential addressing),
// partials to scratch and a second launch (one block) to add them.
// Global traffic of both: n reads, plus one write and one read per block partial (at most
// TM_REDUCE_MAX_BLOCKS), plus one write: essentially n reads, the least possible.
//
// Accumulation is in the input's type, per thread, like the lectures' kernels.
#include <stdint.h>
#include "reduce_common.h"

#define TM_REDUCE_MAX_BLOCKS 4096
#define TM_LOADS_IN_FLIGHT 4

// Sum of x[0..n) owned by this thread of the grid: `head` leading elements before the first
// 16-byte boundary, then whole vectors, then the tail that does not fill a vector.
template <typename T>
__device__ __forceinline__ T grid_stride_vector_sum(const T *__restrict__ x, long long n,
                                                    long long head)
{
    typedef tm_vec128<T> Vec;
    typedef typename Vec::type V;
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long threads = (long long)gridDim.x * blockDim.x;
    const V *__restrict__ body = reinterpret_cast<const V *>(x + head);
    const long long vectors = (n - head) / Vec::width;
    const long long tail_start = head + vectors * Vec::width;

    T sums[TM_LOADS_IN_FLIGHT] = {};
    long long k = thread;
    for (; k + (TM_LOADS_IN_FLIGHT - 1) * threads < vectors; k += TM_LOADS_IN_FLIGHT * threads) {
        V loaded[TM_LOADS_IN_FLIGHT];
#pragma unroll
        for (int j = 0; j < TM_LOADS_IN_FLIGHT; ++j)
            loaded[j] = body[k + j * threads];
#pragma unroll
        for (int j = 0; j < TM_LOADS_IN_FLIGHT; ++j)
            sums[j] += Vec::sum(loaded[j]);
    }
    for (; k < vectors; k += threads)
        sums[0] += Vec::sum(body[k]);
    if (thread < head) sums[0] += x[thread];
    if (thread < n - tail_start) sums[0] += x[tail_start + thread];

    T sum = T(0);
#pragma unroll
    for (int j = 0; j < TM_LOADS_IN_FLIGHT; ++j)
        sum += sums[j];
    return sum;
}

// Elements before x's first 16-byte boundary (device allocations are aligned: usually 0).
template <typename T>
static long long vector_head(const void *x, long long n)
{
    const long long head = (long long)((16 - (uintptr_t)x % 16) % 16 / sizeof(T));
    return head < n ? head : n;
}

// Blocks for a grid-stride pass over n elements: fill the device, but no block without work.
static long long grid_stride_blocks(long long n, unsigned threads, int width)
{
    const long long needed = tm_blocks_for(n, (long long)threads * width);
    const long long cap = needed < TM_REDUCE_MAX_BLOCKS ? needed : TM_REDUCE_MAX_BLOCKS;
    return tm_resident_blocks(threads, cap);
}

// ---- shuffle ----
template <typename T>
__global__ void reduce_shuffle_kernel(const T *__restrict__ x, long long n, long long head,
                                      T *partials, unsigned *blocks_done, T *out)
{
    __shared__ T warp_sums[32];
    __shared__ int is_last_block;
    const T block_sum = tm_block_sum(grid_stride_vector_sum(x, n, head), warp_sums);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = block_sum;
        __threadfence();  // the partial is visible to every block before the ticket is taken
        const unsigned ticket = atomicAdd(blocks_done, 1u);
        is_last_block = ticket == gridDim.x - 1;
    }
    __syncthreads();  // is_last_block is the same for the whole block
    if (is_last_block) {
        const volatile T *finished = partials;  // written by other blocks: bypass stale caches
        T sum = T(0);
        for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
            sum += finished[b];
        sum = tm_block_sum(sum, warp_sums);
        if (threadIdx.x == 0) {
            *out = sum;
            *blocks_done = 0;
        }
    }
}

template <typename T>
static int launch_shuffle(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = reduce_shuffle_kernel<T>;
    const dim3 block((unsigned)p->params[0]);
    const dim3 grid((unsigned)grid_stride_blocks(p->M, block.x, tm_vec128<T>::width));
    T *partials = (T *)p->scratch;
    unsigned *blocks_done = (unsigned *)(partials + TM_REDUCE_MAX_BLOCKS);
    cudaError_t err = cudaMemsetAsync(blocks_done, 0, sizeof(unsigned), 0);
    if (err != cudaSuccess) return err;
    tm_facts_set(facts, (const void *)kernel, grid, block, 32 * sizeof(T) + sizeof(int), 0, 1);
    return tm_launch(kernel, grid, block, 0, (const T *)p->in0, p->M, vector_head<T>(p->in0, p->M),
                     partials, blocks_done, (T *)p->out);
}

int tm_reduce_shuffle_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_shuffle<float>(p, facts) : launch_shuffle<double>(p, facts);
}

// ---- vectorized ----
template <typename T>
__global__ void reduce_vectorized_kernel(const T *__restrict__ x, long long n, long long head,
                                         T *__restrict__ dst)
{
    TM_DYNAMIC_SHARED(T, partial);
    const unsigned tid = threadIdx.x;
    partial[tid] = grid_stride_vector_sum(x, n, head);
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (tid < half) partial[tid] += partial[tid + half];
        __syncthreads();
    }
    if (tid == 0) dst[blockIdx.x] = partial[0];
}

template <typename T>
static int launch_vectorized(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = reduce_vectorized_kernel<T>;
    const dim3 block((unsigned)p->params[0]);
    const size_t shared = block.x * sizeof(T);
    const dim3 grid((unsigned)grid_stride_blocks(p->M, block.x, tm_vec128<T>::width));
    T *partials = (T *)p->scratch;
    const bool one_pass = grid.x == 1;
    tm_facts_set(facts, (const void *)kernel, grid, block, shared, shared, one_pass ? 1 : 2);
    cudaError_t err = tm_launch(kernel, grid, block, shared, (const T *)p->in0, p->M,
                                vector_head<T>(p->in0, p->M), one_pass ? (T *)p->out : partials);
    if (err != cudaSuccess || one_pass) return err;
    return tm_launch(kernel, dim3(1), block, shared, (const T *)partials, (long long)grid.x,
                     vector_head<T>(partials, grid.x), (T *)p->out);
}

int tm_reduce_vectorized_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_vectorized<float>(p, facts)
                              : launch_vectorized<double>(p, facts);
}

// ---- models ----
static long long grid_stride_blocks_bound(const tm_problem *p)
{
    const int width = p->dtype == TM_F32 ? 4 : 2;
    const long long needed = tm_blocks_for(p->M, (long long)p->params[0] * width);
    return needed < TM_REDUCE_MAX_BLOCKS ? needed : TM_REDUCE_MAX_BLOCKS;
}

double tm_reduce_shuffle_scratch(const tm_problem *p)
{
    return tm_elem_bytes(p) * TM_REDUCE_MAX_BLOCKS + 16;  // partials, then the ticket counter
}

double tm_reduce_vectorized_scratch(const tm_problem *p)
{
    return tm_elem_bytes(p) * (double)grid_stride_blocks_bound(p);
}

// n reads, at most one partial written and read per block, the total written.
double tm_reduce_grid_stride_bytes(const tm_problem *p)
{
    return tm_elem_bytes(p) * ((double)p->M + 2.0 * (double)grid_stride_blocks_bound(p) + 1.0);
}
