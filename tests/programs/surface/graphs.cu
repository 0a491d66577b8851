// CUDA graphs and launches through a kernel's address on the emulator (issue 43): a graph made
// node by node (memcpy, memset, kernel and host nodes, dependencies, clone), the same work
// captured from three streams (fork and join through events), cudaLaunchKernel. Prints the
// input and each way's result: out[i] = in[i] * 2 + 1, then the sum of out.
#include <cstdio>
#include <vector>

__global__ void scale(const float *in, float *out, float a, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += a * in[i];
}

__global__ void total(const float *out, double *sum, int n)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < n; ++i)
            s += out[i];
        *sum = s;
    }
}

static void CUDART_CB report(void *data)
{
    printf("host node: %.1f\n", *(double *)data);
}

#define CHECK(x)                                                      \
    do {                                                              \
        cudaError_t e = (x);                                          \
        if (e != cudaSuccess) {                                       \
            printf("line %d: %s\n", __LINE__, cudaGetErrorString(e)); \
            return 1;                                                 \
        }                                                             \
    } while (0)

int main()
{
    const int n = 300;
    float h[n], *in, *out;
    double *sum, host_sum = 0.0;
    for (int i = 0; i < n; ++i)
        h[i] = (float)((i * 29) % 23) - 11.0f;
    CHECK(cudaMalloc(&in, sizeof h));
    CHECK(cudaMalloc(&out, sizeof h));
    CHECK(cudaMalloc(&sum, sizeof(double)));
    // an unknown kernel address is refused
    int not_a_kernel = 0;
    void *none[1] = {&not_a_kernel};
    printf("unknown: %s\n",
           cudaGetErrorName(cudaLaunchKernel((const void *)&report, dim3(1), dim3(1), none, 0, 0)));
    cudaGetLastError();
    // no launch of scale or total before the graph's nodes name them by address: the build
    // enters every kernel of the file in the emulator's table when the program loads
    CHECK(cudaMemset(sum, 0, sizeof(double)));

    // ---- a graph made node by node ----
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t copy_in, fill, run, add, copy_out, host;
    cudaMemcpy3DParms cp = {0};
    cp.srcPtr = make_cudaPitchedPtr(h, sizeof h, n, 1);
    cp.dstPtr = make_cudaPitchedPtr(in, sizeof h, n, 1);
    cp.extent = make_cudaExtent(sizeof h, 1, 1);
    cp.kind = cudaMemcpyHostToDevice;
    CHECK(cudaGraphAddMemcpyNode(&copy_in, graph, NULL, 0, &cp));
    cudaMemsetParams ms = {0};
    ms.dst = out;
    ms.value = 0x3f800000;   // 1.0f
    ms.elementSize = 4;
    ms.width = n;
    ms.height = 1;
    CHECK(cudaGraphAddMemsetNode(&fill, graph, NULL, 0, &ms));
    float a = 2.0f;
    int count = n;
    void *args[4] = {&in, &out, &a, &count};
    // the fields by name: the emulator spells blockDim and gridDim as macros, so the build
    // renames a member named so (toolchain/launch_rewrite.py)
    cudaKernelNodeParams kp = {0};
    kp.func = (void *)scale;
    kp.gridDim = dim3((n + 127) / 128);
    kp.blockDim = dim3(128);
    kp.kernelParams = args;
    std::vector<cudaGraphNode_t> deps = {copy_in, fill};
    CHECK(cudaGraphAddKernelNode(&run, graph, deps.data(), deps.size(), &kp));
    a = 100.0f;   // the node copied the arguments when it was added
    void *args2[3] = {&out, &sum, &count};
    kp = cudaKernelNodeParams{(void *)total, dim3(1), dim3(32), 0, args2, NULL};
    CHECK(cudaGraphAddKernelNode(&add, graph, &run, 1, &kp));
    cudaMemcpy3DParms back = {0};
    back.srcPtr = make_cudaPitchedPtr(sum, sizeof(double), 1, 1);
    back.dstPtr = make_cudaPitchedPtr(&host_sum, sizeof(double), 1, 1);
    back.extent = make_cudaExtent(sizeof(double), 1, 1);
    back.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaGraphAddMemcpyNode(&copy_out, graph, &add, 1, &back));
    cudaHostNodeParams hp = {0};
    hp.fn = report;
    hp.userData = &host_sum;
    CHECK(cudaGraphAddHostNode(&host, graph, &copy_out, 1, &hp));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(graph, NULL, &nodes));
    printf("nodes: %zu\n", nodes);
    cudaGraph_t twin;
    CHECK(cudaGraphClone(&twin, graph));
    cudaGraphExec_t exec, twin_exec;
    CHECK(cudaGraphInstantiate(&exec, graph, NULL, NULL, 0));
    CHECK(cudaGraphInstantiate(&twin_exec, twin, 0));
    cudaStream_t s0, s1, s2;
    CHECK(cudaStreamCreate(&s0));
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreate(&s2));
    float r[n];
    for (cudaGraphExec_t x : {exec, twin_exec}) {
        CHECK(cudaGraphLaunch(x, s0));
        CHECK(cudaStreamSynchronize(s0));
        CHECK(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i)
            printf("%g ", r[i]);
        printf("\n");
    }

    // ---- the same work captured: s0 forks to s1 (the fill), joins it before the kernel ----
    cudaEvent_t fork, filled;
    CHECK(cudaEventCreate(&fork));
    CHECK(cudaEventCreate(&filled));
    cudaGraph_t captured;
    host_sum = 0.0;
    CHECK(cudaMemset(out, 0, sizeof h));
    CHECK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
    CHECK(cudaEventRecord(fork, s0));
    CHECK(cudaStreamWaitEvent(s1, fork, 0));
    CHECK(cudaMemcpyAsync(in, h, sizeof h, cudaMemcpyHostToDevice, s0));
    CHECK(cudaMemsetAsync(out, 0, sizeof h, s1));
    CHECK(cudaEventRecord(filled, s1));
    CHECK(cudaStreamWaitEvent(s0, filled, 0));
    scale<<<(n + 127) / 128, 128, 0, s0>>>(in, out, 3.0f, n);
    total<<<1, 32, 0, s0>>>(out, sum, n);
    CHECK(cudaMemcpyAsync(&host_sum, sum, sizeof(double), cudaMemcpyDeviceToHost, s0));
    CHECK(cudaLaunchHostFunc(s0, report, &host_sum));
    CHECK(cudaStreamEndCapture(s0, &captured));
    CHECK(cudaGraphGetNodes(captured, NULL, &nodes));
    printf("captured nodes: %zu, %s\n", nodes, host_sum == 0.0 ? "none ran" : "ran");
    cudaGraphExec_t cexec;
    CHECK(cudaGraphInstantiate(&cexec, captured, 0));
    CHECK(cudaGraphLaunch(cexec, s2));
    CHECK(cudaStreamSynchronize(s2));
    CHECK(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i)
        printf("%g ", r[i]);
    printf("\n");

    // ---- cudaLaunchKernel ----
    a = -1.0f;
    void *args3[4] = {&in, &out, &a, &count};
    CHECK(cudaLaunchKernel((const void *)scale, dim3((n + 63) / 64), dim3(64), args3, 0, s1));
    CHECK(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i)
        printf("%g ", r[i]);
    printf("\n");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphExecDestroy(twin_exec));
    CHECK(cudaGraphExecDestroy(cexec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaGraphDestroy(twin));
    CHECK(cudaGraphDestroy(captured));
    for (int i = 0; i < n; ++i)
        printf("%g ", h[i]);
    printf("\n");
    return 0;
}
