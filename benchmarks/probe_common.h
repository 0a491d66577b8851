// probe_common.h: what the standalone CUDA probes in benchmarks/ share: the error check (a probe
// has no cleanup to do: it reports the failing call and exits), medians of CUDA-event and host
// timings after warm-up, and NumPy-like pageable memory.
#pragma once
#include <cuda_runtime.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                \
                         cudaGetErrorString(e_));                                             \
            std::exit(1);                                                                     \
        }                                                                                     \
    } while (0)

static const size_t MiB = (size_t)1 << 20;
static const int WARMUP = 3, REPEAT = 10;

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median ms of f() with CUDA events around it on stream 0 (as tiledmm's timing.h2d_ms), after
// WARMUP untimed runs; before() runs before each, untimed.
template <typename F, typename G> static double gpu_ms(F f, G before)
{
    static cudaEvent_t start = nullptr, stop = nullptr;
    if (!start) {
        CK(cudaEventCreate(&start));
        CK(cudaEventCreate(&stop));
    }
    std::vector<double> ms;
    for (int i = 0; i < WARMUP + REPEAT; ++i) {
        before();
        CK(cudaEventRecord(start, 0));
        f();
        CK(cudaEventRecord(stop, 0));
        CK(cudaEventSynchronize(stop));
        float t = 0;
        CK(cudaEventElapsedTime(&t, start, stop));
        if (i >= WARMUP) ms.push_back(t);
    }
    return median(ms);
}
template <typename F> static double gpu_ms(F f) { return gpu_ms(f, [] {}); }

// Milliseconds on the host's steady clock since an arbitrary origin.
static double now_ms()
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Median ms of f() by the host clock, after WARMUP untimed runs.
template <typename F> static double host_ms(F f)
{
    std::vector<double> ms;
    for (int i = 0; i < WARMUP + REPEAT; ++i) {
        const double a = now_ms();
        f();
        ms.push_back(now_ms() - a);
    }
    ms.erase(ms.begin(), ms.begin() + WARMUP);
    return median(ms);
}

static double gbps(size_t bytes, double ms) { return bytes / (ms * 1e6); }

// Pageable memory as NumPy has it: malloc'd (16-byte aligned, not page aligned), huge pages
// advised as NumPy does for large arrays, every page touched (filled) before timing.
static char *pageable(size_t bytes, unsigned seed)
{
    char *p = (char *)std::malloc(bytes);
    if (!p) {
        std::fprintf(stderr, "malloc of %zu bytes failed\n", bytes);
        std::exit(1);
    }
    const uintptr_t lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    const uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)4095;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)(bytes / 8); ++i) {
        uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;
        x ^= x >> 29;
        x *= 0xBF58476D1CE4E5B9ull;
        std::memcpy(p + 8 * i, &x, 8);
    }
    for (size_t i = bytes / 8 * 8; i < bytes; ++i) p[i] = (char)(i * 7 + seed);
    return p;
}
