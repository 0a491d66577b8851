// The runtime API a course program (and NVIDIA's samples' Common/helper_cuda.h) touches, on the
// emulator (issue 43): the real headers' guards, every device attribute, the properties
// deviceQuery prints, occupancy, the profiler API, mapped host memory, limits, stream callbacks
// and host functions, peer access, stream-ordered allocation, prefetch and advise.
#include <cuda_runtime.h>
#include <cuda_profiler_api.h>
#include <cstdio>

#if !defined(__DRIVER_TYPES_H__) || !defined(__CUDA_RUNTIME_H__)
#error "the real headers' guards are not defined"
#endif

__global__ void fill(int *p, int n, int v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + i;
}

static int called = 0;
static void CUDART_CB on_stream(cudaStream_t, cudaError_t status, void *data)
{
    called += *(int *)data + (status == cudaSuccess ? 0 : 100);
}
static void CUDART_CB host_fn(void *data) { called += *(int *)data; }

int main()
{
    int bad = 0, v = 0;
    for (int a = 1; a < (int)cudaDevAttrMax; ++a)
        if (cudaDeviceGetAttribute(&v, (cudaDeviceAttr)a, 0) != cudaSuccess) ++bad;
    printf("attributes refused: %d\n", bad);
    cudaDeviceGetAttribute(&v, cudaDevAttrComputeMode, 0);
    printf("compute mode default: %d\n", v == cudaComputeModeDefault);
    printf("invalid attribute: %s\n", cudaGetErrorName(cudaDeviceGetAttribute(&v, (cudaDeviceAttr)100000, 0)));
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("textures %d %d %d, surface alignment %zu, preemption %d\n", p.maxTexture1D, p.maxTexture2D[0],
           p.maxTexture3D[0], p.surfaceAlignment, p.computePreemptionSupported);

    int minGrid = 0, block = 0;
    printf("occupancy: %s", cudaGetErrorName(cudaOccupancyMaxPotentialBlockSize(&minGrid, &block, fill, 0, 256)));
    printf(" block %d, grid > 0: %d\n", block, minGrid > 0);
    printf("profiler: %d %d\n", cudaProfilerStart(), cudaProfilerStop());

    printf("flags: %s\n", cudaGetErrorName(cudaSetDeviceFlags(cudaDeviceMapHost | cudaDeviceScheduleBlockingSync)));
    static int host[64];
    int *dev = nullptr;
    printf("register: %s\n", cudaGetErrorName(cudaHostRegister(host, sizeof host, cudaHostRegisterMapped)));
    printf("device pointer: %s\n", cudaGetErrorName(cudaHostGetDevicePointer((void **)&dev, host, 0)));
    fill<<<1, 64>>>(dev, 64, 10);
    cudaDeviceSynchronize();
    printf("zero copy: %d %d\n", host[0], host[63]);
    const cudaError_t un = cudaHostUnregister(host), again = cudaHostUnregister(host);
    printf("unregister: %s, again: %s\n", cudaGetErrorName(un), cudaGetErrorName(again));

    size_t heap = 0;
    cudaDeviceSetLimit(cudaLimitMallocHeapSize, 64 << 20);
    cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize);
    printf("heap limit: %zu\n", heap);

    cudaStream_t s;
    cudaStreamCreate(&s);
    int one = 1, ten = 10;
    cudaStreamAddCallback(s, on_stream, &one, 0);
    cudaLaunchHostFunc(s, host_fn, &ten);
    cudaStreamSynchronize(s);
    printf("callbacks: %d\n", called);

    int can = -1;
    const cudaError_t peer = cudaDeviceCanAccessPeer(&can, 0, 0);
    printf("peer: %s %d\n", cudaGetErrorName(peer), can);

    cudaMemPool_t pool;
    unsigned long long threshold = ~0ull, back = 0;
    cudaDeviceGetDefaultMemPool(&pool, 0);
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &back);
    int *a = nullptr;
    const cudaError_t got = cudaMallocAsync(&a, 256 * sizeof(int), s);
    printf("pool: %d, malloc async: %s", back == threshold, cudaGetErrorName(got));
    fill<<<1, 256, 0, s>>>(a, 256, 1);
    int out[256];
    cudaMemcpyAsync(out, a, sizeof out, cudaMemcpyDeviceToHost, s);
    const cudaError_t freed = cudaFreeAsync(a, s);
    printf(", free async: %s, value %d\n", cudaGetErrorName(freed), out[255]);

    int *m = nullptr;
    cudaMallocManaged(&m, 1024);
    cudaMemLocation loc = {cudaMemLocationTypeDevice, 0};
    const cudaError_t p13 = cudaMemPrefetchAsync(m, 1024, loc, 0, s);   // CUDA 13's form
    const cudaError_t p12 = cudaMemPrefetchAsync(m, 1024, cudaCpuDeviceId);   // CUDA 12's
    const cudaError_t a13 = cudaMemAdvise(m, 1024, cudaMemAdviseSetReadMostly, loc);
    const cudaError_t a12 = cudaMemAdvise(m, 4096, cudaMemAdviseSetReadMostly, 0);   // past its end
    printf("prefetch: %s %s, advise: %s %s\n", cudaGetErrorName(p13), cudaGetErrorName(p12),
           cudaGetErrorName(a13), cudaGetErrorName(a12));
    cudaFree(m);
    cudaStreamDestroy(s);
    return 0;
}
