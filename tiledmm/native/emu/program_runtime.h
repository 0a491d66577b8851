// program_runtime.h: the CUDA runtime as a whole program sees it on the emulator (tm.run).
//
// Included (after tiledmm_kernel.h) at the top of a program that tiledmm/programs/build.py
// compiled; header-only, so it lives in the program's one translation unit and never in the
// registry's glue or in tm.compile's kernels. What it adds to emu/runtime.cpp:
//   - device memory that host code cannot touch: cudaMalloc hands out memory of a region mapped
//     twice (a memfd): the view the program sees is PROT_NONE except while a kernel runs; the
//     runtime copies through the second, always-open view. A host access faults; the handler
//     notes where (the report file) and the program ends with SIGSEGV, as on a GPU;
//   - a launch (`k<<<g, b, s, st>>>(args)`, rewritten into tm_prog::config(...)(args)) whose
//     pointer arguments are checked: one pointing to host memory is not run, and the program's
//     next synchronising call returns cudaErrorIllegalAddress (sticky, as on a GPU);
//   - errors of a kernel's execution reported at the next synchronising call and sticky after;
//     launch-configuration errors queued for cudaGetLastError, the kernel not run;
//   - cudaMemcpy's kinds checked against the pointers, and a copy running past the end of a
//     device allocation refused with cudaErrorInvalidValue, nothing copied;
//   - device printf kept until the next synchronising call (or the program's end);
//   - streams (in order: every launch is synchronous on the emulator), managed and pinned host
//     memory, the properties of an emulated device preset (TILEDMM_EMU_DEVICE: H100, H200, A100).
// Every launch is written as one JSON line to the report file tiledmm reads after the run.
#pragma once
#include "cuda_emu.h"
#include "emu_internal.h"
#include "tiledmm_program_report.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <utility>
#include <mutex>
#include <string>
#include <vector>

// A whole program is one pass for host and device code: `#if __CUDA_ARCH__ >= 700` guards
// (the samples') see the emulated device's architecture, as nvcc's device pass would (an H100's,
// the emulator's default preset).
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900
#endif

// the guard of the real cuda_runtime.h (the samples' helper_cuda.h tests it)
#ifndef __CUDA_RUNTIME_H__
#define __CUDA_RUNTIME_H__
#endif

#define __managed__   // a global: host memory, which host code and kernels both reach here
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02

// The host runtime below (allocations, copies, launches, reports, graphs) runs per call, never
// per thread, and is compiled again with every program: without optimisation, which takes g++
// about a third of the time (-O2's passes over it were 2.2 s of a small program's 3.4 s of
// compile on one core). Kernels and the device functions they inline (emu/cuda_emu.h,
// program_textures.h) keep the program's own level (pop_options below).
#pragma GCC push_options
#pragma GCC optimize("O0")

namespace tm_prog {

enum Kind { DEVICE = 0, MANAGED = 1, PINNED = 2, HOST = 3 };

// Check mode's record of which bytes of a device allocation were ever written (by a copy, a
// memset or a kernel's checked write): compute-sanitizer's initcheck. `untracked` once a kernel
// reached the allocation through a plain pointer (its writes unseen): no reports after that.
struct InitShadow {
    unsigned char *bytes;
    std::atomic<bool> untracked{false};
};

struct Alloc {
    size_t size;      // as requested (copies are checked against it)
    const char *file;
    int line;
    const char *by;   // "cudaMalloc", "cudaMallocManaged", ...
    size_t span;      // the region's bytes it holds (size rounded up to 256)
    const char *expr = "";   // the pointer as the program wrote it: "&d_a", "(void **)&d_a"
    InitShadow *shadow = nullptr;   // check mode, cudaMalloc memory only
};

// The variable an allocation went to, from the expression given to cudaMalloc ("(void**)&d_a"
// gives "d_a"); "" where it is not a plain name.
inline std::string alloc_name(const char *expr)
{
    std::string e = expr ? expr : "";
    size_t close = e.rfind(')');
    if (e.find("void") != std::string::npos && close != std::string::npos) e = e.substr(close + 1);
    std::string out;
    for (char c : e)
        if (c != '&' && c != ' ' && c != '(' && c != ')') out += c;
    return out;
}

// "d_a (4000 bytes from cudaMalloc at vec.cu:20)": an allocation in the program's words.
inline std::string alloc_text(const Alloc &a)
{
    const std::string name = alloc_name(a.expr);
    char buf[512];
    snprintf(buf, sizeof buf, "%s%s%zu bytes from %s at %s:%d%s", name.c_str(),
             name.empty() ? "(" : " (", a.size, a.by, a.file ? a.file : "?", a.line, ")");
    return buf;
}

struct State {
    std::recursive_mutex mu;
    char *dev = nullptr;   // the view the program's pointers point into
    char *rt = nullptr;   // the runtime's view of the same memory
    size_t cap = 0;   // the region's size
    size_t top = 0;   // bytes of the region ever handed out (from its start)
    std::map<size_t, Alloc> device;   // offset -> live device allocation
    std::map<size_t, size_t> free_blocks;   // offset -> bytes, below top
    std::map<uintptr_t, Alloc> host;   // managed and pinned allocations, by address
    std::map<uintptr_t, int> host_kind;
    cudaError_t sticky = cudaSuccess;   // an execution error seen by a synchronising call
    cudaError_t pending = cudaSuccess;   // an execution error not yet seen by one
    std::string printf_buf;   // device printf since the last synchronising call
    std::string assert_buf;   // failed device asserts' messages since then (stderr, as a GPU's)
    std::mutex printf_mu;
    int report_fd = -1;
    volatile sig_atomic_t open = 0;   // the device view is readable (a launch runs)
    std::atomic<int> launching{0};
    const char *kernel = nullptr;   // the kernel running (for a fault's report)
    struct sigaction prev_segv;
    uintptr_t program_base = 0;   // the program's shared object, for fault reports
    std::vector<cudaStream_t> streams;
    // check mode: failed calls and launches whose error the program has not looked at yet
    struct Unchecked {
        std::string what;
        const char *file;
        int line;
        cudaError_t err;
    };
    std::vector<Unchecked> unchecked;
};

inline State &st()
{
    static State *s = new State();   // never destroyed: atexit handlers still use it
    return *s;
}

// ---- the report file: one JSON line per launch and per fault (tiledmm_program_report.h) ----
inline void report(const std::string &line)
{
    write_report_line(st().report_fd, line);
}

inline void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline void diag(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "tiledmm: %s\n", buf);
    fflush(stderr);
}

