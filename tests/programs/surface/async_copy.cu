// cuda::pipeline (thread scope) and cuda::barrier (block scope) with cuda::memcpy_async
// (issue 43, the globalToShmemAsyncCopy sample's API). Sums of tiles staged through shared
// memory; a stage is refilled before it is read only through the pipeline, as on a GPU.
#include <cuda/barrier>
#include <cuda/pipeline>
#include <cstdio>

#define TILE 32
#define STAGES 2

// out[b] = sum of in's tiles of block b, each tile copied by the thread of its column
__global__ void staged_sums(const float *in, float *out, int tiles)
{
    __shared__ float stage[STAGES][TILE];
    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
    const auto one = cuda::aligned_size_t<alignof(float)>(sizeof(float));
    const float *base = in + (size_t)blockIdx.x * tiles * TILE;
    float sum = 0.0f;
    int fetched = 0;
    for (int t = 0; t < tiles; ++t) {
        for (; fetched < tiles && fetched <= t + STAGES - 1; ++fetched) {
            pipe.producer_acquire();
            cuda::memcpy_async(&stage[fetched % STAGES][threadIdx.x],
                               &base[fetched * TILE + threadIdx.x], one, pipe);
            pipe.producer_commit();
        }
        pipe.consumer_wait();
        __syncthreads();
        for (int k = 0; k < TILE; ++k)
            sum += stage[t % STAGES][k];
        pipe.consumer_release();
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sum;
}

// the same through a block-scope barrier
__global__ void barrier_sums(const float *in, float *out, int tiles)
{
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    __shared__ float stage[TILE];
    if (threadIdx.x == 0) init(&bar, blockDim.x);
    __syncthreads();
    const float *base = in + (size_t)blockIdx.x * tiles * TILE;
    float sum = 0.0f;
    for (int t = 0; t < tiles; ++t) {
        cuda::memcpy_async(&stage[threadIdx.x], &base[t * TILE + threadIdx.x], sizeof(float), bar);
        bar.arrive_and_wait();
        for (int k = 0; k < TILE; ++k)
            sum += stage[k];
        bar.arrive_and_wait();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sum;
}

// wait_prior: of three committed batches, the oldest is copied and the newest two are not yet
__global__ void wait_prior(const int *in, int *out)
{
    int got[3] = {-1, -1, -1};
    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
    for (int i = 0; i < 3; ++i) {
        cuda::memcpy_async(&got[i], &in[i], sizeof(int), pipe);
        pipe.producer_commit();
    }
    cuda::pipeline_consumer_wait_prior<2>(pipe);
    out[0] = got[0];
    out[1] = got[1];
    out[2] = got[2];
}

int main()
{
    const int blocks = 3, tiles = 5, n = blocks * tiles * TILE;
    float h[n], *in, *out, o[2 * blocks];
    for (int i = 0; i < n; ++i)
        h[i] = (float)((i * 37) % 19) - 9.0f;
    cudaMalloc(&in, sizeof h);
    cudaMalloc(&out, sizeof o);
    cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
    staged_sums<<<blocks, TILE>>>(in, out, tiles);
    barrier_sums<<<blocks, TILE>>>(in, out + blocks, tiles);
    cudaMemcpy(o, out, sizeof o, cudaMemcpyDeviceToHost);
    int hi[3] = {7, 8, 9}, *di, ho[3];
    cudaMalloc(&di, 2 * sizeof hi);
    cudaMemcpy(di, hi, sizeof hi, cudaMemcpyHostToDevice);
    wait_prior<<<1, 1>>>(di, di + 3);
    cudaMemcpy(ho, di + 3, sizeof ho, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i)
        printf("%g ", h[i]);
    printf("\n");
    for (int b = 0; b < 2 * blocks; ++b)
        printf("%g ", o[b]);
    printf("\n%d %d %d\n", ho[0], ho[1], ho[2]);
    return cudaGetLastError() != cudaSuccess;
}
