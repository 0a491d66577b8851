// Cooperative groups made at run time (issue 43): a thread_group from the dynamic
// tiled_partition, coalesced_threads() in a divergent branch, labeled_partition,
// binary_partition with cg::reduce, and this_grid()'s rank and size.
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;

__device__ int sum_group(cg::thread_group g, int *x, int v)
{
    const int lane = g.thread_rank();
    for (int i = g.size() / 2; i > 0; i /= 2) {
        x[lane] = v;
        g.sync();
        if (lane < i) v += x[lane + i];
        g.sync();
    }
    return v;
}

__global__ void groups(int *out, int *counter, int *bucket_count, unsigned long long *grid_info)
{
    __shared__ int work[64];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_group tile = cg::tiled_partition(block, 16);
    const int base = (block.thread_rank() / 16) * 16;
    const int s = sum_group(tile, work + base, (int)block.thread_rank());
    if (tile.thread_rank() == 0) out[block.thread_rank() / 16] = s;
    if (threadIdx.x % 3 == 0) {   // divergent: the group is the lanes that came here
        cg::coalesced_group active = cg::coalesced_threads();
        if (active.thread_rank() == 0) atomicAdd(counter, (int)active.size());
        auto same = cg::labeled_partition(active, (int)(threadIdx.x % 2));
        const int mx = cg::reduce(same, (int)threadIdx.x, cg::greater<int>());
        if (same.thread_rank() == 0) atomicAdd(&bucket_count[threadIdx.x % 2], mx);
    }
    cg::thread_block_tile<32> t32 = cg::tiled_partition<32>(block);
    auto half = cg::binary_partition(t32, threadIdx.x & 1);
    const int odd_even = cg::reduce(half, 1, cg::plus<int>());
    if (half.thread_rank() == 0) atomicAdd(&out[4 + (threadIdx.x & 1)], odd_even);
    cg::grid_group grid = cg::this_grid();
    if (grid.thread_rank() == grid.size() - 1) {
        grid_info[0] = grid.thread_rank();
        grid_info[1] = grid.size();
    }
}

int main()
{
    int *out, *counter, *buckets;
    unsigned long long *info;
    cudaMallocManaged(&out, 6 * sizeof(int));
    cudaMallocManaged(&counter, sizeof(int));
    cudaMallocManaged(&buckets, 2 * sizeof(int));
    cudaMallocManaged(&info, 2 * sizeof(unsigned long long));
    for (int i = 0; i < 6; ++i) out[i] = 0;
    *counter = 0;
    buckets[0] = buckets[1] = 0;
    groups<<<1, 64>>>(out, counter, buckets, info);
    cudaError_t e = cudaDeviceSynchronize();
    printf("%s\n", cudaGetErrorString(e));
    printf("tiles %d %d %d %d\n", out[0], out[1], out[2], out[3]);
    printf("coalesced %d\n", *counter);
    printf("labeled max %d %d\n", buckets[0], buckets[1]);
    printf("binary %d %d\n", out[4], out[5]);
    printf("grid %llu %llu\n", info[0], info[1]);
    return 0;
}
