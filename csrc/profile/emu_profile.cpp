// emu_profile.cpp: profile mode of the CPU emulator. Linked only into tiledmm._emu_profile, a
// second build of the emulator whose kernel objects (cuda/*.cu) are compiled with g++'s
// -fsanitize=thread instrumentation. GCC then calls __tsan_read4(addr), __tsan_write8(addr), ...
// before every load and store the kernel code makes to memory that is not a private local;
// this file implements those hooks (libtsan is not linked) and counts what Nsight Compute
// counts on a GPU:
//
//   global  an address inside an emulator allocation (cudaMalloc, or a range registered by
//           tm_profile_add_range): requests and 32-byte sectors, per warp instruction;
//   shared  the block's static __shared__ arrays (the kernels' `static thread_local` storage,
//           which is this module's TLS block) or its dynamic shared memory: requests, and
//           wavefronts / bank conflicts over 32 banks of 4 bytes.
//   other   kernel arguments, stacks, the emulator's own thread state: not counted.
//
// Warp semantics. Lanes are threads 32w..32w+31 of the block in x-major (linear) order. Each
// thread's accesses between two barriers are logged per class (global load, global store,
// shared load, shared store, atomic, barrier, warp operation); the k-th entry of each lane of a
// class forms the warp's k-th instruction of that class. When the barrier opens (the block's
// epoch changes, csrc/emu/scheduler.cpp) or the launch ends, the logs are folded into counts.
// This is exact wherever the lanes of a warp execute the same sequence of accesses; where they
// diverge, lanes that skip an access shift their later accesses of that class by one (counted
// as if they had reached the same instruction).
//
// Barriers, warp operations and the launch itself are seen by wrapping the emulator's entry
// points at link time (ld --wrap, see setup.py): the kernels call __wrap_X, which logs and calls
// the real X. The kernel sources are unchanged.
//
// Sampling: tm_profile_begin(stride) with stride > 1 runs only about one block in `stride` of
// each launch (chosen by a hash of the block index; the others return at once) and scales the
// counts by blocks / blocks run. The output of such a run is not the kernel's output.
#include "emu/cuda_emu.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#define TM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

enum Cls { GLD, GST, SLD, SST, GATOM, SATOM, BAR, WOP, NCLS };

// The counters, in this order (tm_profile_fields names them).
#define TM_PROFILE_FIELDS(X)                                                                   \
    X(launches) X(blocks) X(blocks_profiled) X(threads_profiled) X(warps_profiled)             \
    X(global_load_requests) X(global_load_sectors) X(global_load_bytes)                        \
    X(global_load_sectors_block_merged) X(global_load_lines) X(global_store_lines)             \
    X(global_store_requests) X(global_store_sectors) X(global_store_bytes)                     \
    X(shared_load_requests) X(shared_load_wavefronts) X(shared_load_bank_conflicts)            \
    X(shared_store_requests) X(shared_store_wavefronts) X(shared_store_bank_conflicts)         \
    X(global_atomic_requests) X(global_atomics) X(global_atomic_max_same_address)              \
    X(shared_atomic_requests) X(shared_atomics) X(barriers) X(warp_ops)

enum Field {
#define TM_ENUM(name) F_##name,
    TM_PROFILE_FIELDS(TM_ENUM)
#undef TM_ENUM
    NFIELDS
};
const char kFieldNames[] =
#define TM_NAME(name) #name ","
    TM_PROFILE_FIELDS(TM_NAME)
#undef TM_NAME
    ;

struct Log {
    std::vector<uint64_t> v[NCLS];   // address | log2(size) << 56
};

struct Range {
    uintptr_t lo, size;
};

// Launch-wide state: written by the launching thread before the blocks run, read-only while
// they run (the OpenMP fork and join order it).
std::mutex g_mu;                                // allocations, states, totals
std::map<uintptr_t, size_t> g_allocs;           // cudaMalloc'd and registered ranges
std::vector<Range> g_ranges;                    // snapshot for the running launch
std::atomic<int> g_active{0};                   // a profiled launch is running
bool g_enabled = false;                         // between tm_profile_begin and _end
long long g_stride = 1;                         // sampling: about 1 block in g_stride
int g_sms = 0;                                  // SM count launchers see (0: the emulator's)
size_t g_dyn_bytes = 0;                         // the launch's dynamic shared memory
unsigned long long g_seed = 0;
double g_totals[NFIELDS];