// ---- the device region ----
inline bool region_init()
{
    State &s = st();
    if (s.dev) return true;
    size_t cap = tm_emu_memory_limit();
    const size_t most = (size_t)16 << 30;
    if (cap > most) cap = most;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    cap = cap / page * page;
    // Under tm.run the caller made the memory (a sealed memfd, TILEDMM_DEVICE_MEMORY_FD): the
    // sandbox lets a program make no shared memory of its own. Elsewhere (a program run by
    // hand) it is made here.
    const char *inherited = getenv("TILEDMM_DEVICE_MEMORY_FD");
    int fd = inherited ? atoi(inherited) : memfd_create("tiledmm-device-memory", MFD_CLOEXEC);
    if (fd < 0) return false;
    if (inherited) {
        struct stat sb;
        if (fstat(fd, &sb) != 0 || sb.st_size <= 0) return false;
        if ((size_t)sb.st_size < cap) cap = (size_t)sb.st_size / page * page;
    }
    for (; cap >= ((size_t)64 << 20); cap /= 2) {
        if (!inherited && ftruncate(fd, (off_t)cap) != 0) continue;
        void *rt = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (rt == MAP_FAILED) continue;
        // the program's view inside a reservation of `most` bytes that nothing else is mapped
        // into: a wild access beyond the region (a smaller one in the sandbox) still faults
        // rather than landing in the runtime's view or elsewhere
        void *dev = MAP_FAILED;
        void *hold =
            mmap(nullptr, most, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (hold != MAP_FAILED) {
            dev = mmap(hold, cap, PROT_NONE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fd, 0);
            if (dev == MAP_FAILED) munmap(hold, most);
        } else {
            dev = mmap(nullptr, cap, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        }
        if (dev == MAP_FAILED) {
            munmap(rt, cap);
            continue;
        }
        s.rt = (char *)rt;
        s.dev = (char *)dev;
        s.cap = cap;
        close(fd);
        return true;
    }
    close(fd);
    return false;
}

inline bool in_region(const void *p)
{
    const State &s = st();
    return s.dev && (const char *)p >= s.dev && (const char *)p < s.dev + s.cap;
}

inline void *rt_view(const void *p)
{
    State &s = st();
    return in_region(p) ? s.rt + ((const char *)p - s.dev) : const_cast<void *>(p);
}

// The allocation holding p: its kind, start and record (nullptr: not an allocation of ours).
inline Kind classify(const void *p, uintptr_t *start, const Alloc **rec)
{
    State &s = st();
    *rec = nullptr;
    *start = 0;
    if (in_region(p)) {
        const size_t off = (size_t)((const char *)p - s.dev);
        auto it = s.device.upper_bound(off);
        if (it != s.device.begin()) {
            --it;
            if (off < it->first + it->second.span) {
                *start = (uintptr_t)(s.dev + it->first);
                *rec = &it->second;
            }
        }
        return DEVICE;
    }
    auto it = s.host.upper_bound((uintptr_t)p);
    if (it != s.host.begin()) {
        --it;
        if ((uintptr_t)p < it->first + it->second.size) {
            *start = it->first;
            *rec = &it->second;
            return (Kind)s.host_kind[it->first];
        }
    }
    return HOST;
}

inline void set_open(bool open)
{
    State &s = st();
    if (!s.dev || !s.top) {
        s.open = open;
        return;
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t len = (s.top + page - 1) / page * page;
    mprotect(s.dev, len, open ? PROT_READ | PROT_WRITE : PROT_NONE);
    s.open = open;
}

// ---- errors ----
// Every call made after an execution error returns it (a GPU context is then unusable).
#define TM_PROG_STICKY()                                                                         \
    do {                                                                                         \
        if (tm_prog::st().sticky != cudaSuccess) return tm_emu::set_error(tm_prog::st().sticky); \
    } while (0)

inline void flush_printf()
{
    State &s = st();
    std::string out, asserts;
    {
        std::lock_guard<std::mutex> g(s.printf_mu);
        out.swap(s.printf_buf);
        asserts.swap(s.assert_buf);
    }
    if (!out.empty()) { fwrite(out.data(), 1, out.size(), stdout); }
    if (!asserts.empty()) {
        fflush(stdout);
        fwrite(asserts.data(), 1, asserts.size(), stderr);
    }
}

// A synchronising call: device printf appears, and an execution error of an earlier kernel is
// returned (and sticks).
inline cudaError_t sync_point()
{
    State &s = st();
    flush_printf();
    if (s.pending != cudaSuccess) {
        s.sticky = s.pending;
        s.pending = cudaSuccess;
    }
    if (s.sticky != cudaSuccess) return tm_emu::set_error(s.sticky);
    return cudaSuccess;
}

// ---- host faults on device memory ----
inline void segv(int sig, siginfo_t *si, void *uctx)
{
    State &s = st();
    if (in_region(si->si_addr) && !s.open) {
        uintptr_t pc = 0;
        int write_access = -1;
#if defined(__x86_64__)
        const ucontext_t *uc = (const ucontext_t *)uctx;
        pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
        write_access = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#elif defined(__aarch64__)
        const ucontext_t *uc = (const ucontext_t *)uctx;
        pc = (uintptr_t)uc->uc_mcontext.pc;
#endif
        // The program's own frames, innermost first (the access may be in memcpy or printf).
        std::string frames;
        void *stack[32];
        const int n = backtrace(stack, 32);
        bool first = true;
        auto add = [&](uintptr_t a, int adjust) {
            Dl_info info;
            if (!dladdr((void *)a, &info) || (uintptr_t)info.dli_fbase != s.program_base) return;
            char b[32];
            snprintf(b, sizeof b, "%s%lu", first ? "" : ",",
                     (unsigned long)(a - s.program_base - (uintptr_t)adjust));
            frames += b;
            first = false;
        };
        add(pc, 0);
        for (int i = 0; i < n; ++i)
            if ((uintptr_t)stack[i] != pc) add((uintptr_t)stack[i], 1);
        uintptr_t start;
        const Alloc *rec;
        classify(si->si_addr, &start, &rec);
        std::string line = "{\"event\": \"host_access\", \"access\": ";
        json_str(line, write_access == 1 ? "wrote" : write_access == 0 ? "read" : "accessed");
        line += ", \"frames\": [" + frames + "], \"alloc_by\": ";
        json_str(line, rec ? rec->by : "");
        line += ", \"alloc_file\": ";
        json_str(line, rec ? rec->file : "");
        line += ", \"alloc_line\": " + std::to_string(rec ? rec->line : 0) + "}";
        report(line);
        signal(SIGSEGV, SIG_DFL);   // the access runs again and ends the program, as on a GPU
        return;
    }
    if (s.launching.load(std::memory_order_relaxed) && s.kernel) {
        // a kernel's invalid access: the emulator cannot go on as a GPU would (the launch failing
        // with cudaErrorIllegalAddress at the next synchronising call), so the program ends here
        std::string line = "{\"event\": \"kernel_fault\", \"kernel\": ";
        json_str(line, s.kernel);
        line += ", \"device_memory\": ";
        line += in_region(si->si_addr) ? "true}" : "false}";
        report(line);
        s.kernel = nullptr;
    }
    if (s.prev_segv.sa_flags & SA_SIGINFO) {
        if (s.prev_segv.sa_sigaction) {
            s.prev_segv.sa_sigaction(sig, si, uctx);
            return;
        }
    } else if (s.prev_segv.sa_handler != SIG_DFL && s.prev_segv.sa_handler != SIG_IGN) {
        s.prev_segv.sa_handler(sig);
        return;
    }
    signal(SIGSEGV, SIG_DFL);
}

// A kernel's other fatal signals (a failed assert's abort, __trap(), an integer division by
// zero): the report names the kernel, then the signal ends the program.
inline void kernel_signal(int sig, siginfo_t *, void *)
{
    State &s = st();
    if (s.launching.load(std::memory_order_relaxed) && s.kernel) {
        std::string line = "{\"event\": \"kernel_fault\", \"kernel\": ";
        json_str(line, s.kernel);
        line += ", \"signal\": " + std::to_string(sig) + "}";
        report(line);
        s.kernel = nullptr;
    }
    signal(sig, SIG_DFL);   // abort() raises again; a faulting instruction runs again
    if (sig == SIGABRT) raise(sig);
}

// ---- memory ----
inline cudaError_t device_malloc(void **p, size_t size, const char *file, int line,
                                 const char *expr = "")
{
    TM_PROG_STICKY();
    if (!p) return tm_emu::set_error(cudaErrorInvalidValue, "cudaMalloc: devPtr is NULL");
    *p = nullptr;
    if (size == 0) return cudaSuccess;
    State &s = st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    if (!region_init())
        return tm_emu::set_error(cudaErrorMemoryAllocation,
                                 "cudaMalloc: no emulated device memory");
    const size_t want = (size + 255) / 256 * 256;
    size_t off = (size_t)-1;
    for (auto it = s.free_blocks.begin(); it != s.free_blocks.end(); ++it) {
        if (it->second >= want) {
            off = it->first;
            const size_t rest = it->second - want;
            s.free_blocks.erase(it);
            if (rest) s.free_blocks[off + want] = rest;
            break;
        }
    }
    if (off == (size_t)-1) {
        if (want > s.cap - s.top)
            return tm_emu::set_error(cudaErrorMemoryAllocation,
                                     "cudaMalloc: the emulated device's memory is full");
        off = s.top;
        s.top += want;
        if (s.open) set_open(true);   // (never: host code allocates between launches)
    }
    Alloc a{size, file, line, "cudaMalloc", want};
    a.expr = expr;
#ifdef TM_PROG_CHECK
    a.shadow = new InitShadow();
    a.shadow->bytes = static_cast<unsigned char *>(calloc(size, 1));
    if (!a.shadow->bytes) a.shadow->untracked = true;
#endif
    s.device[off] = a;
    *p = s.dev + off;
    return cudaSuccess;
}

inline cudaError_t device_free(void *p)
{
    State &s = st();
    if (!p) return cudaSuccess;
    TM_PROG_STICKY();
    sync_point();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    if (in_region(p)) {
        const size_t off = (size_t)((char *)p - s.dev);
        auto it = s.device.find(off);
        if (it == s.device.end())
            return tm_emu::set_error(cudaErrorInvalidValue,
                                     "cudaFree: not a pointer cudaMalloc returned, or freed twice");
        size_t start = off, len = it->second.span;
        if (it->second.shadow) {
            free(it->second.shadow->bytes);
            delete it->second.shadow;
        }
        s.device.erase(it);
        auto nx = s.free_blocks.find(start + len);
        if (nx != s.free_blocks.end()) {
            len += nx->second;
            s.free_blocks.erase(nx);
        }
        auto pv = s.free_blocks.lower_bound(start);
        if (pv != s.free_blocks.begin()) {
            --pv;
            if (pv->first + pv->second == start) {
                start = pv->first;
                len += pv->second;
                s.free_blocks.erase(pv);
            }
        }
        s.free_blocks[start] = len;
        return cudaSuccess;
    }
    auto it = s.host.find((uintptr_t)p);
    if (it != s.host.end() && s.host_kind[(uintptr_t)p] == MANAGED) {
        s.host.erase(it);
        s.host_kind.erase((uintptr_t)p);
        free(p);
        return cudaSuccess;
    }
    return tm_emu::set_error(cudaErrorInvalidValue,
                             "cudaFree: not a pointer cudaMalloc returned, or freed twice");
}

inline cudaError_t host_side_malloc(void **p, size_t size, Kind kind, const char *by,
                                    const char *file, int line)
{
    TM_PROG_STICKY();
    if (!p) return tm_emu::set_error(cudaErrorInvalidValue);
    *p = nullptr;
    if (size == 0) return kind == MANAGED ? tm_emu::set_error(cudaErrorInvalidValue) : cudaSuccess;
    void *m = nullptr;
    if (posix_memalign(&m, 256, size) != 0 || !m)
        return tm_emu::set_error(cudaErrorMemoryAllocation);
    State &s = st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    s.host[(uintptr_t)m] = Alloc{size, file, line, by, size};
    s.host_kind[(uintptr_t)m] = kind;
    *p = m;
    return cudaSuccess;
}

inline cudaError_t free_host(void *p)
{
    if (!p) return cudaSuccess;
    TM_PROG_STICKY();
    State &s = st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    auto it = s.host.find((uintptr_t)p);
    if (it == s.host.end() || s.host_kind[(uintptr_t)p] != PINNED)
        return tm_emu::set_error(cudaErrorInvalidValue,
                                 "cudaFreeHost: not a pointer cudaMallocHost returned");
    s.host.erase(it);
    s.host_kind.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}

// A range [p, p + n) as a copy sees it: DEVICE (inside one device allocation), MANAGED,
// PINNED or HOST; -1 for a range that starts in or runs into the device region but does not
// lie inside one live allocation.
inline int range_kind(const void *p, size_t n)
{
    uintptr_t start;
    const Alloc *rec;
    const Kind k = classify(p, &start, &rec);
    if (k == DEVICE) {
        if (!rec || (uintptr_t)p + n > start + rec->size) return -1;
        return DEVICE;
    }
    if (k == HOST && n &&
        (in_region((const char *)p + n - 1) ||
         ((const char *)p < st().dev && (const char *)p + n > st().dev)))
        return -1;
    return k;
}

// One end of a copy in the program's words: "d_a, device memory: 4000 bytes from cudaMalloc at
// vec.cu:20", "h_a, host memory".
inline std::string end_text(const void *p, const char *expr)
{
    uintptr_t start;
    const Alloc *rec;
    const Kind k = classify(p, &start, &rec);
    std::string out = expr && *expr ? std::string(expr) + ": " : std::string();
    const char *kind = k == DEVICE    ? "device memory"
                       : k == MANAGED ? "managed memory"
                       : k == PINNED  ? "pinned host memory"
                                      : "host memory";
    if (rec) {
        out += std::to_string(rec->size) + " bytes of " + kind + " from " + rec->by + " at " +
               (rec->file ? rec->file : "?") + ":" + std::to_string(rec->line);
        if ((uintptr_t)p != start)
            out += ", from byte " + std::to_string((uintptr_t)p - start) + " of it";
    } else {
        out += kind;
    }
    if (!rec && k == DEVICE) {
        out += " that no live allocation holds (freed, or never allocated)";
    }
    return out;
}

// Check mode: the bytes [p, p + n) of a device allocation were written (src: copied from there).
inline void mark_written(void *dst, const void *src, size_t n)
{
#ifdef TM_PROG_CHECK
    uintptr_t ds, ss;
    const Alloc *dr, *sr;
    if (classify(dst, &ds, &dr) != DEVICE || !dr || !dr->shadow || !dr->shadow->bytes) return;
    unsigned char *to = dr->shadow->bytes + ((uintptr_t)dst - ds);
    if (src && classify(src, &ss, &sr) == DEVICE && sr && sr->shadow && sr->shadow->bytes &&
        !sr->shadow->untracked.load())
        memmove(to, sr->shadow->bytes + ((uintptr_t)src - ss), n);
    else
        memset(to, 1, n);
#else
    (void)dst;
    (void)src;
    (void)n;
#endif
}

inline cudaError_t copy(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                        const char *what, const char *dexpr = "", const char *sexpr = "")
{
    TM_PROG_STICKY();
    if ((int)kind < 0 || (int)kind > 4) return tm_emu::set_error(cudaErrorInvalidMemcpyDirection);
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return tm_emu::set_error(cudaErrorInvalidValue);
    State &s = st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    const int dk = range_kind(dst, count), sk = range_kind(src, count);
    char buf[1400];
    if (dk < 0 || sk < 0) {
        snprintf(buf, sizeof buf,
                 "%s of %zu bytes runs past the end of the %s (%s); nothing was copied", what,
                 count, dk < 0 ? "destination" : "source",
                 dk < 0 ? end_text(dst, dexpr).c_str() : end_text(src, sexpr).c_str());
        return tm_emu::set_error(cudaErrorInvalidValue, buf);
    }
    // a kind that names device memory where a pointer is host memory, or the reverse
    const bool dst_dev = dk == DEVICE, src_dev = sk == DEVICE;
    const bool dst_host = dk == HOST, src_host = sk == HOST;
    bool bad = false;
    switch (kind) {
    case cudaMemcpyHostToDevice: bad = dst_host || src_dev; break;
    case cudaMemcpyDeviceToHost: bad = dst_dev || src_host; break;
    case cudaMemcpyDeviceToDevice: bad = dst_host || src_host; break;
    case cudaMemcpyHostToHost: bad = dst_dev || src_dev; break;
    default: break;
    }
    if (bad) {
        static const char *const kinds[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice",
                                            "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice",
                                            "cudaMemcpyDefault"};
        snprintf(buf, sizeof buf,
                 "%s with %s: the copy's kind does not match its pointers (the destination "
                 "is %s, the source %s); nothing was copied",
                 what, kinds[(int)kind], end_text(dst, dexpr).c_str(),
                 end_text(src, sexpr).c_str());
        return tm_emu::set_error(cudaErrorInvalidValue, buf);
    }
    memmove(rt_view(dst), rt_view(src), count);
    mark_written(dst, src, count);
    return cudaSuccess;
}

inline cudaError_t set(void *p, int value, size_t count)
{
    TM_PROG_STICKY();
    if (count == 0) return cudaSuccess;
    if (!p) return tm_emu::set_error(cudaErrorInvalidValue);
    State &s = st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    const int k = range_kind(p, count);
    if (k < 0 || k == HOST || k == PINNED)
        return tm_emu::set_error(
            cudaErrorInvalidValue,
            "cudaMemset: not device memory, or past the end of its allocation");
    memset(rt_view(p), value, count);
    mark_written(p, nullptr, count);
    return cudaSuccess;
}

// ---- device printf: kept until the next synchronising call ----
inline int printf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline int printf_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n;
    if (st().launching.load(std::memory_order_relaxed)) {
        char small[512];
        va_list ap2;
        va_copy(ap2, ap);
        n = vsnprintf(small, sizeof small, fmt, ap);
        std::string text;
        if (n >= 0 && (size_t)n < sizeof small) {
            text.assign(small, (size_t)n);
        } else if (n >= 0) {
            text.resize((size_t)n + 1);
            vsnprintf(&text[0], text.size(), fmt, ap2);
            text.resize((size_t)n);
        }
        va_end(ap2);
        std::lock_guard<std::mutex> g(st().printf_mu);
        st().printf_buf += text;
    } else {
        n = vprintf(fmt, ap);
    }
    va_end(ap);
    return n;
}

// ---- devices ----
struct Preset {
    const char *key, *name;
    int major, minor, sms, clock_khz, mem_clock_khz, bus_bits, l2_bytes;
    size_t global_bytes;
};
inline const Preset &preset()
{
    static const Preset presets[] = {
        {"H100", "NVIDIA H100 80GB HBM3 (emulated by tiledmm on the CPU)", 9, 0, 132, 1980000,
         2619000, 5120, 50 << 20, (size_t)80 << 30},
        {"H200", "NVIDIA H200 (emulated by tiledmm on the CPU)", 9, 0, 132, 1980000, 3201000, 6144,
         50 << 20, (size_t)141 << 30},
        {"A100", "NVIDIA A100-SXM4-40GB (emulated by tiledmm on the CPU)", 8, 0, 108, 1410000,
         1215000, 5120, 40 << 20, (size_t)40 << 30},
    };
    const char *e = getenv("TILEDMM_EMU_DEVICE");
    for (const Preset &p : presets)
        if (e && strcasecmp(e, p.key) == 0) return p;
    return presets[0];
}

inline cudaError_t properties(cudaDeviceProp *p, int device)
{
    TM_PROG_STICKY();
    cudaError_t e = ::cudaGetDeviceProperties(p, device);
    if (e != cudaSuccess) return e;
    const Preset &d = preset();
    snprintf(p->name, sizeof p->name, "%s", d.name);
    p->major = d.major;
    p->minor = d.minor;
    p->multiProcessorCount = d.sms;
    p->l2CacheSize = d.l2_bytes;
    p->memoryBusWidth = d.bus_bits;
    p->integrated = 0;
    p->concurrentKernels = 1;
    p->asyncEngineCount = 2;
    p->managedMemory = 1;
    p->cooperativeLaunch = 1;
    p->ECCEnabled = 1;
    p->globalL1CacheSupported = 1;
    p->localL1CacheSupported = 1;
    p->textureAlignment = 512;
    region_init();
    p->totalGlobalMem = st().cap < d.global_bytes ? st().cap : d.global_bytes;
    return cudaSuccess;
}

inline cudaError_t attribute(int *value, cudaDeviceAttr attr, int device)
{
    TM_PROG_STICKY();
    cudaError_t e = ::cudaDeviceGetAttribute(value, attr, device);
    if (e != cudaSuccess) return e;
    const Preset &d = preset();
    cudaDeviceProp prop;
    if (properties(&prop, device) == cudaSuccess) {   // the preset's device, where a field holds it
        int known = 0;
        const int v = tm_emu_attr_from_prop(&prop, attr, &known);
        if (known) *value = v;
    }
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = d.sms; break;
    case cudaDevAttrComputeCapabilityMajor: *value = d.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = d.minor; break;
    case cudaDevAttrClockRate: *value = d.clock_khz; break;
    case cudaDevAttrMemoryClockRate: *value = d.mem_clock_khz; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = d.bus_bits; break;
    case cudaDevAttrL2CacheSize: *value = d.l2_bytes; break;
    default: break;
    }
    return cudaSuccess;
}

inline cudaError_t mem_info(size_t *freeb, size_t *total)
{
    TM_PROG_STICKY();
    if (!freeb || !total) return tm_emu::set_error(cudaErrorInvalidValue);
    State &s = st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    region_init();
    size_t used = 0;
    for (auto &kv : s.device)
        used += kv.second.span;
    *total = s.cap;
    *freeb = s.cap - used;
    return cudaSuccess;
}

// ---- streams (launches are synchronous here, so every stream is in order) ----
inline cudaError_t stream_create(cudaStream_t *stream)
{
    TM_PROG_STICKY();
    if (!stream) return tm_emu::set_error(cudaErrorInvalidValue);
    std::lock_guard<std::recursive_mutex> g(st().mu);
    cudaStream_t s = reinterpret_cast<cudaStream_t>(new char[1]);
    st().streams.push_back(s);
    *stream = s;
    return cudaSuccess;
}

inline bool stream_valid(cudaStream_t s)
{
    if (!s) return true;
    std::lock_guard<std::recursive_mutex> g(st().mu);
    for (cudaStream_t x : st().streams)
        if (x == s) return true;
    return false;
}

inline cudaError_t stream_destroy(cudaStream_t stream)
{
    TM_PROG_STICKY();
    std::lock_guard<std::recursive_mutex> g(st().mu);
    auto &v = st().streams;
    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] == stream) {
            delete[] reinterpret_cast<char *>(stream);
            v.erase(v.begin() + (long)i);
            return cudaSuccess;
        }
    }
    return tm_emu::set_error(cudaErrorInvalidResourceHandle);
}

