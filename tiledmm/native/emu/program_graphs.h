// emu/program_graphs.h: CUDA graphs and launches through a kernel's address in whole programs
// on the emulator (issue 43), included by emu/program_runtime.h.
//
// Every operation the emulator queues on a stream is done when it is queued, so a graph is its
// nodes' work in an order that respects their dependencies: the order the nodes were added or
// captured in (a node's dependencies exist before it). cudaGraphLaunch runs them one after the
// other. Stream capture (cudaStreamBeginCapture ... EndCapture) records what is queued on the
// capturing stream, and on every stream that waits for an event recorded in the capture,
// instead of doing it: kernel launches (their arguments copied, as CUDA copies them),
// cudaMemcpyAsync, cudaMemsetAsync and cudaLaunchHostFunc.
//
// A kernel named only by its address (cudaLaunchKernel, cudaLaunchCooperativeKernel, a graph's
// kernel node) needs its parameter types: kernel_table() holds, for each kernel, how to take
// its arguments from a `void **` array. A kernel is entered when the program loads where the
// build registers it (register_kernel), and at its first <<<>>> launch.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

struct CUgraphNode_st {
    cudaGraphNodeType type;
    std::function<cudaError_t()> run;
};
struct CUgraph_st {
    std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};
struct CUgraphExec_st {
    std::vector<std::function<cudaError_t()>> work;
};