struct TState;
std::vector<TState *> g_states;

// The kernels' static __shared__ arrays are `static thread_local`: this module's TLS block.
struct TlsInfo {
    size_t modid = 0, memsz = 0;
    bool found = false;
};
TlsInfo g_tls;
std::once_flag g_tls_once;

int find_tls(struct dl_phdr_info *info, size_t, void *)
{
    uintptr_t self = (uintptr_t)&find_tls;
    bool mine = false;
    size_t memsz = 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
        if (ph.p_type == PT_LOAD && self >= lo && self < lo + ph.p_memsz) mine = true;
        if (ph.p_type == PT_TLS) memsz = ph.p_memsz;
    }
    if (!mine) return 0;
    g_tls.modid = info->dlpi_tls_modid;
    g_tls.memsz = memsz;
    g_tls.found = memsz != 0;
    return 1;
}

struct tls_index_t {
    unsigned long module, offset;
};
extern "C" void *__tls_get_addr(tls_index_t *);

struct TState {
    unsigned long long epoch = 0;
    int nthreads = 0;                 // of the block whose logs are pending
    uintptr_t tls_lo = 0, tls_size = 0;
    uintptr_t emu_tls_lo = 0;
    uintptr_t dyn_lo = 0;
    std::vector<Log> logs;
    bool pending = false;
    uint64_t c[NFIELDS] = {};         // this launch's counts (folded by the launching thread)
    std::unordered_map<uintptr_t, uint64_t> atom;   // global atomics per address
    std::vector<uint64_t> merge_buf;
    TState()
    {
        std::call_once(g_tls_once, [] { dl_iterate_phdr(find_tls, nullptr); });
        if (g_tls.found) {
            tls_index_t ti{g_tls.modid, 0};
            tls_lo = (uintptr_t)__tls_get_addr(&ti);
            tls_size = g_tls.memsz;
        }
        emu_tls_lo = (uintptr_t)&tm_emu_tls;
        std::lock_guard<std::mutex> g(g_mu);
        g_states.push_back(this);
    }
    ~TState()
    {
        std::lock_guard<std::mutex> g(g_mu);
        g_states.erase(std::remove(g_states.begin(), g_states.end(), this), g_states.end());
    }
    void new_interval(unsigned long long ep);
    void flush();
};

thread_local TState *tl_state = nullptr;
thread_local std::unique_ptr<TState> tl_owner;

TState *state_slow()
{
    tl_owner.reset(new TState());
    tl_state = tl_owner.get();
    return tl_state;
}

inline TState *state()
{
    TState *s = tl_state;
    return __builtin_expect(s != nullptr, 1) ? s : state_slow();
}

void TState::new_interval(unsigned long long ep)
{
    if (pending) flush();
    epoch = ep;
    const dim3 &bd = tm_emu_tls.block_dim;
    nthreads = (int)(bd.x * bd.y * bd.z);
    if (logs.size() < (size_t)nthreads) logs.resize(nthreads);
    dyn_lo = (uintptr_t)tm_emu_dynamic_shared();
}

inline bool in_global(uintptr_t a)
{
    for (const Range &r : g_ranges)
        if (a - r.lo < r.size) return true;
    return false;
}

// Logs one access of the calling CUDA thread. lg: log2 of its size in bytes.
inline void record(const volatile void *p, unsigned lg, int store)
{
    if (!g_active.load(std::memory_order_relaxed)) return;
    TState *s = state();
    unsigned long long ep = tm_emu_barrier_epoch();
    if (ep != s->epoch) s->new_interval(ep);
    uintptr_t a = (uintptr_t)p;
    int cls;
    if (a - s->tls_lo < s->tls_size) {
        if (a - s->emu_tls_lo < sizeof(tm_emu_tls)) return;   // threadIdx and friends
        cls = store ? SST : SLD;
    } else if (a - s->dyn_lo < g_dyn_bytes) {
        cls = store ? SST : SLD;
    } else if (in_global(a)) {
        cls = store ? GST : GLD;
    } else {
        return;
    }
    s->logs[tm_emu_tls.linear_tid].v[cls].push_back((uint64_t)a | (uint64_t)lg << 56);
    s->pending = true;
}