// ---- profile mode (tm.run(..., profile=True)): emu/profile/emu_profile.cpp's counters ----
#ifdef TM_PROG_PROFILE
extern "C" void tm_profile_begin(long long stride, int sms);
extern "C" int tm_profile_end(double *out, int n);
extern "C" const char *tm_profile_fields(void);
extern "C" void tm_profile_add_range(uintptr_t p, size_t size);
extern "C" void tm_profile_remove_range(uintptr_t p);
#ifndef TM_PROG_GRID_SMS
#define TM_PROG_GRID_SMS 132
#endif

// Device memory (the region, managed allocations) is global memory for the counters.
inline void profile_begin()
{
    State &s = st();
    if (s.dev && s.top) tm_profile_add_range((uintptr_t)s.dev, s.top);
    for (auto &kv : s.host)
        if (s.host_kind[kv.first] == MANAGED) tm_profile_add_range(kv.first, kv.second.size);
    tm_profile_begin(1, TM_PROG_GRID_SMS);
}

// The launch's counters as a JSON object.
inline std::string profile_end()
{
    State &s = st();
    double out[128];
    const int n = tm_profile_end(out, 128);
    if (s.dev && s.top) tm_profile_remove_range((uintptr_t)s.dev);
    for (auto &kv : s.host)
        if (s.host_kind[kv.first] == MANAGED) tm_profile_remove_range(kv.first);
    std::string names = tm_profile_fields(), json = "{";
    size_t start = 0;
    for (int i = 0; i < n && i < 128; ++i) {
        size_t end = names.find(',', start);
        const std::string name =
            names.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (name.empty()) break;
        char buf[64];
        snprintf(buf, sizeof buf, "%s\"%s\": %.17g", i ? ", " : "", name.c_str(), out[i]);
        json += buf;
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return json + "}";
}
#endif

// ---- the launch ----
template <typename T>
inline const char *host_pointer_kind(T)
{
    return nullptr;
}
template <typename T>
inline const char *host_pointer_kind(T *p)
{
    if (!p) return nullptr;
    uintptr_t start;
    const Alloc *rec;
    const Kind k = classify((const void *)p, &start, &rec);
    if (k != HOST) {
        if (k == DEVICE && !rec) return "freed device memory";
        return nullptr;
    }
    // where the pointer points, as far as /proc/self/maps tells: the stack or the heap
    char here;
    const uintptr_t a = (uintptr_t)p, sp = (uintptr_t)&here;
    if (a > sp - ((uintptr_t)1 << 16) && a < sp + ((uintptr_t)8 << 20)) return "a local variable";
    return "malloc";
}

inline std::recursive_mutex &launch_mutex()
{
    static std::recursive_mutex *m = new std::recursive_mutex();   // never destroyed: atexit
    return *m;
}

struct LaunchSite {
    const char *kernel, *params, *file;
    int line;
};

// Kernels split at their barriers (tiledmm/programs/build.py): each plain kernel's split
// registered by the kernel's address as the program loads (static initialisers, one thread),
// read at each launch.
struct SplitEntry {
    void (*split)();   // the kernel's own parameter types: cast back by the launch
    size_t frame;
};
inline std::map<const void *, SplitEntry> &split_table()
{
    static std::map<const void *, SplitEntry> table;
    return table;
}
inline bool register_split(const void *kernel, void (*split)(), size_t frame)
{
    split_table()[kernel] = SplitEntry{split, frame};
    return true;
}

// How a launch that ran was run (issue 34): `path` "thread loops" (the kernel split at its
// barriers) or "fibers", and `reason`, why fibers where this launch decided it ("" otherwise:
// tiledmm/programs/run.py adds the build's reason for the kernel).
struct LaunchPath {
    const char *path;
    std::string reason;
};

// started: when the launch began (Unix time, seconds), for benchmarks/program_startup.py
inline void record_launch(const LaunchSite &site, dim3 g, dim3 b, size_t shm, double ms, int err,
                          double started = 0.0, const std::string &profile = std::string(),
                          const LaunchPath *how = nullptr)
{
    std::string line = "{\"event\": \"launch\", \"kernel\": ";
    json_str(line, site.kernel);
    char buf[320];
    snprintf(buf, sizeof buf,
             ", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"shared_bytes\": %zu, "
             "\"ms\": %.6f, \"error\": %d, \"line\": %d, \"started\": %.6f}",
             g.x, g.y, g.z, b.x, b.y, b.z, shm, ms, err, site.line, started);
    line += buf;
    if (!profile.empty()) line.insert(line.size() - 1, ", \"profile\": " + profile);
    if (how && how->path && *how->path) {   // launches that ran (a refused one took no path)
        std::string p = ", \"path\": ";
        json_str(p, how->path);
        p += ", \"path_reason\": ";
        json_str(p, how->reason.c_str());
        line.insert(line.size() - 1, p);
    }
    report(line);
#ifdef TM_PROG_CHECK
    if (err) {   // a launch that failed: its error is the program's to check (cudaGetLastError)
        std::lock_guard<std::recursive_mutex> g(st().mu);
        st().unchecked.push_back({"the launch of kernel '" + std::string(site.kernel) + "'",
                                  site.file, site.line, (cudaError_t)err});
    }
#endif
}

inline std::string param_name(const char *params, size_t i)
{
    std::string all(params ? params : "");
    size_t start = 0;
    for (size_t k = 0; k < i; ++k) {
        start = all.find(',', start);
        if (start == std::string::npos) return "#" + std::to_string(i + 1);
        ++start;
    }
    size_t end = all.find(',', start);
    std::string name =
        all.substr(start, end == std::string::npos ? std::string::npos : end - start);
    return name.empty() ? "#" + std::to_string(i + 1) : name;
}

// A launch's argument as the host passes it: the kernel's own parameter type, or, for a
// parameter check mode declared tm_checked_ptr<T>, the T * the program gives.
template <typename P>
struct host_param {
    typedef P type;
};

// ---- check mode (tm.run(..., check=True)) ----
inline void check_event(const char *kind, const char *file, int line, const std::string &message)
{
    std::string ev = "{\"event\": \"check\", \"kind\": ";
    json_str(ev, kind);
    ev += ", \"file\": ";
    json_str(ev, file ? file : "");
    ev += ", \"line\": " + std::to_string(line) + ", \"message\": ";
    json_str(ev, message.c_str());
    report(ev + "}");
    diag("%s:%d: %s", file ? file : "?", line, message.c_str());
}

#ifdef TM_PROG_CHECK
template <typename T>
struct host_param<tm_checked_ptr<T>> {
    typedef T *type;
};

// What one checked launch keeps alive: the buffers' records and the text reports quote.
struct CheckArgs {
    std::vector<std::unique_ptr<tm_check_buf>> bufs;
    std::vector<std::unique_ptr<std::string>> texts;
};

template <typename P>
struct arg_maker {
    static P make(P v, const LaunchSite &, size_t, CheckArgs &) { return v; }
};
template <typename T>
struct arg_maker<tm_checked_ptr<T>> {
    // The checked pointer over the whole allocation the argument points into (its index counted
    // from the allocation's start), named as the kernel's parameter, with the allocation's line.
    static tm_checked_ptr<T> make(T *p, const LaunchSite &site, size_t i, CheckArgs &ca)
    {
        uintptr_t start = 0;
        const Alloc *rec = nullptr;
        if (p) classify((const void *)p, &start, &rec);
        T *base = p;
        long long count = 0, offset = 0;
        if (rec && ((uintptr_t)p - start) % sizeof(T) == 0) {
            base = reinterpret_cast<T *>(start);
            count = (long long)(rec->size / sizeof(T));
            offset = (long long)(((uintptr_t)p - start) / sizeof(T));
        } else if (rec) {
            count = (long long)((start + rec->size - (uintptr_t)p) / sizeof(T));
        }
        ca.texts.emplace_back(new std::string(param_name(site.params, i)));
        const char *name = ca.texts.back()->c_str();
        std::string type = std::string(tm_type_name<T>::get()) + " *";
        if (rec) {
            const std::string var = alloc_name(rec->expr);
            type += ", given " + (var.empty() ? std::string() : var + ": ") +
                    std::to_string(rec->size) + " bytes from " + rec->by + " at " +
                    (rec->file ? rec->file : "?") + ":" + std::to_string(rec->line);
        } else if (!p) {
            type += ", given a null pointer";
        }
        ca.texts.emplace_back(new std::string(type));
        const bool record = !std::is_const<T>::value && std::is_arithmetic<T>::value;
        ca.bufs.emplace_back(
            new tm_check_buf(name, ca.texts.back()->c_str(), count, sizeof(T), record));
        tm_check_buf *buf = ca.bufs.back().get();
        if (rec && rec->shadow && rec->shadow->bytes && (uintptr_t)base == start) {
            buf->init = rec->shadow->bytes;
            buf->untracked = &rec->shadow->untracked;
        }
        return tm_checked_ptr<T>(base, count, buf, offset, nullptr);
    }
};
#endif

// emu/program_graphs.h: what is queued on a capturing stream becomes a node of its graph (each
// says whether it did), and kernels are known by their address for cudaLaunchKernel.
inline bool capture_launch(cudaStream_t stream, std::function<void()> work);
inline bool capture_work(cudaStream_t stream, cudaGraphNodeType type,
                         std::function<cudaError_t()> run);
inline bool capture_record(cudaEvent_t event, cudaStream_t stream);
inline cudaGraph_t capturing(cudaStream_t stream);
inline bool capture_wait(cudaStream_t stream, cudaEvent_t event);
template <typename... P>
inline bool register_kernel(void (*kernel)(P...), const char *name, const char *params);

template <typename... P>
struct Launcher {
    void (*kernel)(P...);
    LaunchSite site;
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    // the kernel split at its barriers (tiledmm/programs/build.py), when it was:
    // one call runs a whole block as loops over its threads; frame: per-thread array bytes
    void (*split)(P...) = nullptr;
    size_t frame = 0;

    // The split this launch may take (the pair's, else the one registered for the kernel), or
    // null; whether it takes it is tm_emu_launch_pair's decision (emu/cuda_emu.h).
    void (*split_for(size_t &fr) const)(P...)
    {
        fr = frame;
        if (split) return split;
        const auto it = split_table().find(reinterpret_cast<const void *>(kernel));
        if (it == split_table().end()) return nullptr;
        fr = it->second.frame;
        return reinterpret_cast<void (*)(P...)>(it->second.split);
    }

#ifdef TM_PROG_CHECK
    // The launch in check mode: its problems (the first of the lowest block) reported here,
    // with the launch's line; the program goes on (accesses outside a buffer were not made).
    template <size_t... I>
    cudaError_t checked(std::index_sequence<I...>, typename host_param<P>::type... args) const
    {
        CheckArgs ca;
        tm_check_launch_t state(shared);
        cudaError_t err = tm_check_launch(&state, kernel, grid, block, shared,
                                          arg_maker<P>::make(args, site, I, ca)...);
        tm_check_cur = nullptr;
        const long long hits = state.hits.load(), uninit = state.uninit_hits.load();
        if (uninit) {   // initcheck's finding, apart from the first of the others
            tm_check_plain_types(state.uninit, sizeof state.uninit);
            std::string msg =
                "kernel '" + std::string(site.kernel) + "' launched here: " + state.uninit;
            if (uninit > 1)
                msg += " (and " + std::to_string(uninit - 1) + " more such read" +
                       (uninit > 2 ? "s" : "") + " in this launch)";
            check_event("initcheck", site.file, site.line, msg);
        }
        if (hits) {
            tm_check_plain_types(state.message, sizeof state.message);
            std::string msg =
                "kernel '" + std::string(site.kernel) + "' launched here: " + state.message;
            if (hits > 1)
                msg += " (and " + std::to_string(hits - 1) + " more problem" +
                       (hits > 2 ? "s" : "") + " in this launch)";
            check_event("kernel", site.file, site.line, msg);
        }
        return err;
    }
#endif

    void operator()(typename host_param<P>::type... args) const
    {
        // a capturing stream's launch is its graph's, with the arguments as given now
        if (capture_launch(stream, [self = *this, args...]() { self(args...); })) return;
        // One launch at a time, whichever host thread launches (an OpenMP loop of launches):
        // the device view's opening and closing, the running kernel's name and the last
        // launch's path, reason and error detail are the process's, not a launch's.
        std::lock_guard<std::recursive_mutex> one_launch(launch_mutex());
        State &s = st();
        if (s.sticky != cudaSuccess || s.pending != cudaSuccess) {
            // a launch into a context with an error fails with it
            tm_emu::set_error(s.sticky != cudaSuccess ? s.sticky : s.pending);
            record_launch(site, grid, block, shared, 0.0,
                          (int)(s.sticky != cudaSuccess ? s.sticky : s.pending));
            return;
        }
        if (!stream_valid(stream)) {
            tm_emu::set_error(cudaErrorInvalidResourceHandle);
            record_launch(site, grid, block, shared, 0.0, (int)cudaErrorInvalidResourceHandle);
            return;
        }
        const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
        if (threads > 1024) {   // CUDA 13 on the H200: "invalid argument"; the kernel does not run
            char buf[200];
            snprintf(buf, sizeof buf,
                     "kernel '%s' launched with %llu threads per block (%u,%u,%u); a block "
                     "has at most 1024 threads",
                     site.kernel, threads, block.x, block.y, block.z);
            tm_emu::set_error(cudaErrorInvalidValue, buf);
            diag("%s:%d: %s: the launch fails with cudaErrorInvalidValue", site.file, site.line,
                 buf);
            record_launch(site, grid, block, shared, 0.0, (int)cudaErrorInvalidValue);
            return;
        }
        // pointer arguments must point to memory a kernel can reach
        const char *kinds[] = {host_pointer_kind(args)..., nullptr};
        for (size_t i = 0; i < sizeof...(P); ++i) {
            if (!kinds[i]) continue;
            diag("%s:%d: kernel '%s' argument '%s' points to host memory (%s); give it device "
                 "memory "
                 "from cudaMalloc, filled by cudaMemcpy",
                 site.file, site.line, site.kernel, param_name(site.params, i).c_str(), kinds[i]);
            s.pending = cudaErrorIllegalAddress;
            record_launch(site, grid, block, shared, 0.0, (int)cudaErrorIllegalAddress);
            return;
        }
        const double started =
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        const auto t0 = std::chrono::steady_clock::now();
        s.kernel = site.kernel;
        std::string counts;
#ifdef TM_PROG_PROFILE
        profile_begin();
#endif
        s.launching.store(1);
        set_open(true);
        LaunchPath how{"", std::string()};
#ifdef TM_PROG_CHECK
        cudaError_t err = checked(std::index_sequence_for<P...>{}, args...);
#else
        size_t fr = 0;
        void (*const sp)(P...) = split_for(fr);
        cudaError_t err = tm_emu_launch_pair(kernel, sp, fr, grid, block, shared, args...);
        how.reason = tm_emu_last_launch_reason();
#endif
        how.path = tm_emu_last_launch_path();
        set_open(false);
        s.launching.store(0);
#ifdef TM_PROG_PROFILE
        counts = profile_end();
#endif
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        if (err != cudaSuccess) {
            const char *detail = tm_emu_last_error_detail();
            const bool config =
                err == cudaErrorInvalidConfiguration || err == cudaErrorInvalidValue ||
                err == cudaErrorInvalidDeviceFunction || err == cudaErrorNotSupported;
            diag("%s:%d: kernel '%s': %s%s%s", site.file, site.line, site.kernel,
                 cudaGetErrorString(err), detail && *detail ? ": " : "", detail ? detail : "");
            if (config) how.path = "";   // refused: the kernel did not run
            if (!config) {   // an error of the kernel's execution: at the next synchronising call
                s.pending = err == cudaErrorMemoryAllocation ? err : cudaErrorLaunchFailure;
                if (err == cudaErrorIllegalAddress || err == cudaErrorAssert) s.pending = err;
                cudaGetLastError();
            }
        }
        record_launch(site, grid, block, shared, ms, (int)err, started,
                      err == cudaSuccess ? counts : "", &how);
    }
};

template <typename... P>
inline Launcher<P...> config(const char *kernel_name, const char *params, const char *file,
                             int line, void (*kernel)(P...), dim3 grid, dim3 block,
                             size_t shared = 0, cudaStream_t stream = 0)
{
    register_kernel(kernel, kernel_name, params);
    return Launcher<P...>{kernel, LaunchSite{kernel_name, params, file, line}, grid, block, shared,
                          stream};
}

// The launch of a kernel split at its barriers: the pair programs/build.py passes for it
// (emu/cuda_emu.h's tm_emu_split_kernel), run as thread loops where tm_emu_launch_pair says so.
template <typename... P>
inline Launcher<P...> config(const char *kernel_name, const char *params, const char *file,
                             int line, const tm_emu_split_kernel<void (*)(P...)> &kernel, dim3 grid,
                             dim3 block, size_t shared = 0, cudaStream_t stream = 0)
{
    register_kernel(kernel.kernel, kernel_name, params);
    Launcher<P...> l{
        kernel.kernel, LaunchSite{kernel_name, params, file, line}, grid, block, shared, stream};
    l.split = kernel.split;
    l.frame = kernel.frame;
    return l;
}

template <typename T>
inline void **as_void(T **p)
{
    return reinterpret_cast<void **>(p);
}

}   // namespace tm_prog

