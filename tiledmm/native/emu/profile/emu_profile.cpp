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
// shared load, shared store, cp.async, atomic) with the access's program counter: the return
// address of the hook, i.e. the call site in the kernel's machine code, one per source access
// after inlining. A warp instruction is the k-th execution of one PC by each lane of the warp
// between two barriers. When the barrier opens (the block's epoch changes,
// emu/scheduler.cpp) or the launch ends, the logs are folded into counts. Lanes that skip
// an access (divergence: `if (tid % (2 * s) == 0)`) therefore do not shift their later
// accesses. What stays approximate: a helper that GCC does not inline serves all its callers
// with one PC (tiledmm's kernels mark their helpers __forceinline__, always inlined on the
// emulator); and a lane that skips a PC in one iteration of a barrier-free loop but not in a
// later one is grouped by execution count, not by iteration. Where all lanes log the same PC
// sequence (code without divergence) the k-th entry of each lane is the k-th instruction, the
// fast path.
//
// Divergence. The kernel objects are also compiled with -fsanitize-coverage=trace-pc: GCC calls
// __sanitizer_cov_trace_pc() at the start of every basic block, and its return address names
// the block. Each lane's sequence of blocks between two barriers is logged; lanes of a warp
// that are together (at the same block) and go on to different next blocks (or some end) are
// one divergent branch, as ncu's smsp__sass_branch_targets_threads_divergent counts a branch
// whose active threads take more than one target. The parts reconverge at the first block that
// all of them reach (the block minimising the largest distance along the parts' traces: the
// join after an if/else, the loop's next step), a stand-in for the immediate post-dominator
// the hardware's reconvergence uses. The branches are GCC's, not nvcc's: nvcc predicates short
// conditional code (no branch, so ncu counts no divergence there), GCC branches around every
// conditional block that holds a counted access.
//
// Barriers, warp operations and the launch itself are seen by wrapping the emulator's entry
// points at link time (ld --wrap, see setup.py): the kernels call __wrap_X, which logs and calls
// the real X. The kernel sources are unchanged.
//
// Sampling: tm_profile_begin(stride) with stride > 1 runs only about one block in `stride` of
// each launch (chosen by a hash of the block index; the others return at once) and scales the
// counts by blocks / blocks run. The output of such a run is not the kernel's output.
#include "../cuda_emu.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#define TM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// Access classes, logged with their address and PC. LDGSTS: cp.async (global -> shared).
enum Cls { GLD, GST, SLD, SST, LDGSTS, GATOM, SATOM, NCLS };

// The counters, in this order (tm_profile_fields names them).
// clang-format off
#define TM_PROFILE_FIELDS(X)                                                                   \
    X(launches) X(blocks) X(blocks_profiled) X(threads_profiled) X(warps_profiled)             \
    X(global_load_requests) X(global_load_sectors) X(global_load_bytes)                        \
    X(global_load_sectors_block_merged) X(global_load_lines) X(global_store_lines)             \
    X(global_store_requests) X(global_store_sectors) X(global_store_bytes)                     \
    X(shared_load_requests) X(shared_load_wavefronts) X(shared_load_bank_conflicts)            \
    X(shared_store_requests) X(shared_store_wavefronts) X(shared_store_bank_conflicts)         \
    X(global_atomic_requests) X(global_atomics) X(global_atomic_max_same_address)              \
    X(shared_atomic_requests) X(shared_atomics) X(barriers) X(warp_ops)                      \
    X(global_ldgsts_requests) X(global_ldgsts_sectors) X(divergent_branches)
// clang-format on

enum Field {
#define TM_ENUM(name) F_##name,
    // clang-format off
    TM_PROFILE_FIELDS(TM_ENUM)
    // clang-format on
#undef TM_ENUM
        NFIELDS
};
const char kFieldNames[] =
#define TM_NAME(name) #name ","
    // clang-format off
    TM_PROFILE_FIELDS(TM_NAME)
    // clang-format on
#undef TM_NAME
    ;

// Entries of v: address | log2(size) << 56 | kNoBytes (a cp.async that copies no source
// bytes: zero fill).
constexpr uint64_t kAddrMask = (1ull << 56) - 1;
constexpr uint64_t kNoBytes = 1ull << 63;
inline unsigned entry_lg(uint64_t e)
{
    return (unsigned)(e >> 56) & 15u;
}

// A growable array of integers whose append is a compare and a store (the hooks' hot path);
// growing is out of line.
template <typename T>
struct Buf {
    T *d = nullptr;
    size_t n = 0, cap = 0;
    bool owned = true;   // d is this Buf's allocation (else storage its owner gave: start_in)
    Buf() = default;
    Buf(const Buf &) = delete;
    Buf &operator=(const Buf &) = delete;
    ~Buf()
    {
        if (owned) std::free(d);
    }
    // Starts (empty) in `storage` of c entries, which outlives it; the first growth leaves it.
    void start_in(T *storage, size_t c)
    {
        d = storage;
        cap = c;
        owned = false;
    }
    inline void push_back(T x)
    {
        if (__builtin_expect(n == cap, 0)) grow();
        d[n++] = x;
    }
    __attribute__((noinline)) void grow()
    {
        size_t c = cap ? 2 * cap : 16;   // small: a block's 256+ logs stay in cache
        T *p =
            static_cast<T *>(owned ? std::realloc(d, c * sizeof(T)) : std::malloc(c * sizeof(T)));
        if (!p) std::abort();
        if (!owned && n) std::memcpy(p, d, n * sizeof(T));
        d = p;
        cap = c;
        owned = true;
    }
    size_t size() const { return n; }
    bool empty() const { return n == 0; }
    const T *data() const { return d; }
    T operator[](size_t i) const { return d[i]; }
    void clear() { n = 0; }
    void shrink_to(size_t k) { n = k < n ? k : n; }
};

// The accesses of one class, in order: entries (v) and their program counters (pc), appended
// together (one length, one capacity check).
struct AccessLog {
    uint64_t *v = nullptr;
    uintptr_t *pc = nullptr;
    size_t n = 0, cap = 0;
    AccessLog() = default;
    AccessLog(const AccessLog &) = delete;
    AccessLog &operator=(const AccessLog &) = delete;
    AccessLog(AccessLog &&o) noexcept : v(o.v), pc(o.pc), n(o.n), cap(o.cap)
    {
        o.v = nullptr, o.pc = nullptr, o.n = o.cap = 0;
    }
    ~AccessLog()
    {
        std::free(v);
        std::free(pc);
    }
    inline void push_back(uint64_t e, uintptr_t at)
    {
        if (__builtin_expect(n == cap, 0)) grow();
        v[n] = e;
        pc[n++] = at;
    }
    __attribute__((noinline)) void grow()
    {
        size_t c = cap ? 2 * cap : 16;
        uint64_t *nv = static_cast<uint64_t *>(std::realloc(v, c * sizeof(uint64_t)));
        if (!nv) std::abort();
        v = nv;
        uintptr_t *np = static_cast<uintptr_t *>(std::realloc(pc, c * sizeof(uintptr_t)));
        if (!np) std::abort();
        pc = np;
        cap = c;
    }
    size_t size() const { return n; }
    bool empty() const { return n == 0; }
    void clear() { n = 0; }
};

