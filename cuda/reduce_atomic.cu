// reduce_atomic.cu: reductions finished with atomics (CMU 15-418 lecture 001, "Advanced topics:
// atomics"). An atomicAdd is a read-modify-write that no other thread can interleave with, so
// blocks can combine their results without a second launch; additions to ONE address are
// serialised by the memory system, so how many of them a kernel makes decides its speed.
// The order of the additions changes from run to run: float sums may differ in the last bits.
//
// atomic: a grid-stride loop sums many elements per thread, the block sums with warp shuffles,
// and thread 0 makes ONE atomicAdd per block.
// Global traffic: n reads + one atomic per block (+ zeroing the total before the launch).
//
// atomic_per_element: every thread atomically adds its one element to the total: n atomics on
// one address, the contention lesson.
// Global traffic: n reads + n atomic read-modify-writes of one address.
#include "reduce_common.h"

template <typename T>
__global__ void reduce_atomic_kernel(const T *__restrict__ x, long long n, T *out)
{
    __shared__ T warp_sums[32];
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long threads = (long long)gridDim.x * blockDim.x;
    T sum = T(0);
    for (long long i = thread; i < n; i += threads)
        sum += x[i];
    sum = tm_block_sum(sum, warp_sums);
    if (threadIdx.x == 0) atomicAdd(out, sum);
}

template <typename T>
__global__ void reduce_atomic_per_element_kernel(const T *__restrict__ x, long long n, T *out)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}

template <typename T>
static int launch_atomic(const tm_problem *p, tm_launch_facts *facts, bool per_element)
{
    const dim3 block((unsigned)p->params[0]);
    cudaError_t err = cudaMemsetAsync(p->out, 0, sizeof(T), 0);  // the total starts at 0.0
    if (err != cudaSuccess) return err;
    if (per_element) {
        auto kernel = reduce_atomic_per_element_kernel<T>;
        const dim3 grid(tm_ceil_div(p->M, block.x));
        tm_facts_set(facts, (const void *)kernel, grid, block, 0, 0, 1);
        return tm_launch(kernel, grid, block, 0, (const T *)p->in0, p->M, (T *)p->out);
    }
    auto kernel = reduce_atomic_kernel<T>;
    const dim3 grid((unsigned)tm_resident_blocks(block.x, tm_blocks_for(p->M, block.x)));
    tm_facts_set(facts, (const void *)kernel, grid, block, 32 * sizeof(T), 0, 1);
    return tm_launch(kernel, grid, block, 0, (const T *)p->in0, p->M, (T *)p->out);
}

int tm_reduce_atomic_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_atomic<float>(p, facts, false)
                              : launch_atomic<double>(p, facts, false);
}

int tm_reduce_atomic_per_element_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_atomic<float>(p, facts, true)
                              : launch_atomic<double>(p, facts, true);
}

// n reads; each atomic reads and writes the total once.
double tm_reduce_atomic_bytes(const tm_problem *p)
{
    // At most one block per `block` elements, and no more than a device holds (2112 on an H100).
    const long long needed = tm_blocks_for(p->M, p->params[0]);
    const long long blocks = needed < 2112 ? needed : 2112;
    return tm_elem_bytes(p) * ((double)p->M + 2.0 * (double)blocks + 1.0);
}

double tm_reduce_atomic_per_element_bytes(const tm_problem *p)
{
    return tm_elem_bytes(p) * (3.0 * (double)p->M + 1.0);
}