// ---- what tiledmm's program runner calls (tiledmm/programs/main.py) ----
// once per program: a program of several files (tm.run of a group) defines them in its first
#ifndef TM_PROG_NOT_FIRST_FILE
extern "C" __attribute__((visibility("default"), used)) int tm_prog_setup(int report_fd)
{
    tm_prog::State &s = tm_prog::st();
    s.report_fd = report_fd;
    Dl_info info;
    if (dladdr((void *)&tm_prog::st, &info)) s.program_base = (uintptr_t)info.dli_fbase;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = tm_prog::segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &s.prev_segv);
    sa.sa_sigaction = tm_prog::kernel_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    for (int sig : {SIGABRT, SIGFPE, SIGILL, SIGTRAP, SIGBUS})
        sigaction(sig, &sa, nullptr);
    void *warm[4];
    backtrace(warm, 4);   // loads the unwinder now, not first inside the fault handler
    atexit(tm_prog::flush_printf);   // exit() without a synchronising call still shows it
    return 0;
}

extern "C" __attribute__((visibility("default"), used)) void tm_prog_exit(int code)
{
    tm_prog::flush_printf();   // what a kernel printed and no synchronising call showed
    fflush(stdout);
    exit(code);
}
#endif

// ---- the program's calls, routed to the functions above (file and line for allocations) ----
#define cudaMalloc(p, size) \
    tm_prog::device_malloc(tm_prog::as_void(p), (size), __FILE__, __LINE__, #p)
#define cudaMallocManaged(p, size, ...)                                                           \
    tm_prog::host_side_malloc(tm_prog::as_void(p), (size), tm_prog::MANAGED, "cudaMallocManaged", \
                              __FILE__, __LINE__)
#define cudaMallocHost(p, size)                                                               \
    tm_prog::host_side_malloc(tm_prog::as_void(p), (size), tm_prog::PINNED, "cudaMallocHost", \
                              __FILE__, __LINE__)
#define cudaHostAlloc(p, size, flags)                                                        \
    tm_prog::host_side_malloc(tm_prog::as_void(p), (size), tm_prog::PINNED, "cudaHostAlloc", \
                              __FILE__, __LINE__)
#define cudaFree(p) tm_prog::device_free((void *)(p))
#define cudaFreeHost(p) tm_prog::free_host((void *)(p))

static inline cudaError_t tm_prog_cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k,
                                             const char *dexpr = "", const char *sexpr = "")
{
    cudaError_t e = tm_prog::sync_point();
    if (e != cudaSuccess) return e;
    return tm_prog::copy(d, s, n, k, "cudaMemcpy", dexpr, sexpr);
}
static inline cudaError_t tm_prog_cudaMemcpyAsync(void *d, const void *s, size_t n,
                                                  cudaMemcpyKind k, cudaStream_t st = 0)
{
    if (!tm_prog::stream_valid(st)) return tm_emu::set_error(cudaErrorInvalidResourceHandle);
    if (tm_prog::capture_work(st, cudaGraphNodeTypeMemcpy,
                              [=]() { return tm_prog::copy(d, s, n, k, "cudaMemcpyAsync"); }))
        return cudaSuccess;
    return tm_prog::copy(d, s, n, k, "cudaMemcpyAsync");
}
static inline cudaError_t tm_prog_cudaMemset(void *p, int v, size_t n)
{
    return tm_prog::set(p, v, n);
}
static inline cudaError_t tm_prog_cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st = 0)
{
    if (tm_prog::capture_work(st, cudaGraphNodeTypeMemset, [=]() { return tm_prog::set(p, v, n); }))
        return cudaSuccess;
    return tm_prog::set(p, v, n);
}
static inline cudaError_t tm_prog_cudaDeviceSynchronize(void)
{
    return tm_prog::sync_point();
}
static inline cudaError_t tm_prog_cudaStreamSynchronize(cudaStream_t s)
{
    if (!tm_prog::stream_valid(s)) return tm_emu::set_error(cudaErrorInvalidResourceHandle);
    if (tm_prog::capturing(s))   // no waiting in a capture
        return tm_emu::set_error(cudaErrorStreamCaptureUnsupported);
    return tm_prog::sync_point();
}
static inline cudaError_t tm_prog_cudaEventSynchronize(cudaEvent_t e)
{
    cudaError_t r = tm_prog::sync_point();
    return r != cudaSuccess ? r : cudaEventSynchronize(e);
}
static inline cudaError_t tm_prog_cudaDeviceReset(void)
{
    tm_prog::flush_printf();
    tm_prog::State &s = tm_prog::st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    s.sticky = s.pending = cudaSuccess;
    s.device.clear();
    s.free_blocks.clear();
    s.top = 0;
    cudaGetLastError();
    return cudaSuccess;
}
static inline cudaError_t tm_prog_cudaGetLastError(void)
{
    tm_prog::State &s = tm_prog::st();
    if (s.sticky != cudaSuccess) return s.sticky;
    return cudaGetLastError();
}
static inline cudaError_t tm_prog_cudaPeekAtLastError(void)
{
    tm_prog::State &s = tm_prog::st();
    if (s.sticky != cudaSuccess) return s.sticky;
    return cudaPeekAtLastError();
}
static inline cudaError_t tm_prog_cudaStreamCreate(cudaStream_t *s)
{
    return tm_prog::stream_create(s);
}
static inline cudaError_t tm_prog_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    return tm_prog::stream_create(s);
}
static inline cudaError_t tm_prog_cudaStreamDestroy(cudaStream_t s)
{
    return tm_prog::stream_destroy(s);
}
static inline cudaError_t tm_prog_cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0)
{
    if (!tm_prog::stream_valid(s)) return tm_emu::set_error(cudaErrorInvalidResourceHandle);
    if (tm_prog::capture_record(e, s)) return cudaSuccess;
    return cudaEventRecord(e, s);
}
static inline cudaError_t tm_prog_cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    return tm_prog::properties(p, d);
}
static inline cudaError_t tm_prog_cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
    return tm_prog::attribute(v, a, d);
}
static inline cudaError_t tm_prog_cudaMemGetInfo(size_t *f, size_t *t)
{
    return tm_prog::mem_info(f, t);
}
template <typename T>
static inline cudaError_t tm_prog_cudaMemcpyToSymbol(T &symbol, const void *src, size_t count,
                                                     size_t offset = 0,
                                                     cudaMemcpyKind kind = cudaMemcpyHostToDevice)
{
    cudaError_t e = tm_prog::sync_point();
    if (e != cudaSuccess) return e;
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice &&
        kind != cudaMemcpyDefault)
        return tm_emu::set_error(cudaErrorInvalidMemcpyDirection);
    if (offset + count > sizeof(T)) return tm_emu::set_error(cudaErrorInvalidValue);
    std::memcpy(reinterpret_cast<char *>(&symbol) + offset, tm_prog::rt_view(src), count);
    return cudaSuccess;
}
template <typename T>
static inline cudaError_t tm_prog_cudaMemcpyFromSymbol(void *dst, const T &symbol, size_t count,
                                                       size_t offset = 0,
                                                       cudaMemcpyKind kind = cudaMemcpyDeviceToHost)
{
    cudaError_t e = tm_prog::sync_point();
    if (e != cudaSuccess) return e;
    if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice &&
        kind != cudaMemcpyDefault)
        return tm_emu::set_error(cudaErrorInvalidMemcpyDirection);
    if (offset + count > sizeof(T)) return tm_emu::set_error(cudaErrorInvalidValue);
    std::memcpy(tm_prog::rt_view(dst), reinterpret_cast<const char *>(&symbol) + offset, count);
    return cudaSuccess;
}