// Whether two threads logged the same program counters.
inline bool same_pcs(const AccessLog &a, const AccessLog &b)
{
    if (a.n != b.n) return false;
    for (size_t i = 0; i < a.n; ++i)
        if (a.pc[i] != b.pc[i]) return false;
    return true;
}

// One CUDA thread's log between two barriers.
// What the fold reads of every lane (bb, bar, wop, used) shares the first cache line, and a
// trace of a few blocks (a reduction's lanes log two to five between barriers) is stored right
// after it, not in a heap block of its own: the fold's trace comparisons and the trace-pc hook's
// stores then touch the log's own two lines. Logs are never moved (TState::logs).
struct alignas(64) Log {
    Buf<uintptr_t> bb;                // basic blocks entered (trace-pc), in order
    uint32_t bar = 0, wop = 0;        // barriers and warp operations
    uint32_t used = 0;                // bit cls: acc[cls] has entries
    bool cas_retry = false;           // a failed compare-and-swap's retry is still to be
    size_t cas_mark = 0;              // taken out of bb from this length on
    static constexpr size_t kInlineBlocks = 10;   // with the above: two cache lines
    uintptr_t bb_inline[kInlineBlocks];
    AccessLog acc[NCLS];              // the accesses of each class
    Log() { bb.start_in(bb_inline, kInlineBlocks); }
    Log(const Log &) = delete;
    Log &operator=(const Log &) = delete;
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

// A lane's basic blocks in one barrier interval (its log's, which the fold has emptied: the
// entries stay where they are until the next interval's first turn writes over them).
struct Trace {
    const uintptr_t *d;
    size_t n;
    bool operator==(const Trace &o) const
    {
        if (n != o.n) return false;
        for (size_t i = 0; i < n; ++i)
            if (d[i] != o.d[i]) return false;
        return true;
    }
};

// Divergent branches of one warp in one barrier interval, from its lanes' basic-block traces.
// The walk keeps its state on the heap (TState::walk, an explicit stack instead of recursion):
// it runs inside a kernel thread's fiber, whose stack may be small (TILEDMM_EMU_STACK_KB).
struct DivergenceWalk {
    const uintptr_t *t[32];
    size_t n[32], c[32];   // trace, its length, the lane's position in it
    std::vector<uintptr_t> stops;
    uint64_t divergent = 0;
    uint64_t budget = 0;   // trace entries meet() may still scan in this interval
    std::vector<std::pair<uintptr_t, uint32_t>> firsts[32];   // meet()'s scratch
    enum State { LOOP, CHILDREN, APART };
    struct Frame {
        uint32_t g, all;
        int np, j, state;
        bool outer;
        uintptr_t r;
        uint32_t parts[32];
        uintptr_t target[32];
    };
    std::vector<Frame> frames;   // frames[0 .. depth): reused, never value-initialised again
    size_t depth = 0;            // (a Frame is 400 bytes; run() pushes one per part)

    bool is_stop(uintptr_t b) const
    {
        for (uintptr_t s : stops)
            if (s == b) return true;
        return false;
    }

    // The block where the parts (lane masks, each at its own block) meet again: the one that
    // every part's representative (its lowest lane) reaches within kWindow blocks, with the
    // smallest largest distance (then the smallest sum). 0 if there is none, or when the
    // interval's scanning budget is spent (then the parts go on apart: fewer branches counted).
    static constexpr size_t kWindow = 512;
    uintptr_t meet(const uint32_t *parts, int np)
    {
        for (int j = 0; j < np; ++j) {
            int r = __builtin_ctz(parts[j]);
            std::vector<std::pair<uintptr_t, uint32_t>> &f = firsts[j];
            f.clear();
            size_t end = std::min(n[r], c[r] + kWindow);
            if (budget < end - c[r]) return 0;
            budget -= end - c[r];
            for (size_t i = c[r]; i < end; ++i)
                f.emplace_back(t[r][i], (uint32_t)(i - c[r]));
            std::sort(f.begin(), f.end());
            f.erase(std::unique(
                        f.begin(), f.end(),
                        [](const std::pair<uintptr_t, uint32_t> &a,
                           const std::pair<uintptr_t, uint32_t> &b) { return a.first == b.first; }),
                    f.end());
        }
        uintptr_t best = 0;
        uint64_t best_max = ~0ull, best_sum = ~0ull;
        for (const auto &cand : firsts[0]) {
            uint64_t mx = cand.second, sum = cand.second;
            bool everywhere = true;
            for (int j = 1; j < np && everywhere; ++j) {
                const auto &f = firsts[j];
                auto it =
                    std::lower_bound(f.begin(), f.end(), std::make_pair(cand.first, (uint32_t)0));
                if (it == f.end() || it->first != cand.first) {
                    everywhere = false;
                } else {
                    mx = std::max<uint64_t>(mx, it->second);
                    sum += it->second;
                }
            }
            if (everywhere && (mx < best_max || (mx == best_max && sum < best_sum))) {
                best = cand.first;
                best_max = mx;
                best_sum = sum;
            }
        }
        return best;
    }

    void push(uint32_t g)
    {
        if (depth == frames.size()) frames.emplace_back();
        Frame &f = frames[depth++];
        f.g = g;
        f.state = LOOP;
    }

