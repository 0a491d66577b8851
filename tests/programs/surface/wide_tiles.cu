// Tiles wider than a warp (issue 43): cg::block_tile_memory, this_thread_block(room),
// tiled_partition<64> and <128>, cg::reduce and cg::inclusive_scan on them, a wide tile as a
// thread_group. Prints each element's input, tile sums, inclusive scans and ranks.
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;

__global__ void tiles(const int *in, int *sum, int *scan, int *rank, const double *din, double *top)
{
    __shared__ cg::block_tile_memory<256> room;
    cg::thread_block block = cg::this_thread_block(room);
    cg::thread_block_tile<64> tile = cg::tiled_partition<64>(block);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    sum[i] = cg::reduce(tile, in[i], cg::plus<int>());
    scan[i] = cg::inclusive_scan(tile, in[i], cg::plus<int>());
    const cg::thread_group g = tile;
    g.sync();
    rank[i] = (int)(tile.meta_group_rank() * 10000 + g.thread_rank() * 10 + (g.size() == 64));
    cg::thread_block_tile<128> wider = cg::tiled_partition<128>(cg::this_thread_block());
    top[i] = cg::reduce(wider, din[i], cg::greater<double>());
}

int main()
{
    const int n = 512;
    int h[n], s[n], c[n], r[n], *in, *sum, *scan, *rank;
    double d[n], t[n], *din, *top;
    for (int i = 0; i < n; ++i) {
        h[i] = (i * 7919) % 101 - 50;
        d[i] = (double)((i * 131) % 257) / 7.0;
    }
    cudaMalloc(&in, sizeof h);
    cudaMalloc(&sum, sizeof h);
    cudaMalloc(&scan, sizeof h);
    cudaMalloc(&rank, sizeof h);
    cudaMalloc(&din, sizeof d);
    cudaMalloc(&top, sizeof d);
    cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
    cudaMemcpy(din, d, sizeof d, cudaMemcpyHostToDevice);
    tiles<<<2, 256>>>(in, sum, scan, rank, din, top);
    cudaMemcpy(s, sum, sizeof s, cudaMemcpyDeviceToHost);
    cudaMemcpy(c, scan, sizeof c, cudaMemcpyDeviceToHost);
    cudaMemcpy(r, rank, sizeof r, cudaMemcpyDeviceToHost);
    cudaMemcpy(t, top, sizeof t, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i)
        printf("%d %d %d %d %.17g %.17g\n", h[i], s[i], c[i], r[i], d[i], t[i]);
    return cudaGetLastError() != cudaSuccess;
}