// pitched memory: rows of `width` bytes, each starting at a multiple of 512 bytes
static inline cudaError_t tm_prog_cudaMallocPitch(void **p, size_t *pitch, size_t width,
                                                  size_t height, const char *file, int line)
{
    if (!pitch) return tm_emu::set_error(cudaErrorInvalidValue);
    *pitch = (width + 511) / 512 * 512;
    return tm_prog::device_malloc(p, *pitch * height, file, line);
}
static inline cudaError_t tm_prog_cudaMemcpy2D(void *dst, size_t dpitch, const void *src,
                                               size_t spitch, size_t width, size_t height,
                                               cudaMemcpyKind kind)
{
    cudaError_t e = tm_prog::sync_point();
    if (e != cudaSuccess) return e;
    if (width > dpitch || width > spitch) return tm_emu::set_error(cudaErrorInvalidPitchValue);
    if (height == 0 || width == 0) return cudaSuccess;
    // the whole copy is checked before any row moves: nothing is copied if a row is out of bounds
    const size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
    if (tm_prog::range_kind(dst, dspan) < 0 || tm_prog::range_kind(src, sspan) < 0)
        return tm_emu::set_error(cudaErrorInvalidValue,
                                 "cudaMemcpy2D runs past the end of a device allocation");
    for (size_t r = 0; r < height; ++r) {
        e = tm_prog::copy((char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind,
                          "cudaMemcpy2D");
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
static inline cudaError_t tm_prog_cudaStreamQuery(cudaStream_t s)
{
    TM_PROG_STICKY();
    return tm_prog::stream_valid(s) ? cudaSuccess
                                    : tm_emu::set_error(cudaErrorInvalidResourceHandle);
}
static inline cudaError_t tm_prog_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0)
{
    const cudaError_t r = tm_prog_cudaStreamQuery(s);   // every stream is in order already
    if (r == cudaSuccess) tm_prog::capture_wait(s, e);   // ...and joins a capture e was in
    return r;
}

#define cudaMallocPitch(p, pitch, w, h) \
    tm_prog_cudaMallocPitch(tm_prog::as_void(p), (pitch), (w), (h), __FILE__, __LINE__)
#define cudaMemcpy2D(...) tm_prog_cudaMemcpy2D(__VA_ARGS__)
#define cudaStreamQuery(s) tm_prog_cudaStreamQuery(s)
#define cudaStreamWaitEvent(...) tm_prog_cudaStreamWaitEvent(__VA_ARGS__)
#define cudaMemcpy(d, s, n, k) tm_prog_cudaMemcpy((d), (s), (n), (k), #d, #s)
#define cudaMemcpyAsync(...) tm_prog_cudaMemcpyAsync(__VA_ARGS__)
#define cudaMemset(...) tm_prog_cudaMemset(__VA_ARGS__)
#define cudaMemsetAsync(...) tm_prog_cudaMemsetAsync(__VA_ARGS__)
#define cudaDeviceSynchronize() tm_prog_cudaDeviceSynchronize()
#define cudaStreamSynchronize(s) tm_prog_cudaStreamSynchronize(s)
#define cudaEventSynchronize(e) tm_prog_cudaEventSynchronize(e)
#define cudaDeviceReset() tm_prog_cudaDeviceReset()
#define cudaGetLastError() tm_prog_cudaGetLastError()
#define cudaPeekAtLastError() tm_prog_cudaPeekAtLastError()
#define cudaStreamCreate(s) tm_prog_cudaStreamCreate(s)
#define cudaStreamCreateWithFlags(s, f) tm_prog_cudaStreamCreateWithFlags((s), (f))
#define cudaStreamDestroy(s) tm_prog_cudaStreamDestroy(s)
#define cudaEventRecord(...) tm_prog_cudaEventRecord(__VA_ARGS__)
#define cudaGetDeviceProperties(p, d) tm_prog_cudaGetDeviceProperties((p), (d))
#define cudaDeviceGetAttribute(v, a, d) tm_prog_cudaDeviceGetAttribute((v), (a), (d))
#define cudaMemGetInfo(f, t) tm_prog_cudaMemGetInfo((f), (t))
#define cudaMemcpyToSymbol(...) tm_prog_cudaMemcpyToSymbol(__VA_ARGS__)
#define cudaMemcpyFromSymbol(...) tm_prog_cudaMemcpyFromSymbol(__VA_ARGS__)
#define cudaThreadSynchronize() tm_prog_cudaDeviceSynchronize()

#include "program_graphs.h"
#pragma GCC pop_options
#include "program_textures.h"

// ---- device assert: the launch fails with cudaErrorAssert at the next synchronising call ----
// glibc's <assert.h> declares __assert_fail (C linkage, noexcept, noreturn); the program's own
// definition sees a kernel's failed assert: the GPU's message, the thread ends (the block goes
// on: emu/scheduler.cpp, tm_emu_end_thread), and the launch's error is cudaErrorAssert. Host
// code's asserts (and a kernel run as thread loops) end the program as glibc's would.
extern "C" int tm_emu_end_thread(void);
extern "C" inline void __assert_fail(const char *expr, const char *file, unsigned int line,
                                     const char *function) noexcept
{
    tm_prog::State &s = tm_prog::st();
    if (s.launching.load(std::memory_order_relaxed) && tm_emu_tls.linear_tid >= 0) {
        char buf[1024];
        const uint3 b = tm_emu_tls.block_idx, t = tm_emu_tls.thread_idx;
        snprintf(buf, sizeof buf,
                 "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion `%s` failed.\n", file,
                 line, function, b.x, b.y, b.z, t.x, t.y, t.z, expr);
        {
            std::lock_guard<std::mutex> g(s.printf_mu);
            s.assert_buf += buf;
        }
        s.pending = cudaErrorAssert;
        tm_emu_end_thread();
    }
    fflush(stdout);
    fprintf(stderr, "%s:%u: %s: Assertion `%s' failed.\n", file, line, function, expr);
    abort();
}

// ---- more of the runtime API (issue 43), as real functions: a later header may declare them,
// and &f and ::f work ----
namespace tm_prog {
struct Extra {
    unsigned device_flags = 0;
    size_t limits[8] = {1024, 1 << 20, 8 << 20, 2,
                        2048, 0,       0,       0};   // cudaLimit's defaults on an H100
    unsigned long long pool_attrs[16] = {};
};
inline Extra &extra()
{
    static Extra *e = new Extra();
    return *e;
}
inline char *default_pool()
{
    static char pool[1];
    return pool;
}
}   // namespace tm_prog

inline cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    TM_PROG_STICKY();
    if (flags & ~0x1fu)
        return tm_emu::set_error(cudaErrorInvalidValue, "cudaSetDeviceFlags: unknown flags");
    tm_prog::extra().device_flags = flags;
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
    if (!flags) return tm_emu::set_error(cudaErrorInvalidValue);
    *flags = tm_prog::extra().device_flags | cudaDeviceMapHost;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
    TM_PROG_STICKY();
    if ((int)limit < 0 || (int)limit >= 8) return tm_emu::set_error(cudaErrorUnsupportedLimit);
    tm_prog::extra().limits[(int)limit] = value;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetLimit(size_t *value, enum cudaLimit limit)
{
    if (!value) return tm_emu::set_error(cudaErrorInvalidValue);
    if ((int)limit < 0 || (int)limit >= 8) return tm_emu::set_error(cudaErrorUnsupportedLimit);
    *value = tm_prog::extra().limits[(int)limit];
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache)
{
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *c)
{
    if (c) *c = cudaFuncCachePreferNone;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig)
{
    return cudaSuccess;
}
template <typename F>
inline cudaError_t cudaFuncSetCacheConfig(F *, enum cudaFuncCache)
{
    return cudaSuccess;
}
template <typename F>
inline cudaError_t cudaFuncSetSharedMemConfig(F *, enum cudaSharedMemConfig)
{
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int, int)
{
    return tm_prog::stream_create(s);
}
inline cudaError_t cudaStreamGetPriority(cudaStream_t, int *p)
{
    if (p) *p = 0;
    return cudaSuccess;
}

// ---- peer access: one emulated device ----
inline cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
    if (!can) return tm_emu::set_error(cudaErrorInvalidValue);
    int n = 0;
    cudaGetDeviceCount(&n);
    if (device < 0 || device >= n || peer < 0 || peer >= n)
        return tm_emu::set_error(cudaErrorInvalidDevice);
    *can = 0;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceEnablePeerAccess(int, unsigned int)
{
    return tm_emu::set_error(cudaErrorInvalidDevice,
                             "the emulator has one device: no peer to reach");
}
inline cudaError_t cudaDeviceDisablePeerAccess(int)
{
    return tm_emu::set_error(cudaErrorPeerAccessNotEnabled);
}

// ---- host memory registered or mapped for kernels (zero copy) ----
inline cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags,
                                    const char *file = __builtin_FILE(),
                                    int line = __builtin_LINE())
{
    TM_PROG_STICKY();
    if (!ptr || !size || (flags & ~0x0fu)) return tm_emu::set_error(cudaErrorInvalidValue);
    tm_prog::State &s = tm_prog::st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    if (tm_prog::in_region(ptr) || s.host.count((uintptr_t)ptr))
        return tm_emu::set_error(cudaErrorHostMemoryAlreadyRegistered);
    s.host[(uintptr_t)ptr] = tm_prog::Alloc{size, file, line, "cudaHostRegister", size};
    s.host_kind[(uintptr_t)ptr] = tm_prog::PINNED;
    return cudaSuccess;
}
inline cudaError_t cudaHostUnregister(void *ptr)
{
    TM_PROG_STICKY();
    tm_prog::State &s = tm_prog::st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    auto it = s.host.find((uintptr_t)ptr);
    if (!ptr || it == s.host.end() || strcmp(it->second.by, "cudaHostRegister") != 0)
        return tm_emu::set_error(cudaErrorHostMemoryNotRegistered);
    s.host.erase(it);
    s.host_kind.erase((uintptr_t)ptr);
    return cudaSuccess;
}
inline cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned int flags)
{
    TM_PROG_STICKY();
    if (!dev || !host || flags) return tm_emu::set_error(cudaErrorInvalidValue);
    uintptr_t start;
    const tm_prog::Alloc *rec;
    const tm_prog::Kind k = tm_prog::classify(host, &start, &rec);
    if (k != tm_prog::PINNED && k != tm_prog::MANAGED)
        return tm_emu::set_error(cudaErrorInvalidValue, "cudaHostGetDevicePointer: not memory from "
                                                        "cudaHostAlloc or cudaHostRegister");
    *dev = host;   // one address space: the device sees the host's address
    return cudaSuccess;
}
template <typename T>
inline cudaError_t cudaHostGetDevicePointer(T **dev, void *host, unsigned int flags)
{
    return cudaHostGetDevicePointer(reinterpret_cast<void **>(dev), host, flags);
}
inline cudaError_t cudaHostGetFlags(unsigned int *flags, void *host)
{
    if (!flags) return tm_emu::set_error(cudaErrorInvalidValue);
    uintptr_t start;
    const tm_prog::Alloc *rec;
    if (tm_prog::classify(host, &start, &rec) != tm_prog::PINNED)
        return tm_emu::set_error(cudaErrorInvalidValue);
    *flags = cudaHostAllocMapped;
    return cudaSuccess;
}

