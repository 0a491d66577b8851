// tiledmm_program_cuda.h: what a whole program built by nvcc for tm.run (backend "cuda") is
// compiled with (tiledmm/programs/build.py puts it before the program's source). The program's
// launches `k<<<g, b, s, st>>>(args)` were rewritten into tm_prog::config(...)(args): the
// launch itself is unchanged, between two CUDA events on its stream, so that each launch's time
// is CUDA-event time (nvcc links cudart statically; CUPTI is not needed). The events' times are
// read without waiting where they are done, and at the program's end; each launch is one JSON
// line in the report file tiledmm reads after the run. Nothing else of the program changes:
// its errors, printf and synchronisation are the real runtime's. A launch captured into a CUDA
// graph is not timed, and tiledmm's own event calls run in the relaxed capture mode and never
// query a stream that captures, so a capture is never invalidated (issue 44).
#pragma once
#include <cuda_runtime.h>

#include "tiledmm_program_report.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace tm_prog {

struct Timed {
    cudaEvent_t start, stop;
    cudaStream_t stream;   // where they were recorded: never queried while it captures
    bool stream_alive;     // false once the program destroyed that stream (never query it then)
    std::string line;      // the JSON record less its "ms"
};

// tiledmm's own runtime calls (events, their queries) in the relaxed capture mode for the
// scope: in a program that captures a graph in the global mode (the default), on any thread,
// such a call would otherwise invalidate the capture (cudaErrorStreamCaptureInvalidated).
struct RelaxedCapture {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
    ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
    RelaxedCapture(const RelaxedCapture &) = delete;
    RelaxedCapture &operator=(const RelaxedCapture &) = delete;
};