// An atomic read-modify-write that took effect.
inline void record_atomic(const volatile void *p, unsigned lg)
{
    if (!g_active.load(std::memory_order_relaxed)) return;
    TState *s = state();
    unsigned long long ep = tm_emu_barrier_epoch();
    if (ep != s->epoch) s->new_interval(ep);
    uintptr_t a = (uintptr_t)p;
    int cls;
    if ((a - s->tls_lo < s->tls_size) || (a - s->dyn_lo < g_dyn_bytes)) {
        cls = SATOM;
        s->c[F_shared_atomics]++;
    } else if (in_global(a)) {
        cls = GATOM;
        s->c[F_global_atomics]++;
        s->atom[a]++;
    } else {
        return;
    }
    s->logs[tm_emu_tls.linear_tid].v[cls].push_back((uint64_t)a | (uint64_t)lg << 56);
    s->pending = true;
}

// A barrier or warp operation of the calling thread (no address).
inline void record_event(int cls)
{
    if (!g_active.load(std::memory_order_relaxed)) return;
    TState *s = state();
    unsigned long long ep = tm_emu_barrier_epoch();
    if (ep != s->epoch) s->new_interval(ep);
    s->logs[tm_emu_tls.linear_tid].v[cls].push_back(0);
    s->pending = true;
}

constexpr uint64_t kAddrMask = (1ull << 56) - 1;

// Distinct 32-byte sectors touched by a warp instruction's lanes; *lines gets the distinct
// 128-byte lines.
uint64_t sectors(const uint64_t *e, int n, uint64_t *lines)
{
    uint64_t s[64];
    int m = 0;
    bool sorted = true;
    for (int i = 0; i < n; ++i) {
        uint64_t a = e[i] & kAddrMask, size = 1ull << (e[i] >> 56);
        uint64_t lo = a >> 5, hi = (a + size - 1) >> 5;
        for (uint64_t x = lo; x <= hi; ++x) {
            if (m && x < s[m - 1]) sorted = false;
            s[m++] = x;
        }
    }
    if (!sorted) std::sort(s, s + m);
    uint64_t distinct = 0, nl = 0;
    for (int i = 0; i < m; ++i) {
        distinct += (i == 0 || s[i] != s[i - 1]);
        nl += (i == 0 || (s[i] >> 2) != (s[i - 1] >> 2));
    }
    *lines = nl;
    return distinct;
}

// Shared-memory wavefronts of a warp instruction: lanes are served in groups of 128 bytes'
// worth (32 lanes of 4-byte accesses, 16 of 8, 8 of 16); within a group, each bank serves one
// 4-byte word per wavefront (lanes reading the same word share it: broadcast). lane[] holds
// each entry's lane. Returns wavefronts; *groups gets the number of groups with active lanes.
uint64_t wavefronts(const uint64_t *e, const int *lane, int n, uint64_t *groups)
{
    uint64_t total = 0, ng = 0;
    int i = 0;
    while (i < n) {
        unsigned lg = (unsigned)(e[i] >> 56);
        int per_group = lg >= 2 ? 32 >> (lg - 2) : 32;
        int g = lane[i] / per_group;
        uint64_t words[128];
        int m = 0;
        int j = i;
        for (; j < n && lane[j] / per_group == g; ++j) {
            uint64_t a = e[j] & kAddrMask, size = 1ull << (e[j] >> 56);
            for (uint64_t w = a >> 2; w <= (a + size - 1) >> 2 && m < 128; ++w) words[m++] = w;
        }
        std::sort(words, words + m);
        int per_bank[32] = {0};
        int most = 0;
        for (int k = 0; k < m; ++k) {
            if (k && words[k] == words[k - 1]) continue;
            int c = ++per_bank[words[k] & 31];
            if (c > most) most = c;
        }
        total += (uint64_t)most;
        ++ng;
        i = j;
    }
    *groups = ng;
    return total;
}