// ---- stream callbacks and host functions: every launch is done when they are queued, so
// they run at once, in order, on the calling thread ----
inline cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t cb, void *data,
                                         unsigned int flags)
{
    if (!cb || flags) return tm_emu::set_error(cudaErrorInvalidValue);
    if (!tm_prog::stream_valid(stream)) return tm_emu::set_error(cudaErrorInvalidResourceHandle);
    const cudaError_t status = tm_prog::sync_point();
    cb(stream, status, data);
    return cudaSuccess;
}
inline cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *data)
{
    if (!fn) return tm_emu::set_error(cudaErrorInvalidValue);
    if (!tm_prog::stream_valid(stream)) return tm_emu::set_error(cudaErrorInvalidResourceHandle);
    TM_PROG_STICKY();
    if (tm_prog::capture_work(stream, cudaGraphNodeTypeHost, [fn, data]() {
        fn(data);
        return cudaSuccess;
    }))
        return cudaSuccess;
    tm_prog::sync_point();
    fn(data);
    return cudaSuccess;
}

// ---- stream-ordered allocation and memory pools (one pool: the device's) ----
template <typename T>
inline cudaError_t cudaMallocAsync(T **p, size_t size, cudaStream_t stream,
                                   const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    if (!tm_prog::stream_valid(stream)) return tm_emu::set_error(cudaErrorInvalidResourceHandle);
    return tm_prog::device_malloc(reinterpret_cast<void **>(p), size, file, line,
                                  "cudaMallocAsync");
}
template <typename T>
inline cudaError_t cudaMallocFromPoolAsync(T **p, size_t size, cudaMemPool_t pool,
                                           cudaStream_t stream, const char *file = __builtin_FILE(),
                                           int line = __builtin_LINE())
{
    if (!pool) return tm_emu::set_error(cudaErrorInvalidValue);
    return cudaMallocAsync(p, size, stream, file, line);
}
inline cudaError_t cudaFreeAsync(void *p, cudaStream_t stream)
{
    if (!tm_prog::stream_valid(stream)) return tm_emu::set_error(cudaErrorInvalidResourceHandle);
    return tm_prog::device_free(p);
}
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
    if (!pool) return tm_emu::set_error(cudaErrorInvalidValue);
    if (device != 0) return tm_emu::set_error(cudaErrorInvalidDevice);
    *pool = reinterpret_cast<cudaMemPool_t>(tm_prog::default_pool());
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int device)
{
    return cudaDeviceGetDefaultMemPool(pool, device);
}
inline cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool)
{
    if (device != 0) return tm_emu::set_error(cudaErrorInvalidDevice);
    return pool ? cudaSuccess : tm_emu::set_error(cudaErrorInvalidValue);
}
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr,
                                           void *value)
{
    if (!pool || !value || (int)attr <= 0 || (int)attr >= 16)
        return tm_emu::set_error(cudaErrorInvalidValue);
    unsigned long long &slot = tm_prog::extra().pool_attrs[(int)attr];
    if (attr == cudaMemPoolAttrReleaseThreshold || attr == cudaMemPoolAttrReservedMemHigh ||
        attr == cudaMemPoolAttrUsedMemHigh)
        slot = *static_cast<unsigned long long *>(value);
    else
        slot = (unsigned long long)*static_cast<int *>(value);
    return cudaSuccess;
}
inline cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr,
                                           void *value)
{
    if (!pool || !value || (int)attr <= 0 || (int)attr >= 16)
        return tm_emu::set_error(cudaErrorInvalidValue);
    const unsigned long long v = tm_prog::extra().pool_attrs[(int)attr];
    if (attr >= cudaMemPoolAttrReleaseThreshold)
        *static_cast<unsigned long long *>(value) = v;
    else
        *static_cast<int *>(value) = (int)v;
    return cudaSuccess;
}
inline cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t)
{
    return pool ? cudaSuccess : tm_emu::set_error(cudaErrorInvalidValue);
}