    // Runs group g (lanes together at one block) until its lanes end or reach a stop block: each
    // step moves every lane of the group to its next block; where they go to different blocks
    // (or some end), one divergent branch, and the parts run on their own until they meet.
    void run(uint32_t g)
    {
        depth = 0;
        push(g);
        while (depth) {
            Frame &f = frames[depth - 1];
            if (f.state == APART) {   // parts that do not meet: each on its own, then done
                if (f.j < f.np) {
                    uint32_t part = f.parts[f.j++];
                    push(part);
                } else {
                    --depth;
                }
                continue;
            }
            if (f.state == CHILDREN) {   // parts running until they meet at f.r
                while (f.j < f.np && f.target[f.j] == f.r)
                    ++f.j;
                if (f.j < f.np) {
                    uint32_t part = f.parts[f.j++];
                    push(part);
                    continue;
                }
                stops.pop_back();
                if (f.outer) {   // they meet at a block an enclosing level waits at
                    --depth;
                    continue;
                }
                uint32_t met = 0;
                for (uint32_t m = f.all; m; m &= m - 1) {
                    int l = __builtin_ctz(m);
                    if (c[l] < n[l] && t[l][c[l]] == f.r) met |= 1u << l;
                }
                f.g = met;
                f.state = LOOP;
                continue;
            }
            if (!f.g) {
                --depth;
                continue;
            }
            uint32_t ended = 0;
            int np = 0;
            for (uint32_t m = f.g; m; m &= m - 1) {
                int l = __builtin_ctz(m);
                if (c[l] + 1 >= n[l]) {
                    ended |= 1u << l;
                    c[l] = n[l];
                    continue;
                }
                uintptr_t next = t[l][++c[l]];
                int j = 0;
                while (j < np && f.target[j] != next)
                    ++j;
                if (j == np) {
                    f.target[np] = next;
                    f.parts[np++] = 0;
                }
                f.parts[j] |= 1u << l;
            }
            if (np + (ended != 0) > 1) ++divergent;
            // Parts that reached a stop wait there for the level that set it.
            int kept = 0;
            for (int j = 0; j < np; ++j)
                if (!is_stop(f.target[j])) {
                    f.parts[kept] = f.parts[j];
                    f.target[kept++] = f.target[j];
                }
            np = kept;
            if (np <= 1) {
                f.g = np ? f.parts[0] : 0;
                continue;
            }
            f.np = np;
            f.j = 0;
            uintptr_t r = meet(f.parts, np);
            if (!r) {
                f.state = APART;
                continue;
            }
            f.outer = is_stop(r);
            stops.push_back(r);
            f.r = r;
            f.all = 0;
            for (int j = 0; j < np; ++j)
                f.all |= f.parts[j];
            f.state = CHILDREN;
        }
    }
};

struct TState;
void tp_table_set(TState *s);

struct TState {
    // The running CUDA thread's basic-block log as a cursor, kept here (one cache line with the
    // state the hooks read) rather than in its Log: trace-pc's hook, the most frequent one, then
    // stores without touching the Log. bb_load at enter(), bb_store at every point where the
    // fiber may be switched out (barriers, warp operations, its end) and before a flush.
    uintptr_t *bb_at = nullptr, *bb_end = nullptr;
    Log *cur = nullptr;   // the running CUDA thread's log (enter())
    void bb_load()
    {
        bb_at = cur->bb.d + cur->bb.n;
        bb_end = cur->bb.d + cur->bb.cap;
    }
    void bb_store()
    {
        if (cur) cur->bb.n = (size_t)(bb_at - cur->bb.d);
    }
    // What runs next (a thread loop's own blocks, block-level code) logs to the unread log, its
    // blocks started over (its accesses, if any, are dropped at the barrier: drop_discard).
    void to_discard()
    {
        cur = &discard;
        discard.bb.clear();
        bb_load();
    }
    unsigned long long epoch = 0;
    int nthreads = 0;   // of the block whose logs are pending
    // Barriers every thread of the block reached in this interval (a split kernel's former
    // __syncthreads(): counted once here, not in each thread's log)
    uint32_t block_bar = 0;
    uintptr_t tls_lo = 0, tls_size = 0;
    uintptr_t emu_tls_lo = 0;
    uintptr_t dyn_lo = 0;
    std::unique_ptr<Log[]> logs;   // nlogs of them: an array, never moved (their traces
    size_t nlogs = 0;   // start inside them)
    // Split kernels (issue 34): what runs outside a CUDA thread's turn in a thread
    // loop (the loops' own blocks, the block-uniform code between regions) logs here, unread.
    Log discard;
    bool pending = false;
    uint64_t c[NFIELDS] = {};   // this launch's counts (folded by the launching thread)
    std::unordered_map<uintptr_t, uint64_t> atom;   // global atomics per address
    std::vector<uint64_t> merge_buf;
    std::vector<uint32_t> warp_used, warp_bar, warp_wop;   // flush's per-warp summary ...
    std::vector<Trace> warp_traces;   // ... its distinct block traces
    std::vector<int> warp_ntraces;   //     (32 places a warp), how many
    // scratch of the divergent (PC-keyed) grouping and of the divergence walk
    struct Ent {
        uintptr_t pc;
        uint32_t lane, seq;
    };
    std::vector<Ent> ents;
    std::vector<uint64_t> grp_e;
    std::vector<int> grp_lane;
    std::vector<const uint64_t *> grp_vals;
    DivergenceWalk walk;
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
        tp_table_set(this);
    }
    ~TState()
    {
        std::lock_guard<std::mutex> g(g_mu);
        g_states.erase(std::remove(g_states.begin(), g_states.end(), this), g_states.end());
        tp_table_set(nullptr);
    }
    void new_interval(unsigned long long ep);
    void flush();
};

// The hooks find the OS thread's TState by its thread pointer (%fs:0 on x86-64, TPIDR_EL0 on
// aarch64: one instruction) in a small open-addressed table, not through thread_local: this
// module is dlopen'ed, so each thread_local read is a call (_dl_tlsdesc_dynamic or
// __tls_get_addr), and the hooks read the state on every access and basic block (issue 34:
// about a tenth of a profiled reduction's time went to those calls). A thread's entry is added
// when its TState is made and taken out (a tombstone) when the thread ends, before its thread
// pointer can be reused; a thread not found (a full table) falls back to the thread_local.
struct TpSlot {
    std::atomic<uintptr_t> tp{0};   // 0: never used (ends a probe); kTpGone: taken out
    TState *s = nullptr;
};
constexpr uintptr_t kTpGone = 1;
constexpr size_t kTpSlots = 1024;
TpSlot g_tp[kTpSlots];

inline uintptr_t thread_pointer()
{
    return (uintptr_t)__builtin_thread_pointer();
}
inline size_t tp_slot(uintptr_t tp)
{
    return (size_t)((tp >> 12) ^ (tp >> 22)) & (kTpSlots - 1);
}

// Adds (s) or takes out (nullptr) the calling thread's entry; under g_mu.
void tp_table_set(TState *s)
{
    uintptr_t tp = thread_pointer();
    for (size_t k = 0, i = tp_slot(tp); k < kTpSlots; ++k, i = (i + 1) & (kTpSlots - 1)) {
        uintptr_t at = g_tp[i].tp.load(std::memory_order_relaxed);
        if (s && (at == 0 || at == kTpGone)) {
            g_tp[i].s = s;
            g_tp[i].tp.store(tp, std::memory_order_release);
            return;
        }
        if (!s && at == tp) {
            g_tp[i].tp.store(kTpGone, std::memory_order_release);
            return;
        }
        if (at == 0) return;
    }
}

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

__attribute__((noinline)) TState *running_probe(uintptr_t tp, size_t i, uintptr_t at)
{
    for (size_t k = 1; k < kTpSlots && at != 0; ++k) {
        i = (i + 1) & (kTpSlots - 1);
        at = g_tp[i].tp.load(std::memory_order_acquire);
        if (at == tp) return g_tp[i].s;
    }
    return state();
}

// The running CUDA thread's state inside a profiled launch (enter() has run on this OS thread).
__attribute__((always_inline)) inline TState *running()
{
    uintptr_t tp = thread_pointer();
    size_t i = tp_slot(tp);
    uintptr_t at = g_tp[i].tp.load(std::memory_order_acquire);
    if (__builtin_expect(at == tp, 1)) return g_tp[i].s;
    return running_probe(tp, i, at);
}