// Sectors of the k-th global load of every warp of the block, merged: an estimate of what
// misses L1 when the block's warps run that load at about the same time (model input only).
void merged_sectors(TState *s, int n)
{
    std::vector<uint64_t> &all = s->merge_buf;
    size_t maxlen = 0;
    for (int t = 0; t < n; ++t) maxlen = std::max(maxlen, s->logs[t].v[GLD].size());
    for (size_t k = 0; k < maxlen; ++k) {
        all.clear();
        for (int t = 0; t < n; ++t) {
            const std::vector<uint64_t> &v = s->logs[t].v[GLD];
            if (k >= v.size()) continue;
            uint64_t a = v[k] & kAddrMask, size = 1ull << (v[k] >> 56);
            for (uint64_t x = a >> 5; x <= (a + size - 1) >> 5; ++x) all.push_back(x);
        }
        std::sort(all.begin(), all.end());
        s->c[F_global_load_sectors_block_merged] += std::unique(all.begin(), all.end()) - all.begin();
    }
}

void TState::flush()
{
    pending = false;
    int n = nthreads;
    merged_sectors(this, n);
    for (int base = 0; base < n; base += 32) {
        int lanes = std::min(32, n - base);
        for (int cls = 0; cls < NCLS; ++cls) {
            size_t maxlen = 0;
            for (int l = 0; l < lanes; ++l) maxlen = std::max(maxlen, logs[base + l].v[cls].size());
            if (!maxlen) continue;
            if (cls == BAR || cls == WOP || cls == GATOM || cls == SATOM) {
                c[cls == BAR ? F_barriers : cls == WOP ? F_warp_ops
                  : cls == GATOM ? F_global_atomic_requests : F_shared_atomic_requests] += maxlen;
            } else {
                uint64_t e[32];
                int lane[32];
                for (size_t k = 0; k < maxlen; ++k) {
                    int m = 0;
                    for (int l = 0; l < lanes; ++l) {
                        const std::vector<uint64_t> &v = logs[base + l].v[cls];
                        if (k < v.size()) {
                            e[m] = v[k];
                            lane[m++] = l;
                        }
                    }
                    if (cls == GLD || cls == GST) {
                        uint64_t bytes = 0;
                        for (int i = 0; i < m; ++i) bytes += 1ull << (e[i] >> 56);
                        c[cls == GLD ? F_global_load_requests : F_global_store_requests]++;
                        uint64_t lines = 0;
                        c[cls == GLD ? F_global_load_sectors : F_global_store_sectors] += sectors(e, m, &lines);
                        c[cls == GLD ? F_global_load_lines : F_global_store_lines] += lines;
                        c[cls == GLD ? F_global_load_bytes : F_global_store_bytes] += bytes;
                    } else {
                        uint64_t groups = 0, wf = wavefronts(e, lane, m, &groups);
                        c[cls == SLD ? F_shared_load_requests : F_shared_store_requests]++;
                        c[cls == SLD ? F_shared_load_wavefronts : F_shared_store_wavefronts] += wf;
                        c[cls == SLD ? F_shared_load_bank_conflicts : F_shared_store_bank_conflicts] +=
                            wf - groups;
                    }
                }
            }
            for (int l = 0; l < lanes; ++l) logs[base + l].v[cls].clear();
        }
    }
}

// ---- sampling: the launch's invoke is wrapped ----
struct InvokeCtx {
    void (*invoke)(void *);
    void *pack;
    std::atomic<long long> blocks_run{0};
    std::atomic<long long> threads_run{0};
    std::atomic<long long> warps_run{0};
};

inline bool block_sampled(long long index)
{
    if (g_stride <= 1 || index == 0) return true;
    uint64_t z = (uint64_t)index + g_seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % (uint64_t)g_stride == 0;
}

