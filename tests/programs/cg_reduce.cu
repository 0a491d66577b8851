// A reduction in the style of NVIDIA's current samples: cooperative_groups, tiled_partition<32>,
// shfl_down, and cg::reduce.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>
#include <stdio.h>
namespace cg = cooperative_groups;

__global__ void block_sum(const float *x, float *out, int n)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    __shared__ float partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = warp.size() / 2; offset > 0; offset /= 2)
        v += warp.shfl_down(v, offset);
    if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = v;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        float w = warp.thread_rank() < block.size() / 32 ? partial[warp.thread_rank()] : 0.0f;
        w = cg::reduce(warp, w, cg::plus<float>());
        if (block.thread_rank() == 0) atomicAdd(out, w);
    }
}

int main(void)
{
    const int n = 100000;
    float *h = new float[n];
    double want = 0;
    for (int i = 0; i < n; ++i) {
        h[i] = (float)(i % 17) - 8.0f + 0.25f;
        want += h[i];
    }
    float *x, *out, got = 0;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&out, sizeof(float));
    cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(out, 0, sizeof(float));
    block_sum<<<(n + 255) / 256, 256>>>(x, out, n);
    cudaMemcpy(&got, out, sizeof(float), cudaMemcpyDeviceToHost);
    printf("sum %.2f, expected %.2f\n", got, want);
    cudaFree(x);
    cudaFree(out);
    delete[] h;
    return 0;
}