// ---- unified memory hints: CUDA 13's cudaMemLocation forms, and CUDA 12's device number ----
inline cudaError_t tm_prog_check_range(const void *p, size_t count, const char *what)
{
    TM_PROG_STICKY();
    if (!p || !count) return tm_emu::set_error(cudaErrorInvalidValue);
    uintptr_t start;
    const tm_prog::Alloc *rec;
    const tm_prog::Kind k = tm_prog::classify(p, &start, &rec);
    if (k == tm_prog::HOST) return cudaSuccess;   // pageable memory: HMM systems take it
    if (!rec || (uintptr_t)p + count > start + rec->size) {
        char buf[200];
        snprintf(buf, sizeof buf, "%s: the range is not inside one allocation", what);
        return tm_emu::set_error(cudaErrorInvalidValue, buf);
    }
    return cudaSuccess;
}
inline cudaError_t cudaMemPrefetchAsync(const void *p, size_t count,
                                        struct cudaMemLocation location, unsigned int flags,
                                        cudaStream_t stream = 0)
{
    if (flags || (location.type == cudaMemLocationTypeDevice && location.id != 0))
        return tm_emu::set_error(cudaErrorInvalidValue);
    if (!tm_prog::stream_valid(stream)) return tm_emu::set_error(cudaErrorInvalidResourceHandle);
    return tm_prog_check_range(p, count, "cudaMemPrefetchAsync");
}
inline cudaError_t cudaMemPrefetchAsync(const void *p, size_t count, int device,
                                        cudaStream_t stream = 0)
{
    cudaMemLocation loc;
    loc.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    loc.id = device == cudaCpuDeviceId ? 0 : device;
    return cudaMemPrefetchAsync(p, count, loc, 0, stream);
}
inline cudaError_t cudaMemAdvise(const void *p, size_t count, enum cudaMemoryAdvise advice,
                                 struct cudaMemLocation location)
{
    if ((int)advice < 1 || (int)advice > 6 ||
        (location.type == cudaMemLocationTypeDevice && location.id != 0))
        return tm_emu::set_error(cudaErrorInvalidValue);
    return tm_prog_check_range(p, count, "cudaMemAdvise");
}
inline cudaError_t cudaMemAdvise(const void *p, size_t count, enum cudaMemoryAdvise advice,
                                 int device)
{
    cudaMemLocation loc;
    loc.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    loc.id = device == cudaCpuDeviceId ? 0 : device;
    return cudaMemAdvise(p, count, advice, loc);
}

