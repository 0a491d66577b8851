// reduce_lecture.cu: the barrier-based reductions of CMU 15-418 lecture 001 ("CUDA Example 3:
// Reduction", Ideas 2.1, 2.2 and 2.3). The tree is the lecture's interleaved one,
// A[i] += A[i + d] where i % 2d == 0, kept in place. The input is never changed (it is launched
// several times for timing): the kernels work in `scratch`.
//
// single_block (Idea 2.1): __syncthreads() works within a block, so launch ONE block; each
// thread walks the array in steps of blockDim.x at every level. Correct for any length, one
// launch, but one multiprocessor does all the work.
// Global traffic: n read + n written (copy into scratch), then every level reads 2 and writes
// 1 value per pair: about 4n values (plus n/2 integer tests per level, not memory).
//
// multi_pass (Idea 2.2): barriers inside a block, kernel launches across blocks. Each pass sums
// every block's blockDim.x values into the block's first element, in global memory; the next
// pass works on those partial sums, which lie `depth` = blockDim.x^pass apart.
// Global traffic: n read + n written (the copy), then per pass about 3 values per element
// reduced; the strided partials of later passes waste most of each memory transaction.
//
// shared (Idea 2.3): the same passes, with the block's tree in shared memory: one global read
// per element and one write per block per pass.
// Global traffic: n reads + n/blockDim partial writes, then the same for each later pass.
#include "reduce_common.h"

// ---- single_block ----
template <typename T>
__global__ void reduce_single_block_kernel(const T *__restrict__ x, T *work, T *out, long long n)
{
    const unsigned tid = threadIdx.x;
    for (long long i = tid; i < n; i += blockDim.x)
        work[i] = x[i];
    __syncthreads();
    for (long long stride = 1; stride < n; stride *= 2) {
        for (long long left = tid * 2 * stride; left + stride < n; left += 2 * stride * blockDim.x)
            work[left] += work[left + stride];
        __syncthreads();  // the whole level is done before the next one reads it
    }
    if (tid == 0) *out = work[0];
}

template <typename T>
static int launch_single_block(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = reduce_single_block_kernel<T>;
    const dim3 block((unsigned)p->params[0]), grid(1);
    tm_facts_set(facts, (const void *)kernel, grid, block, 0, 0, 1);
    return tm_launch(kernel, grid, block, 0, (const T *)p->in0, (T *)p->scratch, (T *)p->out, p->M);
}

int tm_reduce_single_block_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_single_block<float>(p, facts)
                              : launch_single_block<double>(p, facts);
}

// ---- multi_pass ----
// Pass with `depth`: value k of this pass lives at work[k * depth], k < count.
template <typename T>
__global__ void reduce_multi_pass_kernel(const T *__restrict__ x, T *work, T *out, long long n,
                                         long long depth)
{
    const long long count = (n + depth - 1) / depth;
    const unsigned tid = threadIdx.x;
    const long long k = (long long)blockIdx.x * blockDim.x + tid;
    if (depth == 1 && k < n) work[k] = x[k];  // the first pass copies the input
    __syncthreads();
    for (unsigned stride = 1; stride < blockDim.x; stride *= 2) {
        if (tid % (2 * stride) == 0 && k + stride < count)
            work[k * depth] += work[(k + stride) * depth];
        __syncthreads();
    }
    if (gridDim.x == 1 && tid == 0) *out = work[0];
}

template <typename T>
static int launch_multi_pass(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = reduce_multi_pass_kernel<T>;
    const dim3 block((unsigned)p->params[0]);
    int launches = 0;
    dim3 first_grid;
    for (long long depth = 1;; depth *= block.x) {
        const long long count = tm_blocks_for(p->M, depth);
        const dim3 grid(tm_ceil_div(count, block.x));
        if (launches == 0) first_grid = grid;
        cudaError_t err = tm_launch(kernel, grid, block, 0, (const T *)p->in0, (T *)p->scratch,
                                    (T *)p->out, p->M, depth);
        if (err != cudaSuccess) return err;
        ++launches;
        if (grid.x == 1) break;
    }
    tm_facts_set(facts, (const void *)kernel, first_grid, block, 0, 0, launches);
    return cudaSuccess;
}

int tm_reduce_multi_pass_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_multi_pass<float>(p, facts)
                              : launch_multi_pass<double>(p, facts);
}

// ---- shared ----
template <typename T>
__global__ void reduce_shared_kernel(const T *__restrict__ x, T *work, T *out, long long n,
                                     long long depth)
{
    TM_DYNAMIC_SHARED(T, partial);
    const long long count = (n + depth - 1) / depth;
    const unsigned tid = threadIdx.x;
    const long long k = (long long)blockIdx.x * blockDim.x + tid;
    partial[tid] = k >= count ? T(0) : depth == 1 ? x[k] : work[k * depth];
    __syncthreads();
    for (unsigned stride = 1; stride < blockDim.x; stride *= 2) {
        if (tid % (2 * stride) == 0) partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    if (tid == 0) {
        work[(long long)blockIdx.x * blockDim.x * depth] = partial[0];
        if (gridDim.x == 1) *out = partial[0];
    }
}

template <typename T>
static int launch_shared(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = reduce_shared_kernel<T>;
    const dim3 block((unsigned)p->params[0]);
    const size_t shared = block.x * sizeof(T);
    int launches = 0;
    dim3 first_grid;
    for (long long depth = 1;; depth *= block.x) {
        const long long count = tm_blocks_for(p->M, depth);
        const dim3 grid(tm_ceil_div(count, block.x));
        if (launches == 0) first_grid = grid;
        cudaError_t err = tm_launch(kernel, grid, block, shared, (const T *)p->in0, (T *)p->scratch,
                                    (T *)p->out, p->M, depth);
        if (err != cudaSuccess) return err;
        ++launches;
        if (grid.x == 1) break;
    }
    tm_facts_set(facts, (const void *)kernel, first_grid, block, shared, shared, launches);
    return cudaSuccess;
}

int tm_reduce_shared_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_shared<float>(p, facts) : launch_shared<double>(p, facts);
}

// ---- traffic models ----
double tm_reduce_single_block_bytes(const tm_problem *p)
{
    double values = 2.0 * (double)p->M;  // the copy
    for (long long stride = 1; stride < p->M; stride *= 2)
        values += 3.0 * (double)(p->M / (2 * stride));
    return (values + 1) * tm_elem_bytes(p);
}

// Per pass over `count` values: the in-block tree reads 2 and writes 1 value per addition
// (count - blocks additions).
double tm_reduce_multi_pass_bytes(const tm_problem *p)
{
    const long long block = p->params[0];
    double values = 2.0 * (double)p->M;  // the copy
    for (long long count = p->M;;) {
        const long long blocks = tm_blocks_for(count, block);
        values += 3.0 * (double)(count - blocks);
        if (blocks <= 1) break;
        count = blocks;
    }
    return (values + 1) * tm_elem_bytes(p);
}

double tm_reduce_shared_bytes(const tm_problem *p)
{
    return tm_multi_pass_bytes(p, p->params[0]) + tm_elem_bytes(p);
}
