// A program that captures its launches into a CUDA graph (issue 44): tm.run on cuda must not
// break the capture (its per-launch events and their queries). A launch before the capture
// leaves events pending on the stream that then captures; the graph runs three times.
// Prints the sum of the array after each step; on a failure, the CUDA error and exit 1.
#include <cstdio>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            printf("%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));           \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

__global__ void add(float *x, int n, float v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}

__global__ void scale(float *x, int n, float s)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

static double sum(const float *d, int n)
{
    static float h[1024];
    if (cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
    double s = 0;
    for (int i = 0; i < n; i++) s += h[i];
    return s;
}

int main()
{
    const int n = 1024;
    float *d;
    cudaStream_t stream;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemset(d, 0, n * sizeof(float)));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    add<<<n / 256, 256, 0, stream>>>(d, n, 1.0f);   // timed; its events still pending
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    add<<<n / 256, 256, 0, stream>>>(d, n, 2.0f);
    scale<<<n / 256, 256, 0, stream>>>(d, n, 0.5f);
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaStreamSynchronize(stream));
    printf("before the graph: %.1f\n", sum(d, n));
    for (int r = 0; r < 3; r++) {
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaStreamSynchronize(stream));
        printf("after graph launch %d: %.1f\n", r + 1, sum(d, n));
    }
    add<<<n / 256, 256, 0, stream>>>(d, n, 1.0f);   // timed again after the capture
    CHECK(cudaStreamSynchronize(stream));
    printf("at the end: %.1f\n", sum(d, n));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(d));
    return 0;
}