// ---- occupancy ----
template <typename F, typename S>
inline cudaError_t tm_prog_best_block(int *minGridSize, int *blockSize, F *func, S smem_of,
                                      int limit)
{
    if (!minGridSize || !blockSize) return tm_emu::set_error(cudaErrorInvalidValue);
    if (!func) return tm_emu::set_error(cudaErrorInvalidDeviceFunction);
    int most = 1024;
    if (limit > 0 && limit < most) most = limit;
    int best_threads = 0, best_block = 0, best_blocks = 0;
    for (int b = most; b > 0; b -= (b % 32 ? b % 32 : 32)) {   // down to warp multiples
        int n = 0;
        cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, reinterpret_cast<const void *>(func), b, (size_t)smem_of(b));
        if (e != cudaSuccess) return e;
        if (n * b > best_threads) {
            best_threads = n * b;
            best_block = b;
            best_blocks = n;
        }
    }
    *blockSize = best_block;
    *minGridSize = best_blocks * tm_prog::preset().sms;
    return cudaSuccess;
}
template <typename F>
inline cudaError_t cudaOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, F *func,
                                                      size_t dynamicSMemSize = 0,
                                                      int blockSizeLimit = 0)
{
    return tm_prog_best_block(minGridSize, blockSize, func, [=](int) { return dynamicSMemSize; },
                              blockSizeLimit);
}
template <typename S, typename F>
inline cudaError_t cudaOccupancyMaxPotentialBlockSizeVariableSMem(int *minGridSize, int *blockSize,
                                                                  F *func,
                                                                  S blockSizeToDynamicSMemSize,
                                                                  int blockSizeLimit = 0)
{
    return tm_prog_best_block(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                              blockSizeLimit);
}
template <typename F>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, F *func,
                                                                          int blockSize, size_t dyn,
                                                                          unsigned int)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, reinterpret_cast<const void *>(func),
                                                         blockSize, dyn);
}

// device printf (host printf passes straight through); std::printf too
namespace std {
namespace tm_prog = ::tm_prog;
}
#define printf(...) tm_prog::printf_(__VA_ARGS__)

// ---- check mode: the errors a program never checked, device memory it never freed ----
#ifdef TM_PROG_CHECK
namespace tm_prog {

// What a runtime call returns in check mode: its cudaError_t, which notes whether the program
// looked at it (converted or compared it). A failed call is reported when it happens (as
// compute-sanitizer reports an API error); one whose error the program never looked at, here or
// through cudaGetLastError, is reported again at the program's end.
struct Result {
    cudaError_t err;
    const char *what, *file;
    int line;
    bool clears;   // cudaGetLastError / cudaPeekAtLastError: looking at it checks earlier errors
    mutable bool seen = false;

    Result(cudaError_t e, const char *w, const char *f, int l, bool c = false)
        : err(e), what(w), file(f), line(l), clears(c)
    {
        if (e != cudaSuccess && !clears) {
            const char *d = tm_emu_last_error_detail();
            std::string msg = std::string(what) + " failed with " + cudaGetErrorName(e) + " (" +
                              cudaGetErrorString(e) + ")";
            if (d && *d) msg += ": " + std::string(d);
            check_event("api_error", file, line, msg);
        }
    }
    Result(const Result &o) : err(o.err), what(o.what), file(o.file), line(o.line), clears(o.clears)
    {
        o.seen = true;   // the copy answers for it now
    }
    Result &operator=(const Result &) = delete;
    operator cudaError_t() const
    {
        if (!seen) {
            seen = true;
            if (err != cudaSuccess) looked_at(err, clears);
        }
        return err;
    }
    ~Result()
    {
        if (!seen && err != cudaSuccess && !clears) {
            std::lock_guard<std::recursive_mutex> g(st().mu);
            st().unchecked.push_back({what, file, line, err});
        }
    }
    // The program looked at an error: earlier failures with it (any, for cudaGetLastError) are checked.
    static void looked_at(cudaError_t e, bool all)
    {
        std::lock_guard<std::recursive_mutex> g(st().mu);
        auto &u = st().unchecked;
        for (size_t i = u.size(); i-- > 0;)
            if (all || u[i].err == e) u.erase(u.begin() + (long)i);
    }
    friend bool operator==(const Result &r, cudaError_t e) { return (cudaError_t)r == e; }
    friend bool operator!=(const Result &r, cudaError_t e) { return (cudaError_t)r != e; }
    friend bool operator==(cudaError_t e, const Result &r) { return (cudaError_t)r == e; }
    friend bool operator!=(cudaError_t e, const Result &r) { return (cudaError_t)r != e; }
};

// At the program's end: each failure never checked (once per line), then each device allocation
// never freed, with its line.
inline void check_at_exit()
{
    State &s = st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    std::vector<std::pair<std::string, int>> told;
    for (const auto &u : s.unchecked) {
        const std::pair<std::string, int> where(u.file ? u.file : "", u.line);
        bool again = false;
        for (const auto &t : told)
            again |= t == where;
        if (again) continue;
        told.push_back(where);
        check_event(
            "unchecked", u.file, u.line,
            u.what + " failed with " + cudaGetErrorName(u.err) +
                " and the program never checked "
                "the error" +
                (u.what.compare(0, 10, "the launch") == 0
                     ? " (call cudaGetLastError() after the launch and compare it with cudaSuccess)"
                     : " (compare what it returns with cudaSuccess)"));
    }
    s.unchecked.clear();
    for (const auto &kv : s.device) {
        const Alloc &a = kv.second;
        const std::string name = alloc_name(a.expr);
        check_event("leak", a.file, a.line,
                    std::to_string(a.size) + " bytes of device memory from cudaMalloc" +
                        (name.empty() ? "" : " (" + name + ")") +
                        " were never freed; call cudaFree(" + (name.empty() ? "..." : name) +
                        ") when the program is done with it");
    }
    for (const auto &kv : s.host) {
        if (s.host_kind[kv.first] != MANAGED) continue;
        const Alloc &a = kv.second;
        const std::string name = alloc_name(a.expr);
        check_event("leak", a.file, a.line,
                    std::to_string(a.size) +
                        " bytes of managed memory from cudaMallocManaged were never freed; "
                        "call cudaFree when the program is done with it");
    }
}

}   // namespace tm_prog

#ifndef TM_PROG_NOT_FIRST_FILE   // a program of several files: defined once, in the first
extern "C" __attribute__((visibility("default"), used)) int tm_prog_check_setup(void)
{
    return atexit(tm_prog::check_at_exit);
}
#endif

#define TM_PROG_R(what, ...) tm_prog::Result((__VA_ARGS__), what, __FILE__, __LINE__)
#undef cudaMalloc
#define cudaMalloc(p, size) \
    TM_PROG_R("cudaMalloc", \
              tm_prog::device_malloc(tm_prog::as_void(p), (size), __FILE__, __LINE__, #p))
#undef cudaMallocManaged
#define cudaMallocManaged(p, size, ...)                                                \
    TM_PROG_R("cudaMallocManaged",                                                     \
              tm_prog::host_side_malloc(tm_prog::as_void(p), (size), tm_prog::MANAGED, \
                                        "cudaMallocManaged", __FILE__, __LINE__))
#undef cudaMallocHost
#define cudaMallocHost(p, size)                                                       \
    TM_PROG_R("cudaMallocHost",                                                       \
              tm_prog::host_side_malloc(tm_prog::as_void(p), (size), tm_prog::PINNED, \
                                        "cudaMallocHost", __FILE__, __LINE__))
#undef cudaFree
#define cudaFree(p) TM_PROG_R("cudaFree", tm_prog::device_free((void *)(p)))
#undef cudaFreeHost
#define cudaFreeHost(p) TM_PROG_R("cudaFreeHost", tm_prog::free_host((void *)(p)))
#undef cudaMemcpy
#define cudaMemcpy(d, s, n, k) \
    TM_PROG_R("cudaMemcpy", tm_prog_cudaMemcpy((d), (s), (n), (k), #d, #s))
#undef cudaMemcpyAsync
#define cudaMemcpyAsync(...) TM_PROG_R("cudaMemcpyAsync", tm_prog_cudaMemcpyAsync(__VA_ARGS__))
#undef cudaMemset
#define cudaMemset(...) TM_PROG_R("cudaMemset", tm_prog_cudaMemset(__VA_ARGS__))
#undef cudaDeviceSynchronize
#define cudaDeviceSynchronize() TM_PROG_R("cudaDeviceSynchronize", tm_prog_cudaDeviceSynchronize())
#undef cudaGetLastError
#define cudaGetLastError() \
    tm_prog::Result(tm_prog_cudaGetLastError(), "cudaGetLastError", __FILE__, __LINE__, true)
#undef cudaPeekAtLastError
#define cudaPeekAtLastError() \
    tm_prog::Result(tm_prog_cudaPeekAtLastError(), "cudaPeekAtLastError", __FILE__, __LINE__, true)
#undef cudaMemcpyToSymbol
#define cudaMemcpyToSymbol(...) \
    TM_PROG_R("cudaMemcpyToSymbol", tm_prog_cudaMemcpyToSymbol(__VA_ARGS__))
#undef cudaMemcpyFromSymbol
#define cudaMemcpyFromSymbol(...) \
    TM_PROG_R("cudaMemcpyFromSymbol", tm_prog_cudaMemcpyFromSymbol(__VA_ARGS__))
#define cudaEventCreate(...) TM_PROG_R("cudaEventCreate", ::cudaEventCreate(__VA_ARGS__))
#define cudaEventElapsedTime(...) \
    TM_PROG_R("cudaEventElapsedTime", ::cudaEventElapsedTime(__VA_ARGS__))
#define cudaSetDevice(...) TM_PROG_R("cudaSetDevice", ::cudaSetDevice(__VA_ARGS__))

// device printf of a checked element (printf("%f", C[i])): its value
namespace tm_prog {
template <typename X>
inline decltype(auto) plain_arg(const X &x)
{
    return tm_sh_value(x);
}
template <typename T>
inline T *plain_arg(const tm_checked_ptr<T> &p)
{
    return static_cast<T *>(p);
}
inline cudaError_t plain_arg(const Result &r)
{
    return r;
}   // printf("%d", cudaGetLastError())
template <typename... A>
inline int printf_checked(const char *fmt, const A &...a)
{
    return printf_(fmt, plain_arg(a)...);
}
}   // namespace tm_prog
#undef printf
#define printf(...) tm_prog::printf_checked(__VA_ARGS__)
#endif
