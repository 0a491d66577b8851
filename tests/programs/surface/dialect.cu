// Device code as NVIDIA's samples write it (issue 43): `extern __shared__` in an included
// header, in either word order and 2-D; umin/umax and the fast-math intrinsics (defined for
// glibc's declarations: they load); __CUDA_ARCH__ guards; kernels launched from several host
// threads at once.
#include <cstdio>
#include <thread>
#include <vector>
#include "dialect_shared.cuh"

__global__ void intrinsics(float *out, unsigned *u)
{
    out[0] = __expf(1.0f);
    out[1] = __logf(2.0f);
    out[2] = __sinf(0.5f) * __sinf(0.5f) + __cosf(0.5f) * __cosf(0.5f);
    out[3] = __powf(2.0f, 10.0f);
    u[0] = umin(3u, 7u) + umax(3u, 7u);
#if __CUDA_ARCH__ >= 700
    u[1] = 700;
#else
    u[1] = 0;
#endif
}

__global__ void add_one(int *p, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) p[i] += 1;
}

int main()
{
    int *d, h[256];
    for (int i = 0; i < 256; ++i) h[i] = i;
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    reverse<<<1, 256, 256 * sizeof(int)>>>(d);
    rows<<<1, 64, 64 * 4 * sizeof(float)>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("reversed %d %d, rows %d\n", h[0], h[255], h[200]);

    float *f;
    unsigned *u;
    cudaMallocManaged(&f, 4 * sizeof(float));
    cudaMallocManaged(&u, 2 * sizeof(unsigned));
    intrinsics<<<1, 1>>>(f, u);
    cudaDeviceSynchronize();
    printf("%.4f %.4f %.4f %.1f %u %u\n", f[0], f[1], f[2], f[3], u[0], u[1]);

    const int n = 1 << 14, threads = 4;
    std::vector<int *> bufs(threads);
    for (auto &b : bufs) {
        cudaMalloc(&b, n * sizeof(int));
        cudaMemset(b, 0, n * sizeof(int));
    }
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            for (int k = 0; k < 20; ++k) add_one<<<8, 128>>>(bufs[t], n);
        });
    for (auto &t : pool) t.join();
    cudaError_t e = cudaDeviceSynchronize();
    long long total = 0;
    std::vector<int> back(n);
    for (auto &b : bufs) {
        cudaMemcpy(back.data(), b, n * sizeof(int), cudaMemcpyDeviceToHost);
        for (int x : back) total += x;
    }
    printf("threads: %s, total %lld\n", cudaGetErrorName(e), total);
    return 0;
}
