// cg::this_grid().sync() in a cooperative launch: each round every thread reads its right
// neighbour's value of the previous round, which another block wrote at the blocks' edges, so
// a round may start only when the whole grid has finished the last (a GPU's grid-wide barrier).
// Then block 0 sums every block's partial sum, also written by other blocks before a grid.sync.
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;

__global__ void rounds(int *a, int *b, int *partial, long long *total, int n, int steps)
{
    cg::grid_group grid = cg::this_grid();
    cg::thread_block block = cg::this_thread_block();
    __shared__ int block_sum;
    const int i = (int)grid.thread_rank();
    for (int s = 0; s < steps; ++s) {
        const int *src = (s % 2 == 0) ? a : b;
        int *dst = (s % 2 == 0) ? b : a;
        if (i < n) dst[i] = (src[i] + 3 * src[(i + 1) % n]) % 1000003;
        grid.sync();
    }
    const int *last = (steps % 2 == 0) ? a : b;
    if (block.thread_rank() == 0) block_sum = 0;
    block.sync();
    if (i < n) atomicAdd(&block_sum, last[i]);
    block.sync();
    if (block.thread_rank() == 0) partial[grid.block_rank()] = block_sum;
    cg::sync(grid);
    if (i == 0) {
        long long t = 0;
        for (unsigned long long k = 0; k < grid.num_blocks(); ++k) t += partial[k];
        *total = t;
    }
}

int main()
{
    const int threads = 64, blocks = 6, n = threads * blocks - 5, steps = 9;
    int per_sm = 0, sms = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rounds, threads, 0);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if (per_sm * sms < blocks) {
        printf("too few resident blocks: %d\n", per_sm * sms);
        return 1;
    }
    int *a, *b, *partial;
    long long *total;
    cudaMallocManaged(&a, n * sizeof(int));
    cudaMallocManaged(&b, n * sizeof(int));
    cudaMallocManaged(&partial, blocks * sizeof(int));
    cudaMallocManaged(&total, sizeof(long long));
    for (int i = 0; i < n; ++i) a[i] = (i * 7919) % 101;
    int nn = n, ss = steps;
    void *args[] = {&a, &b, &partial, &total, &nn, &ss};
    cudaError_t err = cudaLaunchCooperativeKernel((const void *)rounds, dim3(blocks), dim3(threads),
                                                  args, 0, 0);
    printf("launch: %s\n", cudaGetErrorName(err));
    printf("sync: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    const int *last = (steps % 2 == 0) ? a : b;
    printf("first %d %d %d last %d\n", last[0], last[1], last[2], last[n - 1]);
    printf("total %lld\n", *total);
    // a grid larger than can be resident at once: refused as a GPU refuses it
    err = cudaLaunchCooperativeKernel((const void *)rounds, dim3(per_sm * sms + 1), dim3(threads),
                                      args, 0, 0);
    printf("too large: %s\n", cudaGetErrorName(err));
    return 0;
}
