// reduce_steps.cu: the classic step-by-step optimisation of the shared-memory tree reduction
// (M. Harris, "Optimizing Parallel Reduction in CUDA", kernels 1 to 6; in the course: lecture 001
// Idea 2.3 for the shared-memory tree, lecture 002 for divergence, shared-memory banks and thread
// coarsening). Every step is a pass that writes one partial sum per block; the host relaunches
// on the partials until one value is left (tm_multi_pass in reduce_common.h).
//
//   interleaved_divergent       tid % (2*stride) == 0 adds: the active threads of a warp thin
//                               out, so every warp keeps diverging.
//   interleaved_bank_conflicts  index = 2*stride*tid: no divergence, but a warp's accesses are
//                               2*stride words apart and pile up in the same banks.
//   sequential                  the active threads add partial[tid + half]: contiguous, no
//                               conflicts; half the threads idle from the first step on.
//   first_add                   each thread adds two elements while loading: half the blocks.
//   unroll_last_warp            the last 32 threads finish without __syncthreads (only __syncwarp
//                               between steps, which the lecture's volatile code omitted and
//                               Volta and later need).
//   multi_element               each thread first adds `per_thread` elements in a coalesced loop
//                               (coarsening), then the unrolled tree.
// Global traffic: n reads, plus one write and one later read per partial sum
// (n / elements-per-block partials in the first pass, fewer after): tm_multi_pass_bytes.
#include "reduce_common.h"

enum ReduceStep {
    STEP_INTERLEAVED_DIVERGENT,
    STEP_INTERLEAVED_BANK_CONFLICTS,
    STEP_SEQUENTIAL,
    STEP_FIRST_ADD,
    STEP_UNROLL_LAST_WARP,
    STEP_MULTI_ELEMENT
};

// Load: one element per thread (steps 1 to 3), two (first_add) or per_thread (multi_element).
template <typename T>
__device__ __forceinline__ T load_per_thread(const T *__restrict__ src, long long count,
                                             long long block_start, int per_thread)
{
    T sum = T(0);
    for (int j = 0; j < per_thread; ++j) {
        const long long i = block_start + (long long)j * blockDim.x + threadIdx.x;
        if (i < count) sum += src[i];
    }
    return sum;
}

// The last warp, unrolled: reads and writes separated by __syncwarp. blockDim.x >= 64.
template <typename T>
__device__ __forceinline__ void last_warp_sum(T *partial, unsigned tid)
{
    volatile T *p = partial;
    T v = p[tid] + p[tid + 32];
    __syncwarp();
    p[tid] = v;
    __syncwarp();
    v += p[tid + 16];
    __syncwarp();
    p[tid] = v;
    __syncwarp();
    v += p[tid + 8];
    __syncwarp();
    p[tid] = v;
    __syncwarp();
    v += p[tid + 4];
    __syncwarp();
    p[tid] = v;
    __syncwarp();
    v += p[tid + 2];
    __syncwarp();
    p[tid] = v;
    __syncwarp();
    v += p[tid + 1];
    __syncwarp();
    p[tid] = v;
}

template <typename T, int STEP>
__global__ void reduce_step_kernel(const T *__restrict__ src, T *__restrict__ dst, long long count,
                                   int per_thread)
{
    TM_DYNAMIC_SHARED(T, partial);
    const unsigned tid = threadIdx.x;
    const long long block_start = (long long)blockIdx.x * blockDim.x * per_thread;
    partial[tid] = load_per_thread(src, count, block_start, per_thread);
    __syncthreads();

    if (STEP == STEP_INTERLEAVED_DIVERGENT) {
        for (unsigned stride = 1; stride < blockDim.x; stride *= 2) {
            if (tid % (2 * stride) == 0) partial[tid] += partial[tid + stride];
            __syncthreads();
        }
    } else if (STEP == STEP_INTERLEAVED_BANK_CONFLICTS) {
        for (unsigned stride = 1; stride < blockDim.x; stride *= 2) {
            const unsigned index = 2 * stride * tid;
            if (index < blockDim.x) partial[index] += partial[index + stride];
            __syncthreads();
        }
    } else if (STEP == STEP_SEQUENTIAL || STEP == STEP_FIRST_ADD) {
        for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
            if (tid < half) partial[tid] += partial[tid + half];
            __syncthreads();
        }
    } else {  // unroll_last_warp, multi_element
        for (unsigned half = blockDim.x / 2; half > 32; half /= 2) {
            if (tid < half) partial[tid] += partial[tid + half];
            __syncthreads();
        }
        if (tid < 32) last_warp_sum(partial, tid);
    }
    if (tid == 0) dst[blockIdx.x] = partial[0];
}

template <typename T, int STEP>
static int launch_step(const tm_problem *p, tm_launch_facts *facts, int per_thread)
{
    auto kernel = reduce_step_kernel<T, STEP>;
    const unsigned threads = (unsigned)p->params[0];
    const size_t shared = threads * sizeof(T);
    return tm_multi_pass<T>(p, facts, (const void *)kernel, threads,
                            (long long)threads * per_thread, shared,
                            [&](dim3 grid, const T *src, long long count, T *dst) {
        return tm_launch(kernel, grid, dim3(threads), shared, src, dst, count, per_thread);
    });
}

template <int STEP>
static int launch_step_dtype(const tm_problem *p, tm_launch_facts *facts, int per_thread)
{
    return p->dtype == TM_F32 ? launch_step<float, STEP>(p, facts, per_thread)
                              : launch_step<double, STEP>(p, facts, per_thread);
}

// Elements one block reduces in a pass.
static long long step_elems_per_block(const tm_problem *p, int per_thread)
{
    return (long long)p->params[0] * per_thread;
}

#define TM_REDUCE_STEP(name, STEP, PER_THREAD)                                 \
    int tm_reduce_##name##_launch(const tm_problem *p, tm_launch_facts *facts) \
    {                                                                          \
        return launch_step_dtype<STEP>(p, facts, PER_THREAD);                  \
    }                                                                          \
    double tm_reduce_##name##_bytes(const tm_problem *p)                       \
    {                                                                          \
        return tm_multi_pass_bytes(p, step_elems_per_block(p, PER_THREAD));    \
    }                                                                          \
    double tm_reduce_##name##_scratch(const tm_problem *p)                     \
    {                                                                          \
        return tm_multi_pass_scratch(p, step_elems_per_block(p, PER_THREAD));  \
    }

TM_REDUCE_STEP(interleaved_divergent, STEP_INTERLEAVED_DIVERGENT, 1)
TM_REDUCE_STEP(interleaved_bank_conflicts, STEP_INTERLEAVED_BANK_CONFLICTS, 1)
TM_REDUCE_STEP(sequential, STEP_SEQUENTIAL, 1)
TM_REDUCE_STEP(first_add, STEP_FIRST_ADD, 2)
TM_REDUCE_STEP(unroll_last_warp, STEP_UNROLL_LAST_WARP, 2)
TM_REDUCE_STEP(multi_element, STEP_MULTI_ELEMENT, p->params[1])
