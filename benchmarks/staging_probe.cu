// staging_probe.cu: how fast can pageable (NumPy-like) host memory reach the device through
// tiledmm's pinned staging ring, and with which settings? Times the SAME pipeline code that
// csrc/staging.c ships (csrc/staging_pipeline.h) over a grid of settings, beside pinned and
// pageable cudaMemcpy and raw host memcpy bandwidth. Needs a GPU; no Python; under 60 s.
//
// Build and run, from the repository root:
//   nvcc -O3 -std=c++17 -Xcompiler -fopenmp -lgomp -o /tmp/staging_probe benchmarks/staging_probe.cu && /tmp/staging_probe
//
// GPU timings: CUDA events on the legacy default stream, median of 10 after 3 warm-ups.
// Host-only timings: steady_clock, same counts.
#include <cuda_runtime.h>

#include "../csrc/staging_pipeline.h"
#include "probe_common.h"

#include <gnu/libc-version.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static const double BUDGET_S = 50.0; // grid variants past this are skipped (total must stay < 60 s)
static const auto T0 = std::chrono::steady_clock::now();
static int failures = 0;

static double elapsed_s()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - T0).count();
}

struct Variant {
    int kind;            // TM_COPY_LIBC or TM_COPY_LIBC_PIECES
    size_t first, chunk; // first == chunk: fixed chunks
    int ring, threads;
    bool one;            // one pipeline for both arrays, else one pipeline per array
    double pct64 = -1, pct256 = -1, gb64 = 0, gb256 = 0;
    bool ok = true, run = false;

    std::string name() const
    {
        char b[128];
        char sched[48];
        if (first == chunk) std::snprintf(sched, sizeof sched, "fixed %zuM", chunk / MiB);
        else std::snprintf(sched, sizeof sched, "ramp %zu-%zuM", first / MiB, chunk / MiB);
        std::snprintf(b, sizeof b, "%-6s %-11s ring %d thr %2d %-9s", kind == TM_COPY_LIBC ? "libc" : "pieces",
                      sched, ring, threads, one ? "one" : "per-array");
        return b;
    }
    bool is_current() const // what csrc/staging.c did before issue 8
    {
        return kind == TM_COPY_LIBC && first == 8 * MiB && chunk == 8 * MiB && ring == 3 &&
               threads == 16 && !one;
    }
    double score() const { return std::min(pct64, pct256); }
};