void profiled_invoke(void *p)
{
    InvokeCtx *ctx = static_cast<InvokeCtx *>(p);
    const uint3 &b = tm_emu_tls.block_idx;
    const dim3 &g = tm_emu_tls.grid_dim;
    long long index = (long long)b.x + (long long)g.x * (b.y + (long long)g.y * b.z);
    if (!block_sampled(index)) return;
    if (tm_emu_tls.linear_tid == 0) {
        const dim3 &bd = tm_emu_tls.block_dim;
        ctx->blocks_run.fetch_add(1, std::memory_order_relaxed);
        ctx->warps_run.fetch_add(((long long)bd.x * bd.y * bd.z + 31) / 32, std::memory_order_relaxed);
    }
    ctx->threads_run.fetch_add(1, std::memory_order_relaxed);
    ctx->invoke(ctx->pack);
}

}  // namespace

// ---- link-time wraps of the emulator's entry points (setup.py passes -Wl,--wrap=...) ----
extern "C" {
cudaError_t __real__ZN6tm_emu6launchEPKvPFvPvES2_4dim3S5_m(const void *, void (*)(void *), void *, dim3,
                                                           dim3, size_t);
unsigned long long __real__ZN6tm_emu7warp_opEijyiiPKci(int, unsigned, unsigned long long, int, int,
                                                       const char *, int);
void __real_tm_emu_syncthreads(const char *, int);
int __real_tm_emu_syncthreads_op(int, int, const char *, int);
cudaError_t __real_cudaMalloc(void **, size_t);
cudaError_t __real_cudaFree(void *);
cudaError_t __real_cudaDeviceGetAttribute(int *, cudaDeviceAttr, int);

// Launchers that size their grid by the SM count (grid-stride reductions, fast's tile choice)
// see the modelled device's count while profiling, so the grid is the one the GPU would run.
cudaError_t __wrap_cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device)
{
    cudaError_t err = __real_cudaDeviceGetAttribute(value, attr, device);
    if (err == cudaSuccess && g_enabled && g_sms > 0 && attr == cudaDevAttrMultiProcessorCount)
        *value = g_sms;
    return err;
}

cudaError_t __wrap__ZN6tm_emu6launchEPKvPFvPvES2_4dim3S5_m(const void *func, void (*invoke)(void *),
                                                           void *pack, dim3 grid, dim3 block,
                                                           size_t shared_bytes)
{
    if (!g_enabled)
        return __real__ZN6tm_emu6launchEPKvPFvPvES2_4dim3S5_m(func, invoke, pack, grid, block, shared_bytes);
    InvokeCtx ctx;
    ctx.invoke = invoke;
    ctx.pack = pack;
    {
        std::lock_guard<std::mutex> g(g_mu);
        g_ranges.clear();
        for (auto &kv : g_allocs) g_ranges.push_back(Range{kv.first, kv.second});
        g_dyn_bytes = shared_bytes;
        g_seed += 0x632be59bd9b4e019ull;
        for (TState *s : g_states) {
            if (s->pending) s->flush();   // nothing should be pending; be safe
            std::fill(s->c, s->c + NFIELDS, 0);
            s->atom.clear();
            s->epoch = 0;
        }
    }
    g_active.store(1);
    cudaError_t err = __real__ZN6tm_emu6launchEPKvPFvPvES2_4dim3S5_m(func, profiled_invoke, &ctx, grid, block,
                                                                     shared_bytes);
    g_active.store(0);
    std::lock_guard<std::mutex> g(g_mu);
    uint64_t sum[NFIELDS] = {};
    std::unordered_map<uintptr_t, uint64_t> atom;
    for (TState *s : g_states) {
        if (s->pending) s->flush();
        s->epoch = 0;
        for (int i = 0; i < NFIELDS; ++i) sum[i] += s->c[i];
        for (auto &kv : s->atom) atom[kv.first] += kv.second;
        s->atom.clear();
    }
    uint64_t most = 0;
    for (auto &kv : atom) most = std::max(most, kv.second);
    sum[F_global_atomic_max_same_address] = most;
    long long nblocks = (long long)grid.x * grid.y * grid.z;
    long long run = ctx.blocks_run.load();
    double scale = run > 0 ? (double)nblocks / (double)run : 0.0;
    sum[F_blocks_profiled] = (uint64_t)run;
    sum[F_threads_profiled] = (uint64_t)ctx.threads_run.load();
    sum[F_warps_profiled] = (uint64_t)ctx.warps_run.load();
    for (int i = 0; i < NFIELDS; ++i) {
        if (i == F_blocks_profiled || i == F_threads_profiled || i == F_warps_profiled)
            g_totals[i] += (double)sum[i];
        else
            g_totals[i] += (double)sum[i] * scale;
    }
    g_totals[F_launches] += 1;
    g_totals[F_blocks] += (double)nblocks;
    return err;
}