namespace tm_prog {

// ---- kernels by address ----
typedef std::function<void(dim3, dim3, size_t, cudaStream_t)> BoundLaunch;
struct KernelEntry {
    const char *name, *params;
    // the launch of `kernel` with the arguments args[i] point to (copied now)
    BoundLaunch (*bind)(const void *kernel, const KernelEntry &entry, void **args);
};
struct KernelTable {
    std::mutex mu;
    std::map<const void *, KernelEntry> kernels;
};
inline KernelTable &kernel_table()
{
    static KernelTable *t = new KernelTable();   // never destroyed: atexit
    return *t;
}

template <typename... P, size_t... I>
inline BoundLaunch bind_args(void (*kernel)(P...), const KernelEntry &e, void **args,
                             std::index_sequence<I...>)
{
    std::tuple<typename host_param<P>::type...> values(
        *static_cast<typename host_param<P>::type *>(args[I])...);
    const LaunchSite site{e.name, e.params, "(launched by address)", 0};
    return [kernel, site, values](dim3 grid, dim3 block, size_t shared, cudaStream_t stream) {
        std::apply(Launcher<P...>{kernel, site, grid, block, shared, stream}, values);
    };
}
template <typename... P>
inline BoundLaunch bind_kernel(const void *kernel, const KernelEntry &e, void **args)
{
    return bind_args(reinterpret_cast<void (*)(P...)>(const_cast<void *>(kernel)), e, args,
                     std::index_sequence_for<P...>{});
}
template <typename... P>
inline bool register_kernel(void (*kernel)(P...), const char *name, const char *params)
{
    KernelTable &t = kernel_table();
    std::lock_guard<std::mutex> g(t.mu);
    const void *key = reinterpret_cast<const void *>(kernel);
    if (!t.kernels.count(key)) t.kernels[key] = KernelEntry{name, params, &bind_kernel<P...>};
    return true;
}

// The launch of the kernel at `func` with args, or an empty one (the error set) where the
// emulator does not know the kernel.
inline BoundLaunch bound_launch(const void *func, void **args, const char *what)
{
    KernelTable &t = kernel_table();
    KernelEntry e;
    {
        std::lock_guard<std::mutex> g(t.mu);
        const auto it = t.kernels.find(func);
        if (it == t.kernels.end()) {
            char buf[400];
            snprintf(buf, sizeof buf,
                     "%s: the function at %p is not a kernel the emulator knows: it learns a "
                     "kernel's parameter types from the program's <<<>>> launches, so launch "
                     "it once with <<<>>> before launching it through its address",
                     what, func);
            diag("%s", buf);
            tm_emu::set_error(cudaErrorInvalidDeviceFunction, buf);
            return BoundLaunch();
        }
        e = it->second;
    }
    if (!args && e.params && *e.params) {
        tm_emu::set_error(cudaErrorInvalidValue, "a kernel with parameters launched with no "
                                                 "kernelParams");
        return BoundLaunch();
    }
    return e.bind(func, e, args);
}

// ---- stream capture ----
struct Capture {
    std::recursive_mutex mu;
    std::map<cudaStream_t, cudaGraph_t> streams;   // the streams capturing, into which graph
    std::map<cudaEvent_t, cudaGraph_t> events;     // events recorded in a capture
};
inline Capture &capture()
{
    static Capture *c = new Capture();
    return *c;
}
inline cudaGraph_t capturing(cudaStream_t s)
{
    Capture &c = capture();
    std::lock_guard<std::recursive_mutex> g(c.mu);
    const auto it = c.streams.find(s);
    return it == c.streams.end() ? nullptr : it->second;
}
inline cudaGraphNode_t add_node(cudaGraph_t graph, cudaGraphNodeType type,
                                std::function<cudaError_t()> run)
{
    graph->nodes.emplace_back(new CUgraphNode_st{type, std::move(run)});
    return graph->nodes.back().get();
}
// declared for the launch (emu/program_runtime.h): whether the stream captures, then the work
// is the graph's
inline bool capture_launch(cudaStream_t stream, std::function<void()> work)
{
    const cudaGraph_t graph = capturing(stream);
    if (!graph) return false;
    add_node(graph, cudaGraphNodeTypeKernel, [work]() {
        work();
        return cudaSuccess;
    });
    return true;
}
inline bool capture_work(cudaStream_t stream, cudaGraphNodeType type,
                         std::function<cudaError_t()> run)
{
    const cudaGraph_t graph = capturing(stream);
    if (!graph) return false;
    add_node(graph, type, std::move(run));
    return true;
}

// an event recorded on a capturing stream belongs to the capture; a stream that waits for it
// joins the capture (CUDA's fork and join of captured streams)
inline bool capture_record(cudaEvent_t event, cudaStream_t stream)
{
    Capture &c = capture();
    std::lock_guard<std::recursive_mutex> g(c.mu);
    const auto it = c.streams.find(stream);
    if (it == c.streams.end()) return false;
    c.events[event] = it->second;
    return true;
}
inline bool capture_wait(cudaStream_t stream, cudaEvent_t event)
{
    Capture &c = capture();
    std::lock_guard<std::recursive_mutex> g(c.mu);
    const auto it = c.events.find(event);
    if (it == c.events.end()) return false;
    c.streams[stream] = it->second;
    return true;
}

// nodes of the graph after its dependencies: the dependencies must be the graph's nodes
inline cudaError_t check_dependencies(cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n)
{
    if (!graph || (n && !deps)) return tm_emu::set_error(cudaErrorInvalidValue);
    for (size_t i = 0; i < n; ++i) {
        bool found = false;
        for (const auto &node : graph->nodes)
            found = found || node.get() == deps[i];
        if (!found)
            return tm_emu::set_error(cudaErrorInvalidValue,
                                     "a graph node's dependency is not a node of its graph");
    }
    return cudaSuccess;
}

// a cudaMemcpy3DParms copy between linear memory: row by row
inline cudaError_t copy_3d(const cudaMemcpy3DParms &p)
{
    if (p.srcArray || p.dstArray)
        return tm_emu::set_error(cudaErrorNotSupported,
                                 "a graph memcpy node with a cudaArray is not emulated");
    for (size_t z = 0; z < p.extent.depth; ++z)
        for (size_t y = 0; y < p.extent.height; ++y) {
            char *d = (char *)p.dstPtr.ptr +
                      ((p.dstPos.z + z) * p.dstPtr.ysize + p.dstPos.y + y) * p.dstPtr.pitch +
                      p.dstPos.x;
            const char *s = (const char *)p.srcPtr.ptr +
                            ((p.srcPos.z + z) * p.srcPtr.ysize + p.srcPos.y + y) * p.srcPtr.pitch +
                            p.srcPos.x;
            const cudaError_t e = copy(d, s, p.extent.width, p.kind, "cudaGraphAddMemcpyNode");
            if (e != cudaSuccess) return e;
        }
    return cudaSuccess;
}

// a cudaMemsetParams fill: `height` rows of `width` elements of elementSize bytes
inline cudaError_t memset_2d(const cudaMemsetParams &p)
{
    std::vector<unsigned char> row(p.width * p.elementSize);
    for (size_t i = 0; i < p.width; ++i)
        memcpy(&row[i * p.elementSize], &p.value, p.elementSize);   // little-endian: low bytes
    for (size_t y = 0; y < p.height; ++y) {
        const cudaError_t e = copy((char *)p.dst + y * p.pitch, row.data(), row.size(),
                                   cudaMemcpyHostToDevice, "cudaGraphAddMemsetNode");
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

}   // namespace tm_prog

// ---- the graph API ----
inline cudaError_t cudaGraphCreate(cudaGraph_t *graph, unsigned int flags)
{
    if (!graph || flags) return tm_emu::set_error(cudaErrorInvalidValue);
    *graph = new CUgraph_st();
    return cudaSuccess;
}

inline cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    if (!graph) return tm_emu::set_error(cudaErrorInvalidValue);
    delete graph;
    return cudaSuccess;
}

inline cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                          const cudaGraphNode_t *deps, size_t n,
                                          const cudaKernelNodeParams *p)
{
    cudaError_t e = tm_prog::check_dependencies(graph, deps, n);
    if (e != cudaSuccess) return e;
    if (!node || !p || !p->func || p->extra) return tm_emu::set_error(cudaErrorInvalidValue);
    tm_prog::BoundLaunch launch =
        tm_prog::bound_launch(p->func, p->kernelParams, "cudaGraphAddKernelNode");
    if (!launch) return cudaErrorInvalidDeviceFunction;
    const dim3 grid = p->tm_user_gridDim, block = p->tm_user_blockDim;
    const size_t shared = p->sharedMemBytes;
    *node = tm_prog::add_node(graph, cudaGraphNodeTypeKernel, [launch, grid, block, shared]() {
        launch(grid, block, shared, 0);
        return cudaSuccess;
    });
    return cudaSuccess;
}