void TState::new_interval(unsigned long long ep)
{
    if (pending) flush();
    epoch = ep;
    const dim3 &bd = tm_emu_tls.block_dim;
    nthreads = (int)(bd.x * bd.y * bd.z);
    if (nlogs < (size_t)nthreads) {   // after the flush above: no log holds anything
        logs.reset(new Log[nthreads]);
        nlogs = nthreads;
    }
    dyn_lo = (uintptr_t)tm_emu_dynamic_shared();
}

inline bool in_global(uintptr_t a)
{
    for (const Range &r : g_ranges)
        if (a - r.lo < r.size) return true;
    return false;
}

// The calling CUDA thread's log, after moving to a new barrier interval when the epoch changed.
// A CUDA thread (fiber) starts or resumes on this OS thread: at its start (profiled_invoke) and
// on return from a barrier or warp operation (the wrappers below), the only places where a
// fiber switch or a new barrier epoch can happen. The hooks then log into s->cur without asking
// the emulator for the epoch and the thread index on every access.
// tid: the CUDA thread's linear index (tm_emu_tls.linear_tid; the wrappers keep it across the
// switch, which saves a thread_local read).
inline void enter(int tid)
{
    TState *s = running();
    unsigned long long ep = tm_emu_barrier_epoch();
    if (ep != s->epoch) s->new_interval(ep);
    s->pending = true;
    s->cur = &s->logs[tid];
    s->bb_load();
}

inline Log &cur_log(TState *s)
{
    return *s->cur;
}

// Logs one access of the calling CUDA thread at program counter pc. lg: log2 of its size in
// bytes.
inline void record(const volatile void *p, unsigned lg, int store, uintptr_t pc)
{
    if (!g_active.load(std::memory_order_relaxed)) return;
    TState *s = running();
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
    Log &l = cur_log(s);
    l.acc[cls].push_back((uint64_t)a | (uint64_t)lg << 56, pc);
    l.used |= 1u << cls;
}

// A cp.async of the calling thread from global address src; no_bytes: zero fill (no source read).
inline void record_ldgsts(const void *src, unsigned lg, bool no_bytes, uintptr_t pc)
{
    if (!g_active.load(std::memory_order_relaxed)) return;
    Log &l = cur_log(running());
    l.acc[LDGSTS].push_back(
        (uint64_t)(uintptr_t)src | (uint64_t)lg << 56 | (no_bytes ? kNoBytes : 0), pc);
    l.used |= 1u << LDGSTS;
}

// An atomic read-modify-write that took effect.
inline void record_atomic(const volatile void *p, unsigned lg, uintptr_t pc)
{
    if (!g_active.load(std::memory_order_relaxed)) return;
    TState *s = running();
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
    Log &l = cur_log(s);
    l.acc[cls].push_back((uint64_t)a | (uint64_t)lg << 56, pc);
    l.used |= 1u << cls;
}

// A barrier (bar) or warp operation of the calling thread.
// The fiber may be switched out next: its block cursor goes back to its log. Returns the CUDA
// thread's index for enter() after the switch, or -1 outside a profiled launch.
inline int record_event(bool bar)
{
    if (!g_active.load(std::memory_order_relaxed)) return -1;
    TState *s = running();
    s->bb_store();
    Log &l = cur_log(s);
    ++(bar ? l.bar : l.wop);
    return (int)(s->cur - s->logs.get());
}

__attribute__((noinline)) void bb_grow(TState *s)
{
    s->bb_store();
    s->cur->bb.grow();
    s->bb_load();
}

// record_bb's rare cases: a thread found past its first slot of the table, a full log.
__attribute__((noinline)) void record_bb_slow(uintptr_t pc)
{
    TState *s = running();
    if (s->bb_at == s->bb_end) bb_grow(s);
    *s->bb_at++ = pc;
}

// A basic block entered by the calling thread (trace-pc), the hooks' most frequent call: its
// common case is written out so that it needs no stack frame (the rare ones are a tail call).
inline void record_bb(uintptr_t pc)
{
    if (!g_active.load(std::memory_order_relaxed)) return;
    const uintptr_t tp = thread_pointer();
    const size_t i = tp_slot(tp);
    if (__builtin_expect(g_tp[i].tp.load(std::memory_order_acquire) == tp, 1)) {
        TState *s = g_tp[i].s;
        uintptr_t *at = s->bb_at;
        if (__builtin_expect(at != s->bb_end, 1)) {
            *at = pc;
            s->bb_at = at + 1;
            return;
        }
    }
    record_bb_slow(pc);
}

