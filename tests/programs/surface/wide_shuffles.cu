// Cooperative groups shuffle types wider than 8 bytes (CUDA moves them in pieces): a uint4
// through a tile's shfl, a 24-byte struct through shfl_down, and a struct through a
// coalesced group's shfl (the even lanes). Prints one line per lane: what each lane received.
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;

struct record {
    double a, b;
    int c;
};

__global__ void shuffles(uint4 *from_next, double *down, int *even)
{
    const unsigned t = threadIdx.x;
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    const uint4 v = make_uint4(t, 2 * t, 3 * t + 1, 4 * t + 5);
    from_next[t] = tile.shfl(v, (t + 1) % 32);
    const record r = tile.shfl_down(record{1.5 * t, 2.0, (int)t * 7}, 3);
    down[t] = r.a + r.b + r.c;
    even[t] = -1;
    if (t % 2 == 0) {
        cg::coalesced_group g = cg::coalesced_threads();
        const record last = g.shfl(record{0.0, 0.0, (int)t * 100 + 1}, g.size() - 1);
        even[t] = last.c;
    }
}

int main()
{
    uint4 *d4;
    double *dd;
    int *de;
    cudaMalloc(&d4, 32 * sizeof(uint4));
    cudaMalloc(&dd, 32 * sizeof(double));
    cudaMalloc(&de, 32 * sizeof(int));
    shuffles<<<1, 32>>>(d4, dd, de);
    uint4 h4[32];
    double hd[32];
    int he[32];
    cudaMemcpy(h4, d4, sizeof h4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hd, dd, sizeof hd, cudaMemcpyDeviceToHost);
    cudaMemcpy(he, de, sizeof he, cudaMemcpyDeviceToHost);
    for (int t = 0; t < 32; ++t)
        printf("%u %u %u %u %.1f %d\n", h4[t].x, h4[t].y, h4[t].z, h4[t].w, hd[t], he[t]);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
