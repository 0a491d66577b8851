// register_probe.cu: does registering (pinning in place) a NumPy-like pageable array pay, against
// tiledmm's staging ring? Times cudaHostRegister / cudaHostUnregister of page-aligned ranges of
// malloc'd, touched memory, the copies from the registered range, pinned cudaMemcpy, and the
// staging pipeline that ships (csrc/staging_pipeline.h, the setting in csrc/staging.c).
//
//   nvcc -O3 -std=c++17 -Xcompiler -fopenmp -lgomp -o /tmp/register_probe benchmarks/register_probe.cu && /tmp/register_probe
//
// GPU times: CUDA events, median of 10 after 3 warm-ups (probe_common.h); registration times:
// steady_clock, median of 6 cycles.
#include <cuda_runtime.h>

#include "../csrc/staging_pipeline.h"
#include "probe_common.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// The page-aligned range around [p, p + n): what cudaHostRegister pins.
static void page_range(const void *p, size_t n, void **base, size_t *len)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = ((uintptr_t)p + n + page - 1) & ~(page - 1);
    *base = (void *)lo;
    *len = hi - lo;
}

int main()
{
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaFree(0));
    std::printf("register_probe: %s\n", prop.name);
    void *ring[4];
    cudaEvent_t done[4];
    for (int i = 0; i < 4; ++i) {
        CK(cudaHostAlloc(&ring[i], 8 * MiB, cudaHostAllocDefault));
        std::memset(ring[i], 0, 8 * MiB);
        CK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    }
    const tm_staging_plan plan = {1 * MiB, 8 * MiB, 4, 8, TM_COPY_LIBC_PIECES};
    // Warm the link both ways.
    {
        void *d, *h;
        CK(cudaMalloc(&d, 256 * MiB));
        CK(cudaHostAlloc(&h, 256 * MiB, 0));
        for (int i = 0; i < 3; ++i) {
            CK(cudaMemcpy(d, h, 256 * MiB, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(h, d, 256 * MiB, cudaMemcpyDeviceToHost));
        }
        CK(cudaFree(d));
        CK(cudaFreeHost(h));
    }
    std::printf("%6s | %9s %9s %9s | %9s %9s %9s | %7s %7s %7s | %s\n", "MiB", "pin GB/s", "reg GB/s",
                "stage GB/s", "reg ms", "unreg ms", "1st cyc", "reg %", "stage %", "cycle %", "data");
    for (size_t mib : {16, 64, 256, 1024}) {
        const size_t n = mib * MiB;
        void *d, *hpin;
        CK(cudaMalloc(&d, n));
        CK(cudaHostAlloc(&hpin, n, 0));
        std::memset(hpin, 3, n);
        char *src = pageable(n, 1);
        const double pin = gpu_ms([&] { CK(cudaMemcpy(d, hpin, n, cudaMemcpyHostToDevice)); });
        const tm_staging_item item = {d, src, n};
        const double staged = gpu_ms([&] { CK(tm_staged_pipeline(&plan, ring, done, &item, 1, 1, 0)); });
        void *base;
        size_t len;
        page_range(src, n, &base, &len);
        // First registration of fresh pages, then repeated register / unregister cycles.
        double t = now_ms();
        CK(cudaHostRegister(base, len, cudaHostRegisterDefault));
        const double first_reg = now_ms() - t;
        const double reg = gpu_ms([&] { CK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice)); });
        // The data must be the registered range's own (no stale pages).
        char *back = (char *)std::malloc(n);
        CK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
        const bool same = std::memcmp(back, src, n) == 0;
        std::free(back);
        t = now_ms();
        CK(cudaHostUnregister(base));
        const double first_unreg = now_ms() - t;
        std::vector<double> regs, unregs, cycles;
        for (int i = 0; i < 6; ++i) {
            const double a = now_ms();
            CK(cudaHostRegister(base, len, cudaHostRegisterDefault));
            const double b = now_ms();
            CK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
            const double c = now_ms();
            CK(cudaHostUnregister(base));
            const double e = now_ms();
            regs.push_back(b - a);
            unregs.push_back(e - c);
            cycles.push_back(e - a);
        }
        const double cyc = median(cycles);
        std::printf("%6zu | %9.1f %9.1f %9.1f | %9.3f %9.3f %9.3f | %6.0f%% %6.0f%% %6.0f%% | %s\n", mib,
                    n / (pin * 1e6), n / (reg * 1e6), n / (staged * 1e6), median(regs), median(unregs),
                    first_reg + first_unreg, 100 * pin / reg, 100 * pin / staged, 100 * pin / cyc,
                    same ? "ok" : "WRONG");
        std::printf("        (first registration of the fresh range: %.3f ms, unregister %.3f ms; cycle = "
                    "register + copy + unregister, host clock, median %.3f ms)\n",
                    first_reg, first_unreg, cyc);
        std::free(src);
        CK(cudaFree(d));
        CK(cudaFreeHost(hpin));
    }

    // Copies that cross the edge of a registered range: which does the driver accept, and are
    // the bytes right? (tiledmm registers whole pages; csrc/staging.c relies on the answers.)
    {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = 16;
        char *buf = (char *)std::aligned_alloc(page, pages * page);
        for (size_t i = 0; i < pages * page; ++i) buf[i] = (char)(i * 131 + 7);
        void *d;
        CK(cudaMalloc(&d, pages * page));
        CK(cudaHostRegister(buf + 4 * page, 8 * page, cudaHostRegisterDefault)); // pages 4..11
        struct Case { const char *what; size_t first_page, n_pages; };
        const Case cases[3] = {{"starts before the registered pages, ends inside", 2, 4},
                               {"starts inside, runs past their end", 10, 4},
                               {"wholly inside", 5, 4}};
        for (const Case &c : cases) {
            char *from = buf + c.first_page * page + 8; // not page aligned, as NumPy data
            const size_t n = c.n_pages * page - 16;
            CK(cudaMemset(d, 0, n));
            const cudaError_t e = cudaMemcpy(d, from, n, cudaMemcpyHostToDevice);
            (void)cudaGetLastError();
            std::vector<char> back(n);
            CK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
            std::printf("copy across a registration edge, %-50s: %s%s\n", c.what, cudaGetErrorString(e),
                        e == cudaSuccess ? (std::memcmp(back.data(), from, n) ? ", bytes WRONG" : ", bytes ok") : "");
        }
        CK(cudaHostUnregister(buf + 4 * page));
        CK(cudaFree(d));
        std::free(buf);
    }
    return 0;
}
