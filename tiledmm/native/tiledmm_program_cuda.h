// tiledmm_program_cuda.h: what a whole program built by nvcc for tm.run (backend "cuda") is
// compiled with (tiledmm/programs/build.py puts it before the program's source). The program's
// launches `k<<<g, b, s, st>>>(args)` were rewritten into tm_prog::config(...)(args): the
// launch itself is unchanged, between two CUDA events on its stream, so that each launch's time
// is CUDA-event time (nvcc links cudart statically; CUPTI is not needed). The events' times are
// read without waiting where they are done, and at the program's end; each launch is one JSON
// line in the report file tiledmm reads after the run. Nothing else of the program changes:
// its errors, printf and synchronisation are the real runtime's.
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
    std::string line;   // the JSON record less its "ms"
};

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
inline void drain(bool wait)
{
    State &s = st();
    std::lock_guard<std::mutex> g(s.mu);
    std::vector<Timed> left;
    for (Timed &t : s.timed) {
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
        // events are made before the launch: a failed cudaEventCreate must not be the last
        // error the program reads after it
        const bool timed = cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess;
        if (timed) cudaEventRecord(a, stream);
        kernel<<<grid, block, shared, stream>>>(args...);
        const cudaError_t err = cudaPeekAtLastError();
        std::string rec = "{\"event\": \"launch\", \"kernel\": ";
        json_str(rec, name);
        char buf[200];
        snprintf(buf, sizeof buf,
                 ", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"shared_bytes\": %zu, "
                 "\"error\": %d, \"line\": %d",
                 grid.x, grid.y, grid.z, block.x, block.y, block.z, shared, (int)err, line);
        rec += buf;
        if (timed && err == cudaSuccess) {
            cudaEventRecord(b, stream);
            {
                std::lock_guard<std::mutex> g(s.mu);
                s.timed.push_back(Timed{a, b, rec});
                if (!s.atexit_set) {   // after cudart's own handler: ours runs first
                    s.atexit_set = true;
                    atexit(at_exit);
                }
            }
            drain(false);
        } else {
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

}  // namespace tm_prog

// The program's own calls (after cuda_runtime.h's declaration, which this leaves alone).
#define cudaDeviceReset() tm_prog::device_reset()

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