unsigned long long __wrap__ZN6tm_emu7warp_opEijyiiPKci(int op, unsigned mask, unsigned long long value, int arg,
                                                       int width, const char *file, int line)
{
    record_event(WOP);
    return __real__ZN6tm_emu7warp_opEijyiiPKci(op, mask, value, arg, width, file, line);
}

void __wrap_tm_emu_syncthreads(const char *file, int line)
{
    record_event(BAR);
    __real_tm_emu_syncthreads(file, line);
}

int __wrap_tm_emu_syncthreads_op(int op, int pred, const char *file, int line)
{
    record_event(BAR);
    return __real_tm_emu_syncthreads_op(op, pred, file, line);
}

cudaError_t __wrap_cudaMalloc(void **p, size_t size)
{
    cudaError_t err = __real_cudaMalloc(p, size);
    if (err == cudaSuccess && p && *p) {
        std::lock_guard<std::mutex> g(g_mu);
        g_allocs[(uintptr_t)*p] = size;
    }
    return err;
}

cudaError_t __wrap_cudaFree(void *p)
{
    {
        std::lock_guard<std::mutex> g(g_mu);
        g_allocs.erase((uintptr_t)p);
    }
    return __real_cudaFree(p);
}
}  // extern "C"

// ---- the API tiledmm/profile.py calls (ctypes) ----

// Starts counting; stride > 1 samples about one block in `stride` per launch; sms > 0 is the
// multiprocessor count launchers see meanwhile.
TM_EXPORT void tm_profile_begin(long long stride, int sms)
{
    std::lock_guard<std::mutex> g(g_mu);
    std::fill(g_totals, g_totals + NFIELDS, 0.0);
    g_stride = stride > 1 ? stride : 1;
    g_sms = sms;
    g_enabled = true;
}

// Stops counting; writes min(n, fields) counters to out and returns how many there are.
TM_EXPORT int tm_profile_end(double *out, int n)
{
    std::lock_guard<std::mutex> g(g_mu);
    g_enabled = false;
    for (int i = 0; i < n && i < NFIELDS; ++i) out[i] = g_totals[i];
    return NFIELDS;
}

// The counters' names, comma-separated, in tm_profile_end's order.
TM_EXPORT const char *tm_profile_fields(void) { return kFieldNames; }

// Device memory that this module did not allocate (a DeviceArray of another module).
TM_EXPORT void tm_profile_add_range(uintptr_t p, size_t size)
{
    std::lock_guard<std::mutex> g(g_mu);
    if (size) g_allocs[p] = size;
}

TM_EXPORT void tm_profile_remove_range(uintptr_t p)
{
    std::lock_guard<std::mutex> g(g_mu);
    g_allocs.erase(p);
}