inline cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                          const cudaGraphNode_t *deps, size_t n,
                                          const cudaMemcpy3DParms *p)
{
    cudaError_t e = tm_prog::check_dependencies(graph, deps, n);
    if (e != cudaSuccess) return e;
    if (!node || !p) return tm_emu::set_error(cudaErrorInvalidValue);
    const cudaMemcpy3DParms copy = *p;
    *node = tm_prog::add_node(graph, cudaGraphNodeTypeMemcpy,
                              [copy]() { return tm_prog::copy_3d(copy); });
    return cudaSuccess;
}

inline cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                          const cudaGraphNode_t *deps, size_t n,
                                          const cudaMemsetParams *p)
{
    cudaError_t e = tm_prog::check_dependencies(graph, deps, n);
    if (e != cudaSuccess) return e;
    if (!node || !p || !p->dst ||
        (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) ||
        (p->height > 1 && p->pitch < p->width * p->elementSize))
        return tm_emu::set_error(cudaErrorInvalidValue);
    const cudaMemsetParams fill = *p;
    *node = tm_prog::add_node(graph, cudaGraphNodeTypeMemset,
                              [fill]() { return tm_prog::memset_2d(fill); });
    return cudaSuccess;
}

inline cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                        const cudaGraphNode_t *deps, size_t n,
                                        const cudaHostNodeParams *p)
{
    cudaError_t e = tm_prog::check_dependencies(graph, deps, n);
    if (e != cudaSuccess) return e;
    if (!node || !p || !p->fn) return tm_emu::set_error(cudaErrorInvalidValue);
    const cudaHostFn_t fn = p->fn;
    void *data = p->userData;
    *node = tm_prog::add_node(graph, cudaGraphNodeTypeHost, [fn, data]() {
        fn(data);
        return cudaSuccess;
    });
    return cudaSuccess;
}

inline cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                         const cudaGraphNode_t *deps, size_t n)
{
    cudaError_t e = tm_prog::check_dependencies(graph, deps, n);
    if (e != cudaSuccess) return e;
    if (!node) return tm_emu::set_error(cudaErrorInvalidValue);
    *node = tm_prog::add_node(graph, cudaGraphNodeTypeEmpty, []() { return cudaSuccess; });
    return cudaSuccess;
}

inline cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *count)
{
    if (!graph || !count) return tm_emu::set_error(cudaErrorInvalidValue);
    const size_t have = graph->nodes.size();
    if (nodes)
        for (size_t i = 0; i < *count; ++i)
            nodes[i] = i < have ? graph->nodes[i].get() : nullptr;
    *count = have;
    return cudaSuccess;
}

inline cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType *type)
{
    if (!node || !type) return tm_emu::set_error(cudaErrorInvalidValue);
    *type = node->type;
    return cudaSuccess;
}

inline cudaError_t cudaGraphClone(cudaGraph_t *clone, cudaGraph_t graph)
{
    if (!clone || !graph) return tm_emu::set_error(cudaErrorInvalidValue);
    *clone = new CUgraph_st();
    for (const auto &node : graph->nodes)
        tm_prog::add_node(*clone, node->type, node->run);
    return cudaSuccess;
}

inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                        unsigned long long flags = 0)
{
    if (!exec || !graph || (flags & ~1ull)) return tm_emu::set_error(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st();
    for (const auto &node : graph->nodes)
        (*exec)->work.push_back(node->run);
    return cudaSuccess;
}
// CUDA 11's form, which cuda_runtime.h keeps for C++
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                        cudaGraphNode_t *error_node, char *log, size_t log_size)
{
    if (error_node) *error_node = nullptr;
    if (log && log_size) log[0] = '\0';
    return cudaGraphInstantiate(exec, graph, 0ull);
}
inline cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                                 unsigned long long flags = 0)
{
    return cudaGraphInstantiate(exec, graph, flags);
}

inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    if (!exec) return tm_emu::set_error(cudaErrorInvalidValue);
    delete exec;
    return cudaSuccess;
}

inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
    TM_PROG_STICKY();
    if (!exec) return tm_emu::set_error(cudaErrorInvalidValue);
    if (!tm_prog::stream_valid(stream)) return tm_emu::set_error(cudaErrorInvalidResourceHandle);
    for (const auto &work : exec->work) {
        const cudaError_t e = work();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    if (!stream || !tm_prog::stream_valid(stream))   // the legacy stream cannot be captured
        return tm_emu::set_error(stream ? cudaErrorInvalidResourceHandle
                                        : cudaErrorStreamCaptureUnsupported);
    if ((int)mode < 0 || (int)mode > 2) return tm_emu::set_error(cudaErrorInvalidValue);
    tm_prog::Capture &c = tm_prog::capture();
    std::lock_guard<std::recursive_mutex> g(c.mu);
    if (c.streams.count(stream)) return tm_emu::set_error(cudaErrorIllegalState);
    c.streams[stream] = new CUgraph_st();
    return cudaSuccess;
}

inline cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
    if (!graph) return tm_emu::set_error(cudaErrorInvalidValue);
    tm_prog::Capture &c = tm_prog::capture();
    std::lock_guard<std::recursive_mutex> g(c.mu);
    const auto it = c.streams.find(stream);
    if (it == c.streams.end()) return tm_emu::set_error(cudaErrorIllegalState);
    const cudaGraph_t captured = it->second;
    for (auto s = c.streams.begin(); s != c.streams.end();)   // the streams that joined it too
        s = s->second == captured ? c.streams.erase(s) : std::next(s);
    for (auto e = c.events.begin(); e != c.events.end();)
        e = e->second == captured ? c.events.erase(e) : std::next(e);
    *graph = captured;
    return cudaSuccess;
}

inline cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    if (!status) return tm_emu::set_error(cudaErrorInvalidValue);
    *status =
        tm_prog::capturing(stream) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

// ---- launches through a kernel's address ----
inline cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                    size_t shared = 0, cudaStream_t stream = 0)
{
    TM_PROG_STICKY();
    const tm_prog::BoundLaunch launch = tm_prog::bound_launch(func, args, "cudaLaunchKernel");
    if (!launch) return cudaErrorInvalidDeviceFunction;
    launch(grid, block, shared, stream);
    return tm_prog_cudaPeekAtLastError();
}
template <typename T>
inline cudaError_t cudaLaunchKernel(T *func, dim3 grid, dim3 block, void **args, size_t shared = 0,
                                    cudaStream_t stream = 0)
{
    return cudaLaunchKernel((const void *)func, grid, block, args, shared, stream);
}

// A cooperative launch: every block resident at once on a GPU, so at most the occupancy's
// blocks per SM times the SMs (cudaErrorCooperativeLaunchTooLarge otherwise); its blocks run
// at once, each on an OS thread, so grid.sync() holds (emu/scheduler.cpp, GridBarrier).
inline cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args,
                                               size_t shared = 0, cudaStream_t stream = 0)
{
    TM_PROG_STICKY();
    int per_sm = 0;
    cudaDeviceProp prop;
    const int threads = (int)(block.x * block.y * block.z);
    if (tm_prog::properties(&prop, 0) == cudaSuccess &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func, threads, shared) ==
            cudaSuccess &&
        (unsigned long long)grid.x * grid.y * grid.z >
            (unsigned long long)per_sm * prop.multiProcessorCount)
        return tm_emu::set_error(cudaErrorCooperativeLaunchTooLarge);
    tm_emu_set_cooperative_launch(1);
    const cudaError_t err = cudaLaunchKernel(func, grid, block, args, shared, stream);
    tm_emu_set_cooperative_launch(0);   // where the launch never reached the scheduler
    return err;
}
template <typename T>
inline cudaError_t cudaLaunchCooperativeKernel(T *func, dim3 grid, dim3 block, void **args,
                                               size_t shared = 0, cudaStream_t stream = 0)
{
    return cudaLaunchCooperativeKernel((const void *)func, grid, block, args, shared, stream);
}
