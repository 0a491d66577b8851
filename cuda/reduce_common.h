// reduce_common.h: what the reduce_*.cu kernel files share. The host-side multi-pass driver
// (block partial sums, relaunched until one value is left), warp and block sums with warp
// shuffles, 128-bit vector types, and the traffic and scratch arithmetic the registry rows use.
// All indices into the data are 64-bit (`long long`): lengths above 2^31 work on the GPU.
#pragma once
#include "common.h"

// ---- host-side arithmetic ----

static inline double tm_elem_bytes(const tm_problem *p)
{
    return p->dtype == TM_F32 ? 4.0 : 8.0;
}
static inline long long tm_blocks_for(long long count, long long elems_per_block)
{
    return (count + elems_per_block - 1) / elems_per_block;
}

// A pass reads `count` values and writes one partial per block; the driver relaunches on the
// partials until one block is left, whose result goes to out.
// Traffic: n reads, then each pass's partials written once and read once by the next pass.
static inline double tm_multi_pass_bytes(const tm_problem *p, long long elems_per_block)
{
    double values = 0;
    for (long long count = p->M;;) {
        const long long blocks = tm_blocks_for(count, elems_per_block);
        values += (double)count + (double)blocks;
        if (blocks <= 1) break;
        count = blocks;
    }
    return values * tm_elem_bytes(p);
}

// The driver ping-pongs between two partial arrays: the first pass's and the second pass's.
static inline double tm_multi_pass_scratch(const tm_problem *p, long long elems_per_block)
{
    const long long first = tm_blocks_for(p->M, elems_per_block);
    if (first <= 1) return 0;
    return tm_elem_bytes(p) * (double)(first + tm_blocks_for(first, elems_per_block));
}

// Run `launch_pass(grid, src, count, dst)` until one block is left; dst of the last pass is out.
// Facts describe the first pass; `launches` counts the passes.
template <typename T, typename LaunchPass>
static inline int tm_multi_pass(const tm_problem *p, tm_launch_facts *facts, const void *func,
                                unsigned threads, long long elems_per_block, size_t shared_bytes,
                                LaunchPass launch_pass)
{
    const long long first_blocks = tm_blocks_for(p->M, elems_per_block);
    T *partials[2] = {NULL, NULL};
    if (first_blocks > 1) {
        partials[0] = (T *)p->scratch;
        partials[1] = partials[0] + first_blocks;
    }
    const T *src = (const T *)p->in0;
    long long count = p->M;
    int launches = 0;
    for (;;) {
        const long long blocks = tm_blocks_for(count, elems_per_block);
        T *dst = blocks == 1 ? (T *)p->out : partials[launches % 2];
        cudaError_t err = launch_pass(dim3((unsigned)blocks), src, count, dst);
        if (err != cudaSuccess) return err;
        ++launches;
        if (blocks == 1) break;
        src = dst;
        count = blocks;
    }
    tm_facts_set(facts, func, dim3((unsigned)first_blocks), dim3(threads), shared_bytes,
                 shared_bytes, launches);
    return cudaSuccess;
}

// Blocks that fill the device once: multiprocessors x resident blocks of `threads` each, at
// most `cap` (the grid-stride kernels' partial arrays are sized for `cap`).
static inline long long tm_resident_blocks(unsigned threads, long long cap)
{
    int device = 0, sms = 1, threads_per_sm = 2048;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        sms = 1;
        threads_per_sm = 2048;
    }
    long long blocks = (long long)sms * (threads_per_sm / (int)threads);
    if (blocks < 1) blocks = 1;
    return blocks < cap ? blocks : cap;
}

// ---- device side ----

// 128-bit vectors: four floats or two doubles per load.
template <typename T>
struct tm_vec128;
template <>
struct tm_vec128<float> {
    typedef float4 type;
    static constexpr int width = 4;
    static __device__ __forceinline__ float sum(float4 v) { return (v.x + v.y) + (v.z + v.w); }
};
template <>
struct tm_vec128<double> {
    typedef double2 type;
    static constexpr int width = 2;
    static __device__ __forceinline__ double sum(double2 v) { return v.x + v.y; }
};

// Sum over the 32 lanes of a warp; lane 0 holds the total (lecture: warp shuffle, no shared
// memory and no barrier inside a warp).
template <typename T>
__device__ __forceinline__ T tm_warp_sum(T value)
{
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        value += __shfl_down_sync(0xffffffffu, value, offset);
    return value;
}

// Sum over the block; thread 0 holds the total. `warp_sums` is __shared__ T[32]. Every thread of
// the block must call it (it contains a barrier). blockDim.x is a multiple of 32.
template <typename T>
__device__ __forceinline__ T tm_block_sum(T value, T *warp_sums)
{
    const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    const unsigned warps = blockDim.x / warpSize;
    value = tm_warp_sum(value);
    if (lane == 0) warp_sums[warp] = value;
    __syncthreads();  // every warp's sum is in shared memory
    value = T(0);
    if (warp == 0) {
        value = lane < warps ? warp_sums[lane] : T(0);
        value = tm_warp_sum(value);
    }
    return value;
}