// ---- ThreadSanitizer's instrumentation hooks (no libtsan: these are the only definitions) ----
extern "C" {
#define TM_RW(n, lg)                                                                             \
    TM_EXPORT void __tsan_read##n(void *p) { record(p, lg, 0); }                                \
    TM_EXPORT void __tsan_write##n(void *p) { record(p, lg, 1); }                               \
    TM_EXPORT void __tsan_unaligned_read##n(void *p) { record(p, lg, 0); }                      \
    TM_EXPORT void __tsan_unaligned_write##n(void *p) { record(p, lg, 1); }                     \
    TM_EXPORT void __tsan_volatile_read##n(void *p) { record(p, lg, 0); }                       \
    TM_EXPORT void __tsan_volatile_write##n(void *p) { record(p, lg, 1); }                      \
    TM_EXPORT void __tsan_unaligned_volatile_read##n(void *p) { record(p, lg, 0); }             \
    TM_EXPORT void __tsan_unaligned_volatile_write##n(void *p) { record(p, lg, 1); }
TM_RW(1, 0)
TM_RW(2, 1)
TM_RW(4, 2)
TM_RW(8, 3)
TM_RW(16, 4)
#undef TM_RW

// A range (GCC does not emit these for plain code; counted as one access per 16 bytes or less).
TM_EXPORT void __tsan_read_range(void *p, unsigned long size)
{
    for (unsigned long off = 0; off < size; off += 16) {
        unsigned long left = size - off;
        record((char *)p + off, left >= 16 ? 4 : left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0, 0);
    }
}
TM_EXPORT void __tsan_write_range(void *p, unsigned long size)
{
    for (unsigned long off = 0; off < size; off += 16) {
        unsigned long left = size - off;
        record((char *)p + off, left >= 16 ? 4 : left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0, 1);
    }
}

TM_EXPORT void __tsan_init(void) {}
TM_EXPORT void __tsan_func_entry(void *) {}
TM_EXPORT void __tsan_func_exit(void) {}
TM_EXPORT void __tsan_vptr_update(void **, void *) {}
TM_EXPORT void __tsan_vptr_read(void **) {}
TM_EXPORT void __tsan_ignore_thread_begin(void) {}
TM_EXPORT void __tsan_ignore_thread_end(void) {}

// Atomics: GCC routes every __atomic builtin of instrumented code here. They stay real
// (sequentially consistent) atomics; a read-modify-write that takes effect is counted.
#define TM_ATOMICS(n, T, lg)                                                                      \
    TM_EXPORT T __tsan_atomic##n##_load(const volatile T *a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    TM_EXPORT void __tsan_atomic##n##_store(volatile T *a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    TM_EXPORT T __tsan_atomic##n##_exchange(volatile T *a, T v, int)                              \
    {                                                                                             \
        record_atomic(a, lg);                                                                     \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                       \
    }                                                                                             \
    TM_EXPORT T __tsan_atomic##n##_fetch_add(volatile T *a, T v, int) { record_atomic(a, lg); return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    TM_EXPORT T __tsan_atomic##n##_fetch_sub(volatile T *a, T v, int) { record_atomic(a, lg); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    TM_EXPORT T __tsan_atomic##n##_fetch_and(volatile T *a, T v, int) { record_atomic(a, lg); return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    TM_EXPORT T __tsan_atomic##n##_fetch_or(volatile T *a, T v, int) { record_atomic(a, lg); return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
    TM_EXPORT T __tsan_atomic##n##_fetch_xor(volatile T *a, T v, int) { record_atomic(a, lg); return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    TM_EXPORT T __tsan_atomic##n##_fetch_nand(volatile T *a, T v, int) { record_atomic(a, lg); return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
    TM_EXPORT int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int, int)  \
    {                                                                                             \
        bool ok = __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        if (ok) record_atomic(a, lg);                                                             \
        return ok;                                                                                \
    }                                                                                             \
    TM_EXPORT int __tsan_atomic##n##_compare_exchange_weak(volatile T *a, T *c, T v, int, int)    \
    {                                                                                             \
        bool ok = __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        if (ok) record_atomic(a, lg);                                                             \
        return ok;                                                                                \
    }                                                                                             \
    TM_EXPORT T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int, int)        \
    {                                                                                             \
        if (__atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))      \
            record_atomic(a, lg);                                                                 \
        return c;                                                                                 \
    }
TM_ATOMICS(8, unsigned char, 0)
TM_ATOMICS(16, unsigned short, 1)
TM_ATOMICS(32, unsigned int, 2)
TM_ATOMICS(64, unsigned long long, 3)
#undef TM_ATOMICS
TM_EXPORT void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
TM_EXPORT void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}  // extern "C"
