// reduce_per_level.cu: the first reductions of CMU 15-418 lecture 001 ("CUDA Example 3:
// Reduction"): the tree sum A[i] += A[i+d] for d = 1, 2, 4, ...
//
// per_level (Idea 1, "use kernel end as a barrier"): one kernel launch per tree level, the loop
// over levels on the host. Correct, but ceil(log2 n) launches, and level d touches elements
// 2d apart, so most of every memory transaction is wasted for large d.
// Global traffic: level 1 reads n values and writes n/2; each later level reads twice and writes
// once what it adds: about 3n values in all (n read + n/2 written at level 1, then halving).
//
// demo_wrong_block_sync (Idea 2, "this implementation is not correct"): the same tree in ONE
// kernel with __syncthreads() between levels. __syncthreads waits for the threads of one block
// only; once d reaches blockDim.x, a thread adds a value another block may not have computed
// yet (or not even loaded: blocks that have not started yet). Correct only when the whole array
// fits in one block. A demonstration of the bug, never a default; tests show it failing.
// Global traffic: n read + n written (the copy), then as per_level.
//
// Neither kernel may change the input (it is launched several times for timing), so the tree
// runs in `scratch` (n values) and the first level reads the input.
#include "reduce_common.h"

// One tree level: pair k adds the value `stride` to its right into its left element.
template <typename T>
__global__ void reduce_level_kernel(const T *__restrict__ src, T *dst, T *out, long long n,
                                    long long stride)
{
    const long long pair = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long left = pair * 2 * stride, right = left + stride;
    if (left >= n) return;  // no barrier in this kernel: returning early is fine
    const T sum = src[left] + (right < n ? src[right] : T(0));
    dst[left] = sum;
    if (2 * stride >= n) *out = sum;  // the last level has one pair: the total
}

template <typename T>
static int launch_per_level(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = reduce_level_kernel<T>;
    const long long n = p->M;
    const dim3 block((unsigned)p->params[0]);
    const T *src = (const T *)p->in0;
    T *work = (T *)p->scratch;
    int launches = 0;
    dim3 first_grid;
    for (long long stride = 1;; stride *= 2) {
        const long long pairs = tm_blocks_for(n, 2 * stride);
        const dim3 grid(tm_ceil_div(pairs, block.x));
        if (launches == 0) first_grid = grid;
        cudaError_t err = tm_launch(kernel, grid, block, 0, src, work, (T *)p->out, n, stride);
        if (err != cudaSuccess) return err;
        ++launches;
        src = work;
        if (2 * stride >= n) break;
    }
    tm_facts_set(facts, (const void *)kernel, first_grid, block, 0, 0, launches);
    return cudaSuccess;
}

int tm_reduce_per_level_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_per_level<float>(p, facts)
                              : launch_per_level<double>(p, facts);
}

double tm_reduce_per_level_bytes(const tm_problem *p)
{
    double values = 0;
    for (long long stride = 1;; stride *= 2) {
        const long long pairs = tm_blocks_for(p->M, 2 * stride);
        const long long rights = p->M / (2 * stride);  // pairs with a right element
        values += (double)pairs + (double)rights + (double)pairs;  // left + right reads, write
        if (2 * stride >= p->M) break;
    }
    return (values + 1) * tm_elem_bytes(p);
}

double tm_reduce_work_copy_scratch(const tm_problem *p)
{
    return tm_elem_bytes(p) * (double)p->M;
}

// The lecture's wrong kernel: the whole tree in one launch, barriers that only hold per block.
template <typename T>
__global__ void reduce_wrong_block_sync_kernel(const T *__restrict__ x, T *work, T *out,
                                               long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) work[i] = x[i];
    __syncthreads();
    for (long long stride = 1; stride < n; stride *= 2) {
        if (i % (2 * stride) == 0 && i + stride < n)
            work[i] += work[i + stride];  // BUG (the lesson): work[i + stride] may belong to a
                // block that has not reached this level yet
        __syncthreads();   // waits for this block only
    }
    if (i == 0) *out = work[0];
}

template <typename T>
static int launch_wrong_block_sync(const tm_problem *p, tm_launch_facts *facts)
{
    auto kernel = reduce_wrong_block_sync_kernel<T>;
    const dim3 block((unsigned)p->params[0]);
    const dim3 grid(tm_ceil_div(p->M, block.x));
    // Zero the work array first, so a value read before its block wrote it reads 0 (not the
    // previous timed launch's result, which would hide the bug).
    cudaError_t err = cudaMemsetAsync(p->scratch, 0, (size_t)p->M * sizeof(T), 0);
    if (err != cudaSuccess) return err;
    tm_facts_set(facts, (const void *)kernel, grid, block, 0, 0, 1);
    return tm_launch(kernel, grid, block, 0, (const T *)p->in0, (T *)p->scratch, (T *)p->out, p->M);
}

int tm_reduce_wrong_block_sync_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_wrong_block_sync<float>(p, facts)
                              : launch_wrong_block_sync<double>(p, facts);
}

double tm_reduce_wrong_block_sync_bytes(const tm_problem *p)
{
    return tm_reduce_per_level_bytes(p) + tm_elem_bytes(p) * (double)p->M;
}