// Whether work on `stream` is being captured into a graph. The legacy stream answers
// cudaErrorStreamCaptureImplicit while another stream captures in the global or thread-local
// mode: capturing, for what tiledmm may do there. The error that query leaves is cleared when
// the program had none pending (the program's own cudaGetLastError must not see tiledmm's).
inline bool capturing(cudaStream_t stream)
{
    const cudaError_t pending = cudaPeekAtLastError();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t err = cudaStreamIsCapturing(stream, &status);
    if (err != cudaSuccess && pending == cudaSuccess) (void)cudaGetLastError();
    if (err == cudaErrorStreamCaptureImplicit) return true;
    return err == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

struct State {
    int report_fd = -1;
    std::vector<Timed> timed;
    std::mutex mu;
    bool atexit_set = false;
};

inline State &st()
{
    static State *s = new State();   // never destroyed: the atexit handler uses it
    return *s;
}

inline void report(const std::string &line)
{
    write_report_line(st().report_fd, line);
}

// Writes the records of the launches whose stop event is done (all of them with wait).
// Without wait, the events of a stream that is capturing now are left for later: a query
// there would invalidate the capture.
// With nothing waiting it calls no runtime function: at exit after the program's own
// cudaDeviceReset, a runtime call there ended the program with SIGSEGV on the H200.
inline void drain(bool wait)
{
    State &s = st();
    std::lock_guard<std::mutex> g(s.mu);
    if (s.timed.empty()) return;
    RelaxedCapture relaxed;
    std::vector<Timed> left;
    for (Timed &t : s.timed) {
        if (!wait && t.stream_alive && capturing(t.stream)) {
            left.push_back(t);
            continue;
        }
        cudaError_t q = wait ? cudaEventSynchronize(t.stop) : cudaEventQuery(t.stop);
        if (q == cudaErrorNotReady) {
            left.push_back(t);
            continue;
        }
        float ms = -1.0f;
        if (q != cudaSuccess || cudaEventElapsedTime(&ms, t.start, t.stop) != cudaSuccess)
            ms = -1.0f;
        char buf[64];
        snprintf(buf, sizeof buf, ", \"ms\": %.6f}", (double)ms);
        report(t.line + buf);
        cudaEventDestroy(t.start);
        cudaEventDestroy(t.stop);
    }
    s.timed.swap(left);
}

inline void at_exit()
{
    drain(true);
}

// cudaDeviceReset destroys the context and every event in it: the launches still waiting for
// their stop event are read first (at exit their events would be dangling; the H200 ended such a
// program with SIGSEGV after its last line).
inline cudaError_t device_reset()
{
    drain(true);
    return ::cudaDeviceReset();
}

// cudaStreamDestroy: the launches still timed on that stream forget it. drain() asked the
// destroyed stream whether it captured, and the H200 then ended 5 of 8 runs of a program
// (tests/programs/runtime_api.cu) with SIGSEGV inside cuStreamIsCapturing. A destroyed stream
// captures nothing, and its events stay valid until tiledmm destroys them.
inline cudaError_t stream_destroy(cudaStream_t stream)
{
    {
        State &s = st();
        std::lock_guard<std::mutex> g(s.mu);
        for (Timed &t : s.timed)
            if (t.stream == stream) t.stream_alive = false;
    }
    return ::cudaStreamDestroy(stream);
}

#ifdef __CUDACC__   // a host file of the program (.cpp, compiled as C++) launches nothing
template <typename... P>
struct Launcher {
    void (*kernel)(P...);
    const char *name;
    int line;
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;

    void operator()(P... args) const
    {
        State &s = st();
        cudaEvent_t a = nullptr, b = nullptr;
        bool timed = false, captured = false;
        {
            RelaxedCapture relaxed;
            // a launch captured into a graph runs when the graph does: it is not timed (an
            // event recorded in a capturing stream becomes a node of the graph)
            captured = capturing(stream);
            // events are made before the launch: a failed cudaEventCreate must not be the last
            // error the program reads after it
            timed = !captured && cudaEventCreate(&a) == cudaSuccess &&
                    cudaEventCreate(&b) == cudaSuccess;
            if (timed) cudaEventRecord(a, stream);
        }
        kernel<<<grid, block, shared, stream>>>(args...);   // in the program's capture mode
        const cudaError_t err = cudaPeekAtLastError();
        std::string rec = "{\"event\": \"launch\", \"kernel\": ";
        json_str(rec, name);
        char buf[200];
        snprintf(buf, sizeof buf,
                 ", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"shared_bytes\": %zu, "
                 "\"error\": %d, \"line\": %d%s",
                 grid.x, grid.y, grid.z, block.x, block.y, block.z, shared, (int)err, line,
                 captured ? ", \"captured\": true" : "");
        rec += buf;
        if (timed && err == cudaSuccess) {
            {
                RelaxedCapture relaxed;
                cudaEventRecord(b, stream);
            }
            {
                std::lock_guard<std::mutex> g(s.mu);
                s.timed.push_back(Timed{a, b, stream, true, rec});
                if (!s.atexit_set) {   // after cudart's own handler: ours runs first
                    s.atexit_set = true;
                    atexit(at_exit);
                }
            }
            drain(false);
        } else {
            RelaxedCapture relaxed;
            if (a) cudaEventDestroy(a);
            if (b) cudaEventDestroy(b);
            report(rec + ", \"ms\": null}");
        }
    }
};

template <typename... P>
inline Launcher<P...> config(const char *kernel_name, const char *params, const char *file,
                             int line, void (*kernel)(P...), dim3 grid, dim3 block,
                             size_t shared = 0, cudaStream_t stream = 0)
{
    (void)params;
    (void)file;
    return Launcher<P...>{kernel, kernel_name, line, grid, block, shared, stream};
}
#endif

}   // namespace tm_prog

// The program's own calls (after cuda_runtime.h's declaration, which this leaves alone).
#define cudaDeviceReset() tm_prog::device_reset()
#define cudaStreamDestroy(stream) tm_prog::stream_destroy(stream)

// ---- what tiledmm's program runner calls (tiledmm/programs/main.py) ----
// once per program: a program of several files (tm.run of a group) defines them in its first
#ifndef TM_PROG_NOT_FIRST_FILE
extern "C" __attribute__((visibility("default"), used)) int tm_prog_setup(int report_fd)
{
    tm_prog::st().report_fd = report_fd;
    return 0;
}

extern "C" __attribute__((visibility("default"), used)) void tm_prog_exit(int code)
{
    fflush(stdout);
    exit(code);   // the atexit handler writes the launches' times
}
#endif