int main()
{
    const int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    char thp[128] = "?";
    if (FILE *f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r")) {
        if (!std::fgets(thp, sizeof thp, f)) std::strcpy(thp, "?");
        std::fclose(f);
        thp[std::strcspn(thp, "\n")] = 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    std::printf("staging_probe: %s | %d CPUs online, omp_get_max_threads %d | AVX2 %s (streaming "
                "stores use %s) | glibc %s | THP %s\n",
                prop.name, ncpu, omp_get_max_threads(), tm_stream_uses_avx2() ? "yes" : "no",
#ifdef TM_STREAM_STORES
                tm_stream_uses_avx2() ? "AVX2" : "SSE2",
#else
                "memcpy (not x86-64)",
#endif
                gnu_get_libc_version(), thp);
    std::printf("GPU times: CUDA events, median of %d after %d warm-ups; host times: steady_clock, same.\n\n",
                REPEAT, WARMUP);

    const size_t big = 256 * MiB;
    void *dA, *dB, *hpin;
    CK(cudaMalloc(&dA, big + 4096));
    CK(cudaMalloc(&dB, big + 4096));
    CK(cudaHostAlloc(&hpin, big + 4096, cudaHostAllocDefault));
    std::memset(hpin, 1, big + 4096);
    char *pa = pageable(big + 4096, 1), *pb = pageable(big + 4096, 2);
    // Ring buffers for every variant: 4 of the largest chunk tried (32 MiB).
    const size_t ring_bytes = 32 * MiB;
    void *ring[TM_STAGING_RING_MAX];
    cudaEvent_t done[TM_STAGING_RING_MAX];
    for (int i = 0; i < 4; ++i) {
        CK(cudaHostAlloc(&ring[i], ring_bytes, cudaHostAllocDefault));
        std::memset(ring[i], 0, ring_bytes);
        CK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    }

    // ---- 1. references: pinned and pageable cudaMemcpy, one array
    std::printf("== 1. cudaMemcpy host to device of ONE array (reference)\n");
    double pinned_gbps[3];
    const size_t ref_sizes[3] = {16 * MiB, 64 * MiB, 256 * MiB};
    for (int i = 0; i < 3; ++i) {
        const size_t n = ref_sizes[i];
        const double ms = gpu_ms([&] { CK(cudaMemcpy(dA, hpin, n, cudaMemcpyHostToDevice)); });
        pinned_gbps[i] = gbps(n, ms);
        std::printf("pinned   cudaMemcpy H2D %4zu MiB: %7.3f ms %6.1f GB/s\n", n / MiB, ms, pinned_gbps[i]);
    }
    for (int i = 1; i < 3; ++i) {
        const size_t n = ref_sizes[i];
        const double ms = gpu_ms([&] { CK(cudaMemcpy(dA, pa, n, cudaMemcpyHostToDevice)); });
        std::printf("pageable cudaMemcpy H2D %4zu MiB (no staging): %7.3f ms %6.1f GB/s = %3.0f%% of pinned\n",
                    n / MiB, ms, gbps(n, ms), 100 * gbps(n, ms) / pinned_gbps[i]);
    }
    {
        const double ms = gpu_ms([&] { CK(cudaMemcpy(hpin, dA, big, cudaMemcpyDeviceToHost)); });
        std::printf("pinned   cudaMemcpy D2H  256 MiB: %7.3f ms %6.1f GB/s\n", ms, gbps(big, ms));
    }

    // ---- 2. raw host memcpy, pageable source -> pinned destination, no GPU copy
    std::printf("\n== 2. host memcpy only, 256 MiB pageable -> pinned, no GPU copy (GB/s of bytes copied)\n");
    std::printf("   'ring': 8 MiB chunks into 3 pinned 8 MiB buffers in turn, one parallel copy per chunk (as staging)\n");
    std::printf("   'flat': one parallel copy into a 256 MiB pinned buffer\n");
    {
        const int kinds[4] = {TM_COPY_LIBC, TM_COPY_LIBC_PIECES, TM_COPY_STREAM_SSE2, TM_COPY_STREAM};
        const char *kind_names[4] = {"libc memcpy", "libc pieces", "stream SSE2", "stream AVX2"};
        const int threads[3] = {1, 8, 16};
        for (int k = 0; k < 4; ++k) {
            if (kinds[k] == TM_COPY_STREAM && !tm_stream_uses_avx2()) continue;
            for (int t : threads) {
                const double ring_ms = host_ms([&] {
                    for (size_t off = 0, c = 0; off < big; off += 8 * MiB, ++c)
                        tm_parallel_copy(ring[c % 3], pa + off, 8 * MiB, t, kinds[k]);
                });
                const double flat_ms = host_ms([&] { tm_parallel_copy(hpin, pa, big, t, kinds[k]); });
                std::printf("host memcpy %-11s %2d threads: ring %6.1f GB/s   flat %6.1f GB/s\n",
                            kind_names[k], t, gbps(big, ring_ms), gbps(big, flat_ms));
            }
        }
        // Correctness of the copy kinds at odd lengths and alignments (host only).
        for (int k = 0; k < 4; ++k)
            for (size_t len : {(size_t)4095, (size_t)4096 + 1, (size_t)1000003, 3 * MiB + 17})
                for (size_t so : {0, 1, 16})
                    for (size_t dof : {0, 8, 63}) {
                        char *dst = (char *)hpin + dof;
                        std::memset(hpin, 0, len + 128);
                        tm_parallel_copy(dst, pa + so, len, 16, kinds[k]);
                        bool bad = std::memcmp(dst, pa + so, len) != 0;
                        for (size_t i = 0; i < dof; ++i) bad |= ((char *)hpin)[i] != 0;
                        for (size_t i = 0; i < 64; ++i) bad |= dst[len + i] != 0;
                        if (bad) {
                            ++failures;
                            std::printf("!!!!!!!! FAIL: host copy %s, %zu bytes, src+%zu, dst+%zu\n",
                                        kind_names[k], len, so, dof);
                        }
                    }
    }

    // ---- 3. staged H2D grid
    // Chunk schedules {first chunk, steady chunk}: fixed where the two are equal, else ramped.
    const size_t schedules[7][2] = {{4 * MiB, 4 * MiB},  {8 * MiB, 8 * MiB}, {16 * MiB, 16 * MiB},
                                    {32 * MiB, 32 * MiB}, {1 * MiB, 8 * MiB}, {1 * MiB, 16 * MiB},
                                    {4 * MiB, 16 * MiB}};
    std::vector<Variant> grid;
    // Priority order (the budget cuts the tail): ring 3 / 16 threads first, then the others.
    const int ring_thr[4][2] = {{3, 16}, {3, 8}, {4, 16}, {4, 8}};
    for (auto &rt : ring_thr)
        for (int kind : {TM_COPY_LIBC, TM_COPY_LIBC_PIECES})
            for (bool one : {false, true}) {
                for (auto &sc : schedules) grid.push_back(Variant{kind, sc[0], sc[1], rt[0], rt[1], one});
            }

    std::printf("\n== 3. staged H2D of TWO pageable arrays A then B (as timing.h2d_ms of vec_add: events around both)\n");
    std::printf("   copy: libc = memcpy into the staging buffers, one share per thread; pieces = memcpy in 256 KiB pieces taken in turn\n");
    std::printf("   chunks: fixed N = every chunk N MiB; ramp F-N = F, 2F, 4F .. then N MiB chunks (buffers of N MiB)\n");
    std::printf("   ring = staging buffers (chunks in flight), thr = memcpy threads per chunk\n");
    std::printf("   one = A and B through one pipeline (fills and drains once); per-array = a pipeline each\n");
    std::printf("   %% = 2*bytes/ms of the pair over pinned cudaMemcpy GB/s of one array of that size (above)\n");
    auto run_variant = [&](const Variant &v, const tm_staging_item *items) {
        tm_staging_plan plan = {v.first, v.chunk, v.ring, v.threads, v.kind};
        if (v.one) {
            CK(tm_staged_pipeline(&plan, ring, done, items, 2, 1, 0));
        } else {
            CK(tm_staged_pipeline(&plan, ring, done, items, 1, 1, 0));
            CK(tm_staged_pipeline(&plan, ring, done, items + 1, 1, 1, 0));
        }
    };
    int skipped = 0;
    for (Variant &v : grid) {
        if (elapsed_s() > BUDGET_S) {
            ++skipped;
            continue;
        }
        // Correctness once: odd lengths, misaligned sources, nothing written past the end.
        {
            const size_t na = 21 * MiB + 4093, nb = 9 * MiB + 7;
            const tm_staging_item items[2] = {{dA, pa + 1, na}, {dB, pb + 16, nb}};
            CK(cudaMemset(dA, 0, na + 4096));
            CK(cudaMemset(dB, 0, nb + 4096));
            run_variant(v, items);
            for (int k = 0; k < 2; ++k) {
                CK(cudaMemcpy(hpin, items[k].dst, items[k].bytes + 4096, cudaMemcpyDeviceToHost));
                bool bad = std::memcmp(hpin, items[k].src, items[k].bytes) != 0;
                for (size_t i = 0; i < 4096; ++i) bad |= ((char *)hpin)[items[k].bytes + i] != 0;
                if (bad) {
                    v.ok = false;
                    ++failures;
                    std::printf("!!!!!!!! FAIL: %s: array %c differs on the device\n", v.name().c_str(), "AB"[k]);
                }
            }
        }
        for (int s = 0; s < 2; ++s) {
            const size_t n = s ? 256 * MiB : 64 * MiB;
            const tm_staging_item items[2] = {{dA, pa, n}, {dB, pb, n}};
            const double ms = gpu_ms([&] { run_variant(v, items); });
            const double g = gbps(2 * n, ms), pct = 100 * g / pinned_gbps[s + 1];
            (s ? v.gb256 : v.gb64) = g;
            (s ? v.pct256 : v.pct64) = pct;
        }
        v.run = true;
        std::printf("staged H2D %s: 2x64 MiB %6.1f GB/s %3.0f%% | 2x256 MiB %6.1f GB/s %3.0f%%%s\n",
                    v.name().c_str(), v.gb64, v.pct64, v.gb256, v.pct256, v.ok ? "" : "  FAIL");
    }
    if (skipped) std::printf("(%d variants skipped: time budget of %.0f s reached)\n", skipped, BUDGET_S);

    // ---- 3b. the best variant in the conditions of a tiledmm call, which the grid's back-to-back
    // repeats do not have: memcpy threads idle (asleep) since the last call, device buffers
    // cudaMalloc'd afresh, the previous call's output copied back into pinned memory.
    {
        const Variant *best = nullptr;
        for (const Variant &v : grid)
            if (v.run && v.ok && (!best || v.score() > best->score())) best = &v;
        void *fa = nullptr, *fb = nullptr;
        struct Cond { const char *what; bool idle, fresh, d2h; };
        const Cond conds[4] = {{"back to back (as the grid)", false, false, false},
                               {"threads idle 20 ms before", true, false, false},
                               {"fresh cudaMalloc'd destinations", false, true, false},
                               {"idle + fresh + 64 MiB D2H before", true, true, true}};
        std::printf("\n== 3b. the best variant (%s) in a call's conditions (%% as above)\n",
                    best ? best->name().c_str() : "none");
        for (const Cond &c : conds) {
            if (!best || elapsed_s() > BUDGET_S + 4) break;
            double pct[2];
            for (int s = 0; s < 2; ++s) {
                const size_t n = s ? 256 * MiB : 64 * MiB;
                tm_staging_item items[2] = {{dA, pa, n}, {dB, pb, n}};
                const double ms = gpu_ms([&] { run_variant(*best, items); },
                                         [&] {
                                             if (c.d2h) CK(cudaMemcpy(hpin, dA, 64 * MiB, cudaMemcpyDeviceToHost));
                                             if (c.fresh) {
                                                 if (fa) CK(cudaFree(fa));
                                                 if (fb) CK(cudaFree(fb));
                                                 CK(cudaMalloc(&fa, n));
                                                 CK(cudaMalloc(&fb, n));
                                                 items[0].dst = fa;
                                                 items[1].dst = fb;
                                             }
                                             if (c.idle) usleep(20000);
                                         });
                pct[s] = 100 * gbps(2 * n, ms) / pinned_gbps[s + 1];
            }
            std::printf("best variant, %-34s: 2x64 MiB %3.0f%% | 2x256 MiB %3.0f%%\n", c.what, pct[0], pct[1]);
        }
        if (fa) CK(cudaFree(fa));
        if (fb) CK(cudaFree(fb));
    }

    // ---- 4. the device-to-host path (pageable destinations, e.g. output= arrays): correct?
    {
        const tm_staging_plan plan = {16 * MiB, 16 * MiB, 4, 16, TM_COPY_LIBC};
        const size_t n = 37 * MiB + 3;
        CK(cudaMemcpy(dA, pa, n, cudaMemcpyHostToDevice));
        char *out = pageable(n + 4096 + 64, 3);
        std::memset(out, 0, n + 4096 + 64);
        const tm_staging_item item = {out + 3, dA, n};
        CK(tm_staged_pipeline(&plan, ring, done, &item, 1, 0, 0));
        bool bad = std::memcmp(out + 3, pa, n) != 0;
        for (size_t i = 0; i < 64; ++i) bad |= (i < 3 && out[i] != 0) || out[3 + n + i] != 0;
        const tm_staging_item big_item = {pb, dA, big};
        const double ms = gpu_ms([&] { CK(tm_staged_pipeline(&plan, ring, done, &big_item, 1, 0, 0)); });
        std::printf("\n== 4. staged D2H into pageable memory (fixed 16M, ring 4, 16 thr): 256 MiB %6.1f GB/s; "
                    "correctness at 37 MiB+3, dst+3: %s\n", gbps(big, ms), bad ? "FAIL" : "ok");
        if (bad) {
            ++failures;
            std::printf("!!!!!!!! FAIL: staged device-to-host copy differs\n");
        }
        std::free(out);
    }

    // ---- 5. summary table
    std::vector<const Variant *> ran;
    for (const Variant &v : grid)
        if (v.run && v.ok) ran.push_back(&v);
    std::vector<const Variant *> by_score = ran;
    std::sort(by_score.begin(), by_score.end(),
              [](const Variant *a, const Variant *b) { return a->score() > b->score(); });
    std::printf("\n== SUMMARY (pinned H2D: 64 MiB %.1f GB/s, 256 MiB %.1f GB/s; target >= 80%% at both)\n",
                pinned_gbps[1], pinned_gbps[2]);
    std::printf("staged H2D of 2 arrays, the best 15 (of %zu run) and the setting before issue 8; score = the "
                "lower %% of the two sizes; * = best 3\n", by_score.size());
    std::printf("    # %-45s %8s %8s %6s\n", "copy   chunks      ring thr  pipeline", "2x64MiB", "2x256MiB", "score");
    for (size_t i = 0; i < by_score.size(); ++i) {
        const Variant &v = *by_score[i];
        if (i >= 15 && !v.is_current()) continue;
        std::printf("%s%3zu %-45s %7.0f%% %7.0f%% %5.0f%%%s\n", i < 3 ? "*" : " ", i + 1, v.name().c_str(), v.pct64,
                    v.pct256, v.score(), v.is_current() ? "  <- before issue 8" : "");
    }
    // Best score per level of each factor: which constant in csrc/staging.c matters, and its value.
    auto best_where = [&](const char *label, auto pred) {
        const Variant *b = nullptr;
        for (const Variant *v : ran)
            if (pred(*v) && (!b || v->score() > b->score())) b = v;
        if (b) std::printf("  best with %-16s %4.0f%%  (%s)\n", label, b->score(), b->name().c_str());
    };
    std::printf("best score per setting:\n");
    best_where("copy libc", [](const Variant &v) { return v.kind == TM_COPY_LIBC; });
    best_where("copy pieces", [](const Variant &v) { return v.kind == TM_COPY_LIBC_PIECES; });
    for (auto &sc : schedules) {
        const std::string label = sc[0] == sc[1] ? "fixed " + std::to_string(sc[1] / MiB) + "M"
                                                 : "ramp " + std::to_string(sc[0] / MiB) + "-" +
                                                       std::to_string(sc[1] / MiB) + "M";
        const size_t first = sc[0], chunk = sc[1];
        best_where(label.c_str(), [first, chunk](const Variant &v) { return v.first == first && v.chunk == chunk; });
    }
    best_where("ring 3", [](const Variant &v) { return v.ring == 3; });
    best_where("ring 4", [](const Variant &v) { return v.ring == 4; });
    best_where("threads 8", [](const Variant &v) { return v.threads == 8; });
    best_where("threads 16", [](const Variant &v) { return v.threads == 16; });
    best_where("per-array", [](const Variant &v) { return !v.one; });
    best_where("one pipeline", [](const Variant &v) { return v.one; });
    if (!by_score.empty()) {
        const Variant &b = *by_score[0];
        std::printf("csrc/staging.c from the best row: STAGING_COPY_KIND %s, STAGING_FIRST_CHUNK_BYTES %zu MiB, "
                    "STAGING_CHUNK_BYTES %zu MiB, STAGING_RING %d, STAGING_THREADS %d (%s pipeline)\n",
                    b.kind == TM_COPY_LIBC ? "TM_COPY_LIBC" : "TM_COPY_LIBC_PIECES", b.first / MiB, b.chunk / MiB,
                    b.ring, b.threads, b.one ? "one" : "per-array");
    }
    std::printf("%s; %.1f s\n", failures ? "!!!!!!!! SOME CHECKS FAILED (see FAIL lines)" : "all correctness checks passed",
                elapsed_s());

    for (int i = 0; i < 4; ++i) {
        cudaEventDestroy(done[i]);
        cudaFreeHost(ring[i]);
    }
    cudaFreeHost(hpin);
    cudaFree(dA);
    cudaFree(dB);
    std::free(pa);
    std::free(pb);
    return failures ? 1 : 0;
}
