// Every runtime call tm.run's emulator supports, with the results a GPU gives; stdout is the
// same on both backends (tests/test_programs.py; benchmarks/gpu_run.sh on the GPU).
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

__constant__ float coeffs[4];
__device__ int counter;

__global__ void scale(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * coeffs[0] + coeffs[1];
}

__global__ void count_threads(int *flag)
{
    atomicAdd(&counter, 1);
    if (threadIdx.x == 0 && blockIdx.x == 0) *flag = 1;
}

__global__ void say(int v)
{
    printf("kernel says %d\n", v);
}

__global__ void dyn_shared(float *out)
{
    extern __shared__ float buf[];
    buf[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

__global__ void add_one(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

static void show(const char *what, cudaError_t e)
{
    printf("%s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

int main(void)
{
    const int n = 1000;
    float h[n], back[n];
    for (int i = 0; i < n; ++i) h[i] = (float)i;

    int count = 0;
    show("cudaGetDeviceCount", cudaGetDeviceCount(&count));
    printf("devices >= 1: %d\n", count >= 1);
    show("cudaSetDevice", cudaSetDevice(0));
    cudaDeviceProp prop;
    show("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, 0));
    printf("warpSize %d, maxThreadsPerBlock %d\n", prop.warpSize, prop.maxThreadsPerBlock);
    size_t freeb = 0, total = 0;
    show("cudaMemGetInfo", cudaMemGetInfo(&freeb, &total));
    printf("free <= total: %d\n", freeb <= total && total > 0);

    // memory and copies of every kind
    float *d, *d2;
    show("cudaMalloc", cudaMalloc(&d, n * sizeof(float)));
    show("cudaMalloc", cudaMalloc((void **)&d2, n * sizeof(float)));
    show("H2D", cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    show("D2D", cudaMemcpy(d2, d, n * sizeof(float), cudaMemcpyDeviceToDevice));
    memset(back, 0, sizeof back);
    show("D2H", cudaMemcpy(back, d2, n * sizeof(float), cudaMemcpyDeviceToHost));
    printf("back[999] = %.0f\n", back[999]);
    show("Default", cudaMemcpy(back, d, 10 * sizeof(float), cudaMemcpyDefault));
    show("H2H", cudaMemcpy(back, h, 10 * sizeof(float), cudaMemcpyHostToHost));
    show("cudaMemset", cudaMemset(d2, 0, n * sizeof(float)));
    cudaMemcpy(back, d2, n * sizeof(float), cudaMemcpyDeviceToHost);
    printf("after memset back[5] = %.0f\n", back[5]);

    // a copy past the end of the allocation: invalid argument, nothing copied
    back[0] = -7.0f;
    show("past the end", cudaMemcpy(back, d, (n + 1) * sizeof(float), cudaMemcpyDeviceToHost));
    printf("nothing copied: %d\n", back[0] == -7.0f);
    show("cudaGetLastError after it", cudaGetLastError());
    show("cudaGetLastError again", cudaGetLastError());

    // symbols
    float c[4] = {2.0f, 1.0f, 0.0f, 0.0f};
    show("cudaMemcpyToSymbol", cudaMemcpyToSymbol(coeffs, c, sizeof c));
    scale<<<(n + 255) / 256, 256>>>(d, n);
    show("launch scale", cudaGetLastError());
    cudaMemcpy(back, d, n * sizeof(float), cudaMemcpyDeviceToHost);
    printf("scaled back[10] = %.0f\n", back[10]);
    int zero = 0, got = -1;
    show("cudaMemcpyToSymbol counter", cudaMemcpyToSymbol(counter, &zero, sizeof zero));

    // a block of 2048 threads: invalid argument at the launch, the kernel does not run
    int *flag;
    cudaMalloc(&flag, sizeof(int));
    cudaMemset(flag, 0, sizeof(int));
    count_threads<<<1, 2048>>>(flag);
    show("peek after 2048 threads", cudaPeekAtLastError());
    show("get after 2048 threads", cudaGetLastError());
    show("get again", cudaGetLastError());
    show("cudaDeviceSynchronize", cudaDeviceSynchronize());
    int f = -1;
    cudaMemcpy(&f, flag, sizeof f, cudaMemcpyDeviceToHost);
    printf("kernel ran: %d\n", f);
    count_threads<<<3, 64>>>(flag);
    show("cudaMemcpyFromSymbol", cudaMemcpyFromSymbol(&got, counter, sizeof got));
    printf("counter = %d\n", got);

    // device printf appears at the next synchronising call
    printf("before the launch\n");
    say<<<1, 1>>>(42);
    printf("after the launch\n");
    show("cudaDeviceSynchronize", cudaDeviceSynchronize());

    // dynamic shared memory above 48 KiB needs cudaFuncSetAttribute
    float *out;
    cudaMalloc(&out, 256 * sizeof(float));
    dyn_shared<<<1, 256, 64 * 1024>>>(out);
    show("64 KiB without the attribute", cudaGetLastError());
    show("cudaFuncSetAttribute", cudaFuncSetAttribute(dyn_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    dyn_shared<<<1, 256, 64 * 1024>>>(out);
    show("64 KiB with it", cudaGetLastError());
    float o[256];
    cudaMemcpy(o, out, sizeof o, cudaMemcpyDeviceToHost);
    printf("out[0] = %.0f, out[255] = %.0f\n", o[0], o[255]);

    // events and streams
    cudaEvent_t start, stop;
    show("cudaEventCreate", cudaEventCreate(&start));
    cudaEventCreate(&stop);
    cudaStream_t s;
    show("cudaStreamCreate", cudaStreamCreate(&s));
    float *pinned;
    show("cudaMallocHost", cudaMallocHost(&pinned, n * sizeof(float)));
    for (int i = 0; i < n; ++i) pinned[i] = 1.0f;
    cudaEventRecord(start, s);
    show("cudaMemcpyAsync", cudaMemcpyAsync(d, pinned, n * sizeof(float), cudaMemcpyHostToDevice, s));
    add_one<<<(n + 255) / 256, 256, 0, s>>>(d, n);
    add_one<<<(n + 255) / 256, 256, 0, s>>>(d, n);
    cudaMemcpyAsync(pinned, d, n * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaEventRecord(stop, s);
    show("cudaStreamSynchronize", cudaStreamSynchronize(s));
    show("cudaEventSynchronize", cudaEventSynchronize(stop));
    float ms = -1.0f;
    show("cudaEventElapsedTime", cudaEventElapsedTime(&ms, start, stop));
    printf("elapsed >= 0: %d\n", ms >= 0.0f);
    printf("in order: pinned[7] = %.0f\n", pinned[7]);
    show("cudaStreamDestroy", cudaStreamDestroy(s));
    show("cudaFreeHost", cudaFreeHost(pinned));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);

    // managed memory: host and kernels both
    float *m;
    show("cudaMallocManaged", cudaMallocManaged(&m, n * sizeof(float)));
    for (int i = 0; i < n; ++i) m[i] = 2.0f * i;
    add_one<<<(n + 255) / 256, 256>>>(m, n);
    cudaDeviceSynchronize();
    printf("managed m[3] = %.0f\n", m[3]);
    show("cudaFree managed", cudaFree(m));

    show("cudaFree", cudaFree(d));
    cudaFree(d2);
    cudaFree(flag);
    cudaFree(out);
    show("cudaDeviceReset", cudaDeviceReset());
    return 0;
}