// Distinct 32-byte sectors touched by a warp instruction's lanes; *lines gets the distinct
// 128-byte lines. A zero-filling cp.async (no source bytes) touches none.
uint64_t sectors(const uint64_t *e, int n, uint64_t *lines)
{
    uint64_t s[64];
    int m = 0;
    bool sorted = true;
    for (int i = 0; i < n; ++i) {
        if (e[i] & kNoBytes) continue;
        uint64_t a = e[i] & kAddrMask, size = 1ull << entry_lg(e[i]);
        uint64_t lo = a >> 5, hi = (a + size - 1) >> 5;
        for (uint64_t x = lo; x <= hi && m < 64; ++x) {
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
        unsigned lg = entry_lg(e[i]);
        int per_group = lg >= 2 ? 32 >> (lg - 2) : 32;
        int g = lane[i] / per_group;
        uint64_t words[128];
        int m = 0;
        int j = i;
        // Fast path: no bank holds two different words (distinct banks, or broadcasts).
        uint64_t bank_word[32];
        uint32_t used = 0;
        bool clash = false;
        for (; j < n && lane[j] / per_group == g; ++j) {
            uint64_t a = e[j] & kAddrMask, size = 1ull << entry_lg(e[j]);
            for (uint64_t w = a >> 2; w <= (a + size - 1) >> 2 && m < 128; ++w) {
                words[m++] = w;
                uint32_t bit = 1u << (w & 31);
                if (!(used & bit)) {
                    used |= bit;
                    bank_word[w & 31] = w;
                } else if (bank_word[w & 31] != w) {
                    clash = true;
                }
            }
        }
        if (!clash) {
            total += m ? 1 : 0;
            ++ng;
            i = j;
            continue;
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

// Calls f(e, lane, m) once per warp instruction of class cls among threads base .. base+n-1
// (a warp, or the whole block for the merged L1 estimate): the entries of the k-th execution of
// one PC by each thread, m of them, lane[] their thread - base in increasing order.
// Fast path: where all threads that logged anything logged the same PC sequence (no
// divergence), the k-th entry of each thread is the k-th instruction.
template <typename F>
void for_each_instruction(TState *s, int base, int n, int cls, F &&f)
{
    std::vector<uint64_t> &e = s->grp_e;
    std::vector<int> &lane = s->grp_lane;
    std::vector<const uint64_t *> &vals = s->grp_vals;
    if (lane.size() < (size_t)n) lane.resize(n);   // the divergent path below shrinks them
    if (e.size() < (size_t)n) e.resize(n);
    if (vals.size() < (size_t)n) vals.resize(n);
    const AccessLog *ref = nullptr;
    bool same = true;
    size_t maxlen = 0;
    int active = 0;   // threads with entries: lane[] their index, vals[] their entries
    for (int t = 0; t < n; ++t) {
        const Log &l = s->logs[base + t];
        const AccessLog &p = l.acc[cls];
        if (p.empty()) continue;
        maxlen = std::max(maxlen, p.size());
        if (!ref)
            ref = &p;
        else if (same && !same_pcs(p, *ref))
            same = false;
        lane[active] = t;
        vals[active++] = p.v;
    }
    if (!maxlen) return;
    if (same) {
        // Every active thread logged the same sequence, so each has maxlen entries and takes
        // part in every k-th instruction.
        for (size_t k = 0; k < maxlen; ++k) {
            for (int i = 0; i < active; ++i)
                e[i] = vals[i][k];
            f(e.data(), lane.data(), active);
        }
        return;
    }
    e.clear();
    lane.clear();
    // Divergent: sort the entries by (PC, thread, order); within one PC, the k-th entry of each
    // thread's run forms the k-th instruction of that PC.
    std::vector<TState::Ent> &ents = s->ents;
    ents.clear();
    for (int t = 0; t < n; ++t) {
        const AccessLog &p = s->logs[base + t].acc[cls];
        for (size_t i = 0; i < p.size(); ++i)
            ents.push_back(TState::Ent{p.pc[i], (uint32_t)t, (uint32_t)i});
    }
    std::sort(ents.begin(), ents.end(), [](const TState::Ent &a, const TState::Ent &b) {
        return a.pc != b.pc ? a.pc < b.pc : a.lane != b.lane ? a.lane < b.lane : a.seq < b.seq;
    });
    std::vector<std::pair<size_t, size_t>> runs;   // [start, end) of each thread's run
    for (size_t a = 0; a < ents.size();) {
        size_t b = a;
        while (b < ents.size() && ents[b].pc == ents[a].pc)
            ++b;
        runs.clear();
        size_t most = 0;
        for (size_t i = a; i < b;) {
            size_t j = i;
            while (j < b && ents[j].lane == ents[i].lane)
                ++j;
            runs.emplace_back(i, j);
            most = std::max(most, j - i);
            i = j;
        }
        for (size_t k = 0; k < most; ++k) {
            e.clear();
            lane.clear();
            for (const auto &r : runs) {
                if (r.first + k >= r.second) continue;
                const TState::Ent &x = ents[r.first + k];
                e.push_back(s->logs[base + x.lane].acc[cls].v[x.seq]);
                lane.push_back((int)x.lane);
            }
            f(e.data(), lane.data(), (int)e.size());
        }
        a = b;
    }
}

// Divergent branches of a warp in the interval, from its k > 1 distinct block traces (flush
// finds them, in the order of their first lane). Lanes that logged the same blocks move together
// through the walk (the same next blocks, so always in the same part), and a part's
// representative, its lowest lane, is the first lane of its trace: the walk runs over one lane
// of each distinct trace and counts what it would count over all 32 (a reduction's warp has
// two traces: the lanes that add and the rest).
uint64_t divergent_branches(DivergenceWalk &w, const Trace *trace, int k)
{
    w.divergent = 0;
    w.budget = 1ull << 24;
    w.stops.clear();
    uintptr_t first[32];
    uint32_t groups[32] = {};
    int ng = 0;
    for (int l = 0; l < k; ++l) {
        w.t[l] = trace[l].d;
        w.n[l] = trace[l].n;
        w.c[l] = 0;
        int j = 0;
        while (j < ng && first[j] != trace[l].d[0])
            ++j;
        if (j == ng) first[ng++] = trace[l].d[0];
        groups[j] |= 1u << l;
    }
    for (int j = 0; j < ng; ++j)
        w.run(groups[j]);
    return w.divergent;
}

// Empties a CUDA thread's accesses after a fold (the fold's first pass empties the rest).
inline void clear_accesses(Log &l)
{
    for (uint32_t m = l.used; m; m &= m - 1) {
        int cls = __builtin_ctz(m);
        l.acc[cls].clear();
    }
    l.used = 0;
}

void TState::flush()
{
    bb_store();   // the last thread that ran may have ended without a switch point (an error)
    pending = false;
    int n = nthreads;
    // One pass over the logs for what each warp used (most intervals of a reduction hold no
    // global access: the block-wide pass below is then skipped).
    size_t nwarps = ((size_t)n + 31) / 32;
    warp_used.resize(nwarps), warp_bar.resize(nwarps), warp_wop.resize(nwarps);
    warp_traces.resize(nwarps * 32), warp_ntraces.resize(nwarps);
    uint32_t block_used = 0;
    for (int base = 0, w = 0; base < n; base += 32, ++w) {
        uint32_t used = 0, bar = 0, wop = 0;
        Trace *trace = &warp_traces[(size_t)w * 32];
        int k = 0;
        // one pass over the warp's logs: what they used, their distinct traces, and the log
        // emptied but for its accesses (taken out after they are counted)
        for (int l = base, end = std::min(n, base + 32); l < end; ++l) {
            Log &g = logs[l];
            used |= g.used;
            bar = std::max(bar, g.bar);
            wop = std::max(wop, g.wop);
            g.bar = g.wop = 0;
            g.cas_retry = false;
            if (g.bb.empty()) continue;   // not active in this interval
            const Trace t{g.bb.data(), g.bb.size()};
            g.bb.clear();
            int j = 0;
            while (j < k && !(t == trace[j]))
                ++j;
            if (j == k) trace[k++] = t;
        }
        warp_used[w] = used, warp_bar[w] = std::max(bar, block_bar), warp_wop[w] = wop;
        warp_ntraces[w] = k;
        block_used |= used;
    }
    // The model's L1 estimate: the sectors of each global load instruction (PC, k-th execution)
    // merged over the warps of the block.
    if (block_used & (1u << GLD))
        for_each_instruction(this, 0, n, GLD, [&](const uint64_t *e, const int *, int m) {
            merge_buf.clear();
            for (int i = 0; i < m; ++i) {
                uint64_t a = e[i] & kAddrMask, size = 1ull << entry_lg(e[i]);
                for (uint64_t x = a >> 5; x <= (a + size - 1) >> 5; ++x)
                    merge_buf.push_back(x);
            }
            // lanes in order mostly load in address order: the sort is then skipped
            if (!std::is_sorted(merge_buf.begin(), merge_buf.end()))
                std::sort(merge_buf.begin(), merge_buf.end());
            c[F_global_load_sectors_block_merged] +=
                std::unique(merge_buf.begin(), merge_buf.end()) - merge_buf.begin();
        });
    for (int base = 0; base < n; base += 32) {
        int lanes = std::min(32, n - base);
        uint32_t used = warp_used[base / 32];
        for (int cls = 0; cls < NCLS; ++cls) {
            if (!(used & (1u << cls))) continue;
            switch (cls) {
            case GLD:
            case GST:
                for_each_instruction(this, base, lanes, cls,
                                     [&](const uint64_t *e, const int *, int m) {
                    bool ld = cls == GLD;
                    uint64_t bytes = 0, lines = 0;
                    for (int i = 0; i < m; ++i)
                        bytes += 1ull << entry_lg(e[i]);
                    c[ld ? F_global_load_requests : F_global_store_requests]++;
                    c[ld ? F_global_load_sectors : F_global_store_sectors] += sectors(e, m, &lines);
                    c[ld ? F_global_load_lines : F_global_store_lines] += lines;
                    c[ld ? F_global_load_bytes : F_global_store_bytes] += bytes;
                });
                break;
            case SLD:
            case SST:
                for_each_instruction(this, base, lanes, cls,
                                     [&](const uint64_t *e, const int *lane, int m) {
                    bool ld = cls == SLD;
                    uint64_t groups = 0, wf = wavefronts(e, lane, m, &groups);
                    c[ld ? F_shared_load_requests : F_shared_store_requests]++;
                    c[ld ? F_shared_load_wavefronts : F_shared_store_wavefronts] += wf;
                    c[ld ? F_shared_load_bank_conflicts : F_shared_store_bank_conflicts] +=
                        wf - groups;
                });
                break;
            case LDGSTS:
                for_each_instruction(this, base, lanes, cls,
                                     [&](const uint64_t *e, const int *, int m) {
                    uint64_t lines = 0;
                    c[F_global_ldgsts_requests]++;
                    c[F_global_ldgsts_sectors] += sectors(e, m, &lines);
                });
                break;
            default:   // atomics: instructions only
                for_each_instruction(this, base, lanes, cls,
                                     [&](const uint64_t *, const int *, int) {
                    c[cls == GATOM ? F_global_atomic_requests : F_shared_atomic_requests]++;
                });
            }
        }
        c[F_barriers] += warp_bar[base / 32];
        c[F_warp_ops] += warp_wop[base / 32];
        if (warp_ntraces[base / 32] > 1)
            c[F_divergent_branches] +=
                divergent_branches(walk, &warp_traces[(size_t)base], warp_ntraces[base / 32]);
        if (used)
            for (int t = base; t < base + lanes; ++t)
                clear_accesses(logs[t]);   // while they are hot
    }
    block_bar = 0;
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

// Accesses a split kernel made outside any thread's turn (block-uniform code between its thread
// loops): counted nowhere, so a kernel that has them must keep the fibers (tests check 0).
std::atomic<long long> g_split_uncounted{0};

// Empties the unread log (a split kernel's blocks outside the threads' turns).
void drop_discard(TState *s)
{
    Log &d = s->discard;
    if (d.used) g_split_uncounted.fetch_add(1, std::memory_order_relaxed);
    for (uint32_t m = d.used; m; m &= m - 1)
        d.acc[__builtin_ctz(m)].clear();
    d.used = 0;
    d.bb.clear();
}

// Ends the running turn of a row's thread loop at the call of the hook at `ra`: trace-pc logged
// the block holding that call (the loop's own: its next iteration, or its exit) into the turn
// just before, and it is taken out, so that the thread's path ends at its last block of the
// kernel's code as with TM_SPLIT_TURN_END. A last entry that is not that block (the compiler
// put another block between the turn's end and the call) is counted (tests check 0).
constexpr uintptr_t kOwnBlockReach = 256;   // bytes from a block's start to the hook's call
std::atomic<long long> g_split_misplaced{0};
inline void end_row_turn(TState *s, uintptr_t ra)
{
    s->bb_store();
    if (s->cur == &s->discard) return;   // the row's first turn starts: none is running
    Buf<uintptr_t> &bb = s->cur->bb;
    if (bb.n && bb.d[bb.n - 1] <= ra && ra - bb.d[bb.n - 1] < kOwnBlockReach)
        --bb.n;
    else
        g_split_misplaced.fetch_add(1, std::memory_order_relaxed);
}

void profiled_invoke(void *p)
{
    InvokeCtx *ctx = static_cast<InvokeCtx *>(p);
    const uint3 &b = tm_emu_tls.block_idx;
    const dim3 &g = tm_emu_tls.grid_dim;
    long long index = (long long)b.x + (long long)g.x * (b.y + (long long)g.y * b.z);
    if (!block_sampled(index)) return;
    int tid = tm_emu_tls.linear_tid;
    if (tid < 0) {   // a split kernel: one call runs the whole block as thread loops
        const dim3 &bd = tm_emu_tls.block_dim;
        long long threads = (long long)bd.x * bd.y * bd.z;
        ctx->blocks_run.fetch_add(1, std::memory_order_relaxed);
        ctx->threads_run.fetch_add(threads, std::memory_order_relaxed);
        ctx->warps_run.fetch_add((threads + 31) / 32, std::memory_order_relaxed);
        TState *s = running();
        unsigned long long ep = tm_emu_barrier_epoch();
        if (ep != s->epoch) s->new_interval(ep);
        s->pending = true;
        s->to_discard();
        ctx->invoke(ctx->pack);
        s->bb_store();
        drop_discard(s);
        return;
    }
    if (tid == 0) {   // every thread of a block that runs comes here: counted once per block
        const dim3 &bd = tm_emu_tls.block_dim;
        long long threads = (long long)bd.x * bd.y * bd.z;
        ctx->blocks_run.fetch_add(1, std::memory_order_relaxed);
        ctx->threads_run.fetch_add(threads, std::memory_order_relaxed);
        ctx->warps_run.fetch_add((threads + 31) / 32, std::memory_order_relaxed);
    }
    enter(tid);
    ctx->invoke(ctx->pack);
    running()->bb_store();   // the thread ends: its blocks go back to its log before the next
}

}   // namespace

// ---- link-time wraps of the emulator's entry points (setup.py passes -Wl,--wrap=...) ----
extern "C" {
cudaError_t __real__ZN6tm_emu6launchEPKvPFvPvES2_4dim3S5_m(const void *, void (*)(void *), void *,
                                                           dim3, dim3, size_t);
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

cudaError_t __real__ZN6tm_emu19launch_whole_blocksEPKvPFvPvES2_4dim3S5_m(const void *,
                                                                         void (*)(void *), void *,
                                                                         dim3, dim3, size_t);
}   // extern "C"

// Profiled launches of kernels split at their barriers (tests: whether the build has them).
static std::atomic<long long> g_split_launches{0};
TM_EXPORT long long tm_profile_split_launches(void)
{
    return g_split_launches.load();
}
TM_EXPORT long long tm_profile_split_uncounted(void)
{
    return g_split_uncounted.load();
}
TM_EXPORT long long tm_profile_split_misplaced(void)
{
    return g_split_misplaced.load();
}

typedef cudaError_t (*LaunchFn)(const void *, void (*)(void *), void *, dim3, dim3, size_t);

// A profiled launch through `real` (fibers: tm_emu::launch; a split kernel's thread loops:
// tm_emu::launch_whole_blocks).
static cudaError_t profiled_launch(LaunchFn real, const void *func, void (*invoke)(void *),
                                   void *pack, dim3 grid, dim3 block, size_t shared_bytes)
{
    if (!g_enabled) return real(func, invoke, pack, grid, block, shared_bytes);
    InvokeCtx ctx;
    ctx.invoke = invoke;
    ctx.pack = pack;
    {
        std::lock_guard<std::mutex> g(g_mu);
        g_ranges.clear();
        for (auto &kv : g_allocs)
            g_ranges.push_back(Range{kv.first, kv.second});
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
    cudaError_t err = real(func, profiled_invoke, &ctx, grid, block, shared_bytes);
    g_active.store(0);
    std::lock_guard<std::mutex> g(g_mu);
    uint64_t sum[NFIELDS] = {};
    std::unordered_map<uintptr_t, uint64_t> atom;
    for (TState *s : g_states) {
        if (s->pending) s->flush();
        s->epoch = 0;
        for (int i = 0; i < NFIELDS; ++i)
            sum[i] += s->c[i];
        for (auto &kv : s->atom)
            atom[kv.first] += kv.second;
        s->atom.clear();
    }
    uint64_t most = 0;
    for (auto &kv : atom)
        most = std::max(most, kv.second);
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

extern "C" {
cudaError_t __wrap__ZN6tm_emu6launchEPKvPFvPvES2_4dim3S5_m(const void *func, void (*invoke)(void *),
                                                           void *pack, dim3 grid, dim3 block,
                                                           size_t shared_bytes)
{
    return profiled_launch(__real__ZN6tm_emu6launchEPKvPFvPvES2_4dim3S5_m, func, invoke, pack, grid,
                           block, shared_bytes);
}

cudaError_t __wrap__ZN6tm_emu19launch_whole_blocksEPKvPFvPvES2_4dim3S5_m(const void *func,
                                                                         void (*invoke)(void *),
                                                                         void *pack, dim3 grid,
                                                                         dim3 block,
                                                                         size_t shared_bytes)
{
    if (g_enabled) g_split_launches.fetch_add(1, std::memory_order_relaxed);
    return profiled_launch(__real__ZN6tm_emu19launch_whole_blocksEPKvPFvPvES2_4dim3S5_m, func,
                           invoke, pack, grid, block, shared_bytes);
}

// ---- a kernel split at its barriers: emu/profile/split_hooks.h's macros call these ----
// The calling OS thread's state for the hooks below, once per block (null: not profiling).
void *tm_profile_split_state(void) noexcept
{
    return g_active.load(std::memory_order_relaxed) ? running() : nullptr;
}

// CUDA thread `tid` (linear) starts its turn in a thread loop, after the turn before it in the
// row (if any) ends: the hooks log into its log.
void tm_profile_split_thread(void *st, size_t tid) noexcept
{
    if (!st) return;
    TState *s = static_cast<TState *>(st);
    end_row_turn(s, (uintptr_t)__builtin_return_address(0));
    s->pending = true;
    s->cur = &s->logs[tid];
    s->bb_load();
    // The turn's first block: trace-pc logged the block holding this call before the call
    // (into the unread log), so every thread's trace starts here, as a fiber's starts at the
    // block after its barrier; the lanes then part where the kernel's code branches.
    if (__builtin_expect(s->bb_at == s->bb_end, 0)) bb_grow(s);
    *s->bb_at++ = (uintptr_t)__builtin_return_address(0);
}

// The turn ends: what runs next (the loop's own blocks) goes to the unread log.
void tm_profile_split_thread_end(void *st) noexcept
{
    if (!st) return;
    TState *s = static_cast<TState *>(st);
    s->bb_store();
    s->to_discard();
}

// The last turn of a row's thread loop ends (the call follows the loop).
void tm_profile_split_thread_last(void *st) noexcept
{
    if (!st) return;
    TState *s = static_cast<TState *>(st);
    end_row_turn(s, (uintptr_t)__builtin_return_address(0));
    s->to_discard();
}

// Where the kernel's __syncthreads() was (every thread reaches it: the split applies only
// then): each thread counts a barrier and the interval's logs are folded, as when a fiber
// barrier opens.
void tm_profile_split_barrier(void *st, int) noexcept
{
    if (!st) return;
    TState *s = static_cast<TState *>(st);
    s->bb_store();
    s->block_bar = 1;   // every thread (the split applies only then): one per warp
    s->flush();
    drop_discard(s);
    s->bb_load();
}

// Where a __syncwarp() of a warp `if` was (barrier_split's warp granularity): each lane of the
// warps whose mask is set counts a warp operation, as each fiber does at its __syncwarp (no fold:
// the fibers fold at barriers only).
void tm_profile_split_warp_sync(void *st, const unsigned *lane_masks, int) noexcept
{
    if (!st) return;
    TState *s = static_cast<TState *>(st);
    for (int base = 0; base < s->nthreads; base += 32)
        for (unsigned m = lane_masks[base / 32]; m; m &= m - 1)
            ++s->logs[base + __builtin_ctz(m)].wop;
}

unsigned long long __wrap__ZN6tm_emu7warp_opEijyiiPKci(int op, unsigned mask,
                                                       unsigned long long value, int arg, int width,
                                                       const char *file, int line)
{
    int tid = record_event(false);
    unsigned long long r =
        __real__ZN6tm_emu7warp_opEijyiiPKci(op, mask, value, arg, width, file, line);
    if (tid >= 0) enter(tid);
    return r;
}

void __wrap_tm_emu_syncthreads(const char *file, int line)
{
    int tid = record_event(true);
    __real_tm_emu_syncthreads(file, line);
    if (tid >= 0) enter(tid);
}

int __wrap_tm_emu_syncthreads_op(int op, int pred, const char *file, int line)
{
    int tid = record_event(true);
    int r = __real_tm_emu_syncthreads_op(op, pred, file, line);
    if (tid >= 0) enter(tid);
    return r;
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
}   // extern "C"

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
    for (int i = 0; i < n && i < NFIELDS; ++i)
        out[i] = g_totals[i];
    return NFIELDS;
}

// The counters' names, comma-separated, in tm_profile_end's order.
TM_EXPORT const char *tm_profile_fields(void)
{
    return kFieldNames;
}

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
// TM_PC: the hook's return address, the access's place in the kernel's machine code (its PC).
#define TM_PC ((uintptr_t)__builtin_return_address(0))
extern "C" {
#define TM_RW(n, lg)                                           \
    TM_EXPORT void __tsan_read##n(void *p)                     \
    {                                                          \
        record(p, lg, 0, TM_PC);                               \
    }                                                          \
    TM_EXPORT void __tsan_write##n(void *p)                    \
    {                                                          \
        record(p, lg, 1, TM_PC);                               \
    }                                                          \
    TM_EXPORT void __tsan_unaligned_read##n(void *p)           \
    {                                                          \
        record(p, lg, 0, TM_PC);                               \
    }                                                          \
    TM_EXPORT void __tsan_unaligned_write##n(void *p)          \
    {                                                          \
        record(p, lg, 1, TM_PC);                               \
    }                                                          \
    TM_EXPORT void __tsan_volatile_read##n(void *p)            \
    {                                                          \
        record(p, lg, 0, TM_PC);                               \
    }                                                          \
    TM_EXPORT void __tsan_volatile_write##n(void *p)           \
    {                                                          \
        record(p, lg, 1, TM_PC);                               \
    }                                                          \
    TM_EXPORT void __tsan_unaligned_volatile_read##n(void *p)  \
    {                                                          \
        record(p, lg, 0, TM_PC);                               \
    }                                                          \
    TM_EXPORT void __tsan_unaligned_volatile_write##n(void *p) \
    {                                                          \
        record(p, lg, 1, TM_PC);                               \
    }
// clang-format off
TM_RW(1, 0)
TM_RW(2, 1)
TM_RW(4, 2)
TM_RW(8, 3)
TM_RW(16, 4)
// clang-format on
#undef TM_RW

// A range (GCC does not emit these for plain code; counted as one access per 16 bytes or less).
TM_EXPORT void __tsan_read_range(void *p, unsigned long size)
{
    for (unsigned long off = 0; off < size; off += 16) {
        unsigned long left = size - off;
        record((char *)p + off,
               left >= 16  ? 4
               : left >= 8 ? 3
               : left >= 4 ? 2
               : left >= 2 ? 1
                           : 0,
               0, TM_PC);
    }
}
TM_EXPORT void __tsan_write_range(void *p, unsigned long size)
{
    for (unsigned long off = 0; off < size; off += 16) {
        unsigned long left = size - off;
        record((char *)p + off,
               left >= 16  ? 4
               : left >= 8 ? 3
               : left >= 4 ? 2
               : left >= 2 ? 1
                           : 0,
               1, TM_PC);
    }
}

// The emulator's float atomics are compare-and-swap loops (cuda_emu.h); a GPU runs one atomic
// instruction. A swap that fails (another OS thread got there first) makes the lane run the
// loop's blocks once more: those are taken out of its block trace at its next swap, so that
// retries, which depend on timing, count no divergent branch.
static inline void cas_begin()
{
    if (!g_active.load(std::memory_order_relaxed)) return;
    TState *s = running();
    Log &l = cur_log(s);
    if (l.cas_retry) {
        s->bb_store();
        l.bb.shrink_to(l.cas_mark);
        s->bb_load();
        l.cas_retry = false;
    }
}

static inline void cas_end(bool ok)
{
    if (ok || !g_active.load(std::memory_order_relaxed)) return;
    TState *s = running();
    s->bb_store();
    Log &l = cur_log(s);
    l.cas_mark = l.bb.size();
    l.cas_retry = true;
}

// -fsanitize-coverage=trace-pc: called at the start of every basic block of the kernel
// objects; the return address names the block (divergence).
TM_EXPORT void __sanitizer_cov_trace_pc(void)
{
    record_bb(TM_PC);
}

// cp.async on the emulator (cuda/matmul_fast.cu's cp_async16/cp_async4 in the profile build):
// copies src_bytes (0 or size) bytes and zero-fills the rest of size, and counts one LDGSTS
// access of size bytes at src (no sectors when src_bytes is 0), as ncu counts cp.async
// (l1tex__t_{requests,sectors}_pipe_lsu_mem_global_op_ldgsts), not as a global load and a
// shared store.
TM_EXPORT void tm_profile_cp_async(void *dst, const void *src, int size, int src_bytes)
{
    if (src_bytes > 0) std::memcpy(dst, src, (size_t)src_bytes);
    if (src_bytes < size)
        std::memset((char *)dst + (src_bytes > 0 ? src_bytes : 0), 0,
                    (size_t)(size - (src_bytes > 0 ? src_bytes : 0)));
    record_ldgsts(src,
                  size >= 16  ? 4
                  : size >= 8 ? 3
                  : size >= 4 ? 2
                  : size >= 2 ? 1
                              : 0,
                  src_bytes <= 0, TM_PC);
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
#define TM_ATOMICS(n, T, lg)                                                                       \
    TM_EXPORT T __tsan_atomic##n##_load(const volatile T *a, int)                                  \
    {                                                                                              \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                               \
    }                                                                                              \
    TM_EXPORT void __tsan_atomic##n##_store(volatile T *a, T v, int)                               \
    {                                                                                              \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                  \
    }                                                                                              \
    TM_EXPORT T __tsan_atomic##n##_exchange(volatile T *a, T v, int)                               \
    {                                                                                              \
        record_atomic(a, lg, TM_PC);                                                               \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                        \
    }                                                                                              \
    TM_EXPORT T __tsan_atomic##n##_fetch_add(volatile T *a, T v, int)                              \
    {                                                                                              \
        record_atomic(a, lg, TM_PC);                                                               \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    TM_EXPORT T __tsan_atomic##n##_fetch_sub(volatile T *a, T v, int)                              \
    {                                                                                              \
        record_atomic(a, lg, TM_PC);                                                               \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    TM_EXPORT T __tsan_atomic##n##_fetch_and(volatile T *a, T v, int)                              \
    {                                                                                              \
        record_atomic(a, lg, TM_PC);                                                               \
        return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    TM_EXPORT T __tsan_atomic##n##_fetch_or(volatile T *a, T v, int)                               \
    {                                                                                              \
        record_atomic(a, lg, TM_PC);                                                               \
        return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                          \
    }                                                                                              \
    TM_EXPORT T __tsan_atomic##n##_fetch_xor(volatile T *a, T v, int)                              \
    {                                                                                              \
        record_atomic(a, lg, TM_PC);                                                               \
        return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    TM_EXPORT T __tsan_atomic##n##_fetch_nand(volatile T *a, T v, int)                             \
    {                                                                                              \
        record_atomic(a, lg, TM_PC);                                                               \
        return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                        \
    }                                                                                              \
    TM_EXPORT int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int, int)   \
    {                                                                                              \
        cas_begin();                                                                               \
        bool ok = __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        if (ok) record_atomic(a, lg, TM_PC);                                                       \
        cas_end(ok);                                                                               \
        return ok;                                                                                 \
    }                                                                                              \
    TM_EXPORT int __tsan_atomic##n##_compare_exchange_weak(volatile T *a, T *c, T v, int, int)     \
    {                                                                                              \
        cas_begin();                                                                               \
        bool ok = __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        if (ok) record_atomic(a, lg, TM_PC);                                                       \
        cas_end(ok);                                                                               \
        return ok;                                                                                 \
    }                                                                                              \
    TM_EXPORT T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int, int)         \
    {                                                                                              \
        cas_begin();                                                                               \
        bool ok =                                                                                  \
            __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
        if (ok) record_atomic(a, lg, TM_PC);                                                       \
        cas_end(ok);                                                                               \
        return c;                                                                                  \
    }
// clang-format off
TM_ATOMICS(8, unsigned char, 0)
TM_ATOMICS(16, unsigned short, 1)
TM_ATOMICS(32, unsigned int, 2)
TM_ATOMICS(64, unsigned long long, 3)
// clang-format on
#undef TM_ATOMICS
TM_EXPORT void __tsan_atomic_thread_fence(int)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
TM_EXPORT void __tsan_atomic_signal_fence(int)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
}   // extern "C"
