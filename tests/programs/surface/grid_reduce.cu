// reductionMultiBlockCG's shape, our own code: a grid-stride sum per thread, each warp's sum by
// cg::reduce over a static tile (plus, and bit_or for a checksum of the bits), the block's total
// by a helper that takes the block group by reference and synchronises, then grid.sync() and
// one thread of the grid adds the blocks' totals, which other blocks wrote.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cstdio>
namespace cg = cooperative_groups;

__device__ void block_total(double *slots, unsigned *bits, const cg::thread_block &block)
{
    const unsigned rank = block.thread_rank();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    const double mine = slots[rank];
    const double warp_sum = cg::reduce(warp, mine, cg::plus<double>());
    bits[rank] = cg::reduce(warp, bits[rank], cg::bit_or<unsigned>());
    cg::sync(block);
    if (warp.thread_rank() == 0) slots[warp.meta_group_rank()] = warp_sum;
    cg::sync(block);
    if (rank == 0) {
        double sum = 0.0;
        unsigned any = 0;
        for (unsigned w = 0; w < warp.meta_group_size(); ++w) {
            sum += slots[w];
            any |= bits[w * warp.size()];
        }
        slots[0] = sum;
        bits[0] = any;
    }
    cg::sync(block);
}

__global__ void grid_sum(const float *x, double *partial, unsigned *partial_bits, double *total,
                         unsigned *total_bits, unsigned n)
{
    cg::thread_block block = cg::this_thread_block();
    cg::grid_group grid = cg::this_grid();
    extern __shared__ double slots[];
    __shared__ unsigned bits[1024];
    double mine = 0.0;
    unsigned seen = 0;
    for (unsigned long long i = grid.thread_rank(); i < n; i += grid.size()) {
        mine += x[i];
        seen |= 1u << (i % 32);
    }
    slots[block.thread_rank()] = mine;
    bits[block.thread_rank()] = seen;
    block_total(slots, bits, block);
    if (block.thread_rank() == 0) {
        partial[blockIdx.x] = slots[0];
        partial_bits[blockIdx.x] = bits[0];
    }
    grid.sync();
    if (grid.thread_rank() == 0) {
        double sum = 0.0;
        unsigned any = 0;
        for (unsigned long long b = 0; b < grid.num_blocks(); ++b) {
            sum += partial[b];
            any |= partial_bits[b];
        }
        *total = sum;
        *total_bits = any;
    }
}

int main()
{
    const unsigned n = 1000003, threads = 256, blocks = 12;
    float *x;
    double *partial, *total;
    unsigned *partial_bits, *total_bits;
    cudaMallocManaged(&x, n * sizeof(float));
    cudaMallocManaged(&partial, blocks * sizeof(double));
    cudaMallocManaged(&total, sizeof(double));
    cudaMallocManaged(&partial_bits, blocks * sizeof(unsigned));
    cudaMallocManaged(&total_bits, sizeof(unsigned));
    for (unsigned i = 0; i < n; ++i)
        x[i] = (float)((i * 2654435761u) % 1000u) / 1000.0f - 0.5f;
    unsigned nn = n;
    void *args[] = {&x, &partial, &partial_bits, &total, &total_bits, &nn};
    cudaError_t err = cudaLaunchCooperativeKernel((const void *)grid_sum, dim3(blocks),
                                                  dim3(threads), args, threads * sizeof(double), 0);
    printf("launch: %s\n", cudaGetErrorName(err));
    printf("sync: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    printf("total %.17g bits %08x\n", *total, *total_bits);
    return 0;
}
