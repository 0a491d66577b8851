// tiledmm_check.h: check mode's runtime (tm.compile(..., check=True), tm.run(..., check=True) on
// the emulator). Included by the prelude (tiledmm_kernel.h) at its end when TM_EMU and TM_CHECK
// are defined, never on its own: it uses the prelude's emulator names and tm_user_finish.
#pragma once
// The state of a check belongs to one launch (tm_check_launch_t, on the stack of the generated
// launcher), never to the library: two threads may check the same kernel at once, each with its
// own verdict. Kernel code finds its launch through tm_check_cur, a per-OS-thread pointer that
// tm_check_launch sets at the entry of every CUDA thread (an OS thread runs one block, hence one
// launch, at a time).
//
// Every pointer parameter of the kernel becomes a tm_checked_ptr<T> that knows the buffer passed
// for it (a vector pointer, float4 *, too: its elements are checked for the index only, their
// reads and writes not recorded); an array parameter (float A[][N]) a tm_checked_arr<T, N> and a
// float ** a tm_checked_rows<T>, checked index by index and reported as indexed (A[3][40], C[40][2]
// for a row beyond the table of row pointers: the table is not read there). Indexing (p[i]) and dereferencing (*p) give a tm_gl_ref proxy for number types, so that
// check mode knows whether an element is read or written; pointers derived with + - += -= ++ --,
// &p[i] and reinterpret_cast<U *>(p) stay checked. An access outside the buffer does not touch
// memory (a read gives 0, a write is dropped), and it is reported with the thread and block that
// made it. Writes and reads are recorded per element (tm_gl_cell): a write and another write,
// or a read and a write, of one element by different blocks (unordered within a launch), or by
// two threads of a block with no __syncthreads() between them, are a race; a thread's own read
// then write is not, nor are atomics. Once a thread of the launch called __threadfence(), reads
// of what other blocks wrote are no longer reported (the last-block pattern of CUDA's
// threadFenceReduction orders them with the fence and an atomic). A plain pointer made from a
// checked one (float *q = p + 1; (float (*)[N])p) is no longer checked.
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

struct tm_check_launch_t {
    std::atomic<long long> hits{0};
    std::mutex mu;
    long long block = -1;   // rank of the report kept: the lowest block involved
    char message[1024] = {0};
    size_t dyn_bytes;   // the launch's shared_bytes
    std::atomic<bool> fenced{false};   // a thread called __threadfence() (tm_gl_fenced)
    bool told = false;   // the first report was written to stderr (tm_check_report_at)
    // whole programs: the first read of uninitialised device memory (lowest block), kept apart
    std::atomic<long long> uninit_hits{0};
    long long uninit_block = -1;
    char uninit[1024] = {0};
    explicit tm_check_launch_t(size_t shared_bytes) : dyn_bytes(shared_bytes) {}
};
// (inline, hidden: one variable for every translation unit of one shared object, as in a whole
// program of several files, whose launch and kernel may be compiled apart)
#define TM_CHECK_ONE __attribute__((visibility("hidden"))) inline thread_local
TM_CHECK_ONE tm_check_launch_t *tm_check_cur = nullptr;
// The barrier epoch at which the block running on this OS thread started: shared memory whose
// last write is older was never written by this block.
TM_CHECK_ONE unsigned long long tm_check_block_epoch = 0;

static inline long long tm_check_block_linear()
{
    const uint3 b = tm_emu_tls.block_idx;
    const dim3 g = tm_emu_tls.grid_dim;
    return b.x + (long long)g.x * (b.y + (long long)g.y * b.z);
}

// Records a problem found by the calling CUDA thread, ranked by `block` (a linear block index):
// the first report of the lowest block is kept. A block runs on one OS thread in a fixed order,
// so the report does not depend on how blocks were spread over OS threads.
static inline void tm_check_plain_types(char *text, size_t size);
// In tiledmm's worker process (TILEDMM_WORKER=1), the launch's first report is also written to
// stderr as it is recorded, as one line `tiledmm check: <report>`: a launch that then never ends
// is killed at its timeout, and the caller (tiledmm/confine/isolation.py) quotes that line with the
// timeout. In the caller's own process (isolate=False) nothing is written.
static inline bool tm_check_in_worker()
{
    static const bool yes = [] {
        const char *w = getenv("TILEDMM_WORKER");
        return w && w[0] == '1';
    }();
    return yes;
}
__attribute__((noinline, format(printf, 2, 3))) static void tm_check_report_at(long long block,
                                                                               const char *fmt, ...)
{
    tm_check_launch_t *s = tm_check_cur;
    if (!s) return;
    s->hits.fetch_add(1);
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->block >= 0 && s->block <= block) return;
    s->block = block;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->message, sizeof s->message, fmt, ap);
    va_end(ap);
    if (!s->told && tm_check_in_worker()) {
        s->told = true;
        char line[sizeof s->message];
        snprintf(line, sizeof line, "%s", s->message);
        tm_check_plain_types(line, sizeof line);
        fprintf(stderr, "tiledmm check: %s\n", line);
        fflush(stderr);
    }
}
#define tm_check_report(...) tm_check_report_at(tm_check_block_linear(), __VA_ARGS__)

template <typename T>
static inline T &tm_check_scratch()
{
    typedef typename std::remove_const<T>::type U;
    static thread_local U scratch;
    scratch = U();
    return scratch;
}

// The name of an element type in reports (for pointers made with reinterpret_cast).
template <typename T>
struct tm_type_name {
    static const char *get() { return "element"; }
};
#define TM_TYPE_NAME(T)            \
    template <>                    \
    struct tm_type_name<T> {       \
        static const char *get()   \
        {                          \
            return #T;             \
        }                          \
    };                             \
    template <>                    \
    struct tm_type_name<const T> { \
        static const char *get()   \
        {                          \
            return "const " #T;    \
        }                          \
    };
// clang-format off
TM_TYPE_NAME(float) TM_TYPE_NAME(double) TM_TYPE_NAME(int) TM_TYPE_NAME(unsigned)
TM_TYPE_NAME(char) TM_TYPE_NAME(signed char) TM_TYPE_NAME(unsigned char) TM_TYPE_NAME(short)
TM_TYPE_NAME(unsigned short) TM_TYPE_NAME(long) TM_TYPE_NAME(unsigned long)
TM_TYPE_NAME(long long) TM_TYPE_NAME(unsigned long long)
TM_TYPE_NAME(float2) TM_TYPE_NAME(float3) TM_TYPE_NAME(float4) TM_TYPE_NAME(double2)
TM_TYPE_NAME(double4) TM_TYPE_NAME(int2) TM_TYPE_NAME(int4) TM_TYPE_NAME(uint2) TM_TYPE_NAME(uint4)
// clang-format on
#undef TM_TYPE_NAME

    // __syncwarp() calls each thread passed in the current barrier interval (per OS thread: the
    // block running on it). Lanes of one warp are ordered by a __syncwarp() they both passed.
    struct tm_sw_t {
    unsigned long long epoch;
    unsigned count;
};
TM_CHECK_ONE tm_sw_t tm_sw_state[1024];
static inline unsigned tm_sw_count(int t, unsigned long long e)
{
    return tm_sw_state[t].epoch == e ? tm_sw_state[t].count : 0u;
}
static inline void tm_check_syncwarp(unsigned mask = 0xffffffffu,
                                     const char *file = __builtin_FILE(),
                                     int line = __builtin_LINE())
{
    __syncwarp(mask, file, line);
    const unsigned long long e = tm_emu_barrier_epoch();
    tm_sw_t &s = tm_sw_state[tm_emu_tls.linear_tid];
    if (s.epoch != e) {
        s.epoch = e;
        s.count = 0;
    }
    ++s.count;
}
#define __syncwarp tm_check_syncwarp

static inline void tm_check_thread_str(char *buf, size_t n, long long t)
{
    const dim3 d = tm_emu_tls.block_dim;
    snprintf(buf, n, "(%u,%u,%u)", (unsigned)(t % d.x), (unsigned)((t / d.x) % d.y),
             (unsigned)(t / ((long long)d.x * d.y)));
}
static inline void tm_check_block_str(char *buf, size_t n, long long b)
{
    const dim3 g = tm_emu_tls.grid_dim;
    snprintf(buf, n, "(%u,%u,%u)", (unsigned)(b % g.x), (unsigned)((b / g.x) % g.y),
             (unsigned)(b / ((long long)g.x * g.y)));
}

// ---- global memory: the buffers of one launch ----
// One element's accesses in this launch. The last write: `owner` is 1 + the linear index of the
// block that wrote it (0: not written yet); `info` packs that write's thread (bits 0-15), its
// __syncwarp count (16-31) and the low 32 bits of its barrier epoch (32-63). The readers: `r1`
// the first block that read it, `r2` a block other than r1's that read it, each as 1 + the
// block's linear index (bits 0-47) and the reading thread (48-63); `rinfo` the reads of the
// current barrier interval in the block that read it last: the first reader (bits 0-9), 1 + another
// reader (10-20), the latest reader's __syncwarp count (21-31), the interval's epoch (32-63).
// Atomics, because blocks run in parallel: a read and a write of one element by two blocks
// always find each other.
struct tm_gl_cell {
    std::atomic<unsigned long long> owner, info, r1, r2, rinfo;
};

// A pointer or array argument of one launch: what reports say about it, and its record of
// writes and reads. An array parameter (float A[][N]) or a float ** is an array of `ndim`
// dimensions `dims` (dims[0] the rows of the array passed; for a float ** of one row, the row's
// length is not known: -1).
struct tm_check_buf {
    const char *name, *type;   // the parameter as the student declared it: "C", "float *"
    long long count;   // elements of the buffer passed
    size_t elem_size;
    tm_gl_cell *cells;   // one per element for non-const pointers (null: not recorded)
    int ndim;
    long long dims[5];
    // Whole programs (tm.run, check=True): the bytes of the device allocation written so far,
    // from `base` (null: not tracked, as for tm.compile's kernels), and the flag that ends the
    // tracking once the kernel reaches the buffer through a plain pointer (writes unseen).
    unsigned char *init = nullptr;
    std::atomic<bool> *untracked = nullptr;

    tm_check_buf(const char *n, const char *t, long long c, size_t es, bool record, int nd = 1,
                 const long long *d = nullptr)
        : name(n), type(t), count(c), elem_size(es),
          // calloc: the pages of a large buffer cost nothing until an element is written
          cells(record && c > 0 ? static_cast<tm_gl_cell *>(calloc((size_t)c, sizeof(tm_gl_cell)))
                                : nullptr),
          ndim(nd < 1   ? 1
               : nd > 5 ? 5
                        : nd),
          dims{c, 0, 0, 0, 0}
    {
        for (int l = 0; d && l < ndim; ++l)
            dims[l] = d[l];
    }
    ~tm_check_buf() { free(cells); }
    tm_check_buf(const tm_check_buf &) = delete;
    tm_check_buf &operator=(const tm_check_buf &) = delete;
};

// An element as the student indexes it: A[3][40] for an array parameter or a float **, x[7]
// for a pointer.
static inline void tm_check_elem_str(char *out, size_t n, const tm_check_buf *buf, long long flat)
{
    long long idx[5] = {flat, 0, 0, 0, 0};
    const int nd = buf->ndim;
    bool shaped = nd > 1 && flat >= 0;
    for (int l = 1; l < nd; ++l)
        shaped = shaped && buf->dims[l] > 0;
    if (shaped) {
        for (int l = nd - 1; l >= 1; --l) {
            idx[l] = flat % buf->dims[l];
            flat /= buf->dims[l];
        }
        idx[0] = flat;
    }
    size_t k = (size_t)snprintf(out, n, "%s", buf->name);
    for (int l = 0; l < (shaped ? nd : 1) && k < n; ++l)
        k += (size_t)snprintf(out + k, n - k, "[%lld]", idx[l]);
}

// The indices of an access through an array parameter or a float ** (n of them), and the first
// dimension whose index is outside its extent (-1: none). n == 0: a pointer's flat index.
struct tm_gl_idx {
    int n = 0, bad = -1;
    long long i[5] = {0, 0, 0, 0, 0};
};

// `what`: "read", "write", "read and write" (+= and the like), "atomic" or "access" (an element
// of a struct type, reached as a plain reference).
__attribute__((noinline)) static void tm_check_fail(const tm_check_buf *buf, const char *as,
                                                    long long index, long long count,
                                                    const char *what)
{
    const uint3 t = tm_emu_tls.thread_idx, b = tm_emu_tls.block_idx;
    char holds[96];
    if (as)
        snprintf(holds, sizeof holds, "holds %lld %s element%s", count, as, count == 1 ? "" : "s");
    else
        snprintf(holds, sizeof holds, "has %lld element%s", count, count == 1 ? "" : "s");
    tm_check_report("out-of-bounds %s of %s[%lld]%s%s (the buffer passed for '%s' (%s) %s) by "
                    "thread (%u,%u,%u) of block (%u,%u,%u)",
                    what, buf->name, index, as ? " as " : "", as ? as : "", buf->name, buf->type,
                    holds, t.x, t.y, t.z, b.x, b.y, b.z);
}

// An access through an array parameter or a float ** with an index outside its dimension:
// reported with the indices as written (A[3][40], C[40][2]).
__attribute__((noinline)) static void tm_check_fail_nd(const tm_check_buf *buf, const tm_gl_idx &at,
                                                       const char *what)
{
    const uint3 t = tm_emu_tls.thread_idx, b = tm_emu_tls.block_idx;
    char elem[160], shape[96];
    size_t k = (size_t)snprintf(elem, sizeof elem, "%s", buf->name);
    for (int l = 0; l < at.n && k < sizeof elem; ++l)
        k += (size_t)snprintf(elem + k, sizeof elem - k, "[%lld]", at.i[l]);
    k = 0;
    for (int l = 0; l < buf->ndim && k < sizeof shape; ++l)
        k +=
            (size_t)(buf->dims[l] < 0 ? snprintf(shape + k, sizeof shape - k, "%s?", l ? " x " : "")
                                      : snprintf(shape + k, sizeof shape - k, "%s%lld",
                                                 l ? " x " : "", buf->dims[l]));
    const int l = at.bad;
    char why[128];
    if (l == 0 && strstr(buf->type, "**"))
        snprintf(why, sizeof why, "row %lld is beyond its table of %lld row pointer%s", at.i[0],
                 buf->dims[0], buf->dims[0] == 1 ? "" : "s");
    else
        snprintf(why, sizeof why, "index %lld of dimension %d is outside [0, %lld)", at.i[l], l + 1,
                 buf->dims[l]);
    tm_check_report("out-of-bounds %s of %s (the array passed for '%s' (%s) is %s: %s) by thread "
                    "(%u,%u,%u) of block (%u,%u,%u)",
                    what, elem, buf->name, buf->type, shape, why, t.x, t.y, t.z, b.x, b.y, b.z);
}

// Whole programs: device memory that nothing wrote (no copy, memset, or kernel), read by a kernel
// (compute-sanitizer's initcheck); reading marks nothing, writing marks the element's bytes.
__attribute__((noinline)) static void tm_gl_uninit(const tm_check_buf *buf, long long index)
{
    const uint3 t = tm_emu_tls.thread_idx, b = tm_emu_tls.block_idx;
    char elem[160];
    tm_check_elem_str(elem, sizeof elem, buf, index);
    tm_check_launch_t *s = tm_check_cur;
    if (!s) return;
    s->uninit_hits.fetch_add(1);
    const long long block = tm_check_block_linear();
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->uninit_block >= 0 && s->uninit_block <= block) return;
    s->uninit_block = block;
    snprintf(s->uninit, sizeof s->uninit,
             "read of uninitialised device memory: %s (the buffer passed for '%s' (%s)) by thread "
             "(%u,%u,%u) of block (%u,%u,%u): no cudaMemcpy, cudaMemset or earlier write of a "
             "kernel set it",
             elem, buf->name, buf->type, t.x, t.y, t.z, b.x, b.y, b.z);
}
static inline bool tm_gl_tracked(const tm_check_buf *buf)
{
    return buf && buf->init && !buf->untracked->load(std::memory_order_relaxed);
}
static inline void tm_gl_init_read(const tm_check_buf *buf, long long index, size_t size)
{
    if (!tm_gl_tracked(buf)) return;
    const unsigned char *p = buf->init + (size_t)index * size;
    for (size_t k = 0; k < size; ++k)
        if (!__atomic_load_n(p + k, __ATOMIC_RELAXED)) {
            tm_gl_uninit(buf, index);
            return;
        }
}
static inline void tm_gl_init_write(const tm_check_buf *buf, long long index, size_t size)
{
    if (!buf || !buf->init) return;
    unsigned char *p = buf->init + (size_t)index * size;
    for (size_t k = 0; k < size; ++k)
        __atomic_store_n(p + k, (unsigned char)1, __ATOMIC_RELAXED);
}
// The buffer reached through a plain pointer: its writes from here are not seen.
static inline void tm_gl_escape(const tm_check_buf *buf)
{
    if (buf && buf->untracked) buf->untracked->store(true, std::memory_order_relaxed);
}

// Races in global memory. `kind`: what this thread does and what the other one did:
// TM_SH_WAW a write after a write, TM_SH_RAW a read after a write, TM_SH_WAR a write after a read.
enum { TM_GL_WAW, TM_GL_RAW, TM_GL_WAR };
__attribute__((noinline)) static void tm_gl_race(int kind, const tm_check_buf *buf, long long index,
                                                 long long other_block, long long other_tid)
{
    const long long me_block = tm_check_block_linear(), me_tid = tm_emu_tls.linear_tid;
    char me[48], them[48], mb[48], ob[48], elem[160];
    tm_check_thread_str(me, sizeof me, me_tid);
    tm_check_thread_str(them, sizeof them, other_tid);
    tm_check_block_str(mb, sizeof mb, me_block);
    tm_check_block_str(ob, sizeof ob, other_block);
    tm_check_elem_str(elem, sizeof elem, buf, index);
    const char *what = kind == TM_GL_WAW   ? "write after write"
                       : kind == TM_GL_RAW ? "read after write"
                                           : "write after read";
    if (other_block == me_block) {
        tm_check_report("global-memory race (%s) on %s (the buffer passed for '%s' (%s)) in block "
                        "%s: thread %s %s it after thread %s %s it, with no __syncthreads() "
                        "between them",
                        what, elem, buf->name, buf->type, mb, me,
                        kind == TM_GL_RAW ? "reads" : "writes", them,
                        kind == TM_GL_WAR ? "read" : "wrote");
        return;
    }
    // Two blocks: named in block order, so that the report does not depend on which ran first.
    const bool first = me_block < other_block;
    if (kind == TM_GL_WAW) {
        tm_check_report_at(first ? me_block : other_block,
                           "global-memory race (write after write) on %s (the buffer passed for "
                           "'%s' (%s)): thread %s of block %s and thread %s of block %s both write "
                           "it; the blocks of a launch are not ordered (give each element one "
                           "writer, or use an atomic)",
                           elem, buf->name, buf->type, first ? me : them, first ? mb : ob,
                           first ? them : me, first ? ob : mb);
        return;
    }
    const bool me_reads = kind == TM_GL_RAW;
    const char *v1 = (first ? me_reads : !me_reads) ? "reads" : "writes";
    const char *v2 = (first ? me_reads : !me_reads) ? "writes" : "reads";
    tm_check_report_at(first ? me_block : other_block,
                       "global-memory race (read and write) on %s (the buffer passed for '%s' "
                       "(%s)): thread %s of block %s %s it and thread %s of block %s %s it; the "
                       "blocks of a launch are not ordered (a block cannot read what another "
                       "block of the same launch writes: split the work into two launches)",
                       elem, buf->name, buf->type, first ? me : them, first ? mb : ob, v1,
                       first ? them : me, first ? ob : mb, v2);
}

// __threadfence() orders a block's writes before what it does next (an atomic that tells the
// last block to go on, as in CUDA's threadFenceReduction sample): once a thread of the launch
// called it, reads of what another block wrote are no longer reported as races.
static inline bool tm_gl_fenced()
{
    return tm_check_cur && tm_check_cur->fenced.load(std::memory_order_relaxed);
}
static inline void tm_check_threadfence()
{
    __threadfence();
    if (tm_check_cur) tm_check_cur->fenced.store(true, std::memory_order_relaxed);
}
static inline void tm_check_threadfence_system()
{
    __threadfence_system();
    if (tm_check_cur) tm_check_cur->fenced.store(true, std::memory_order_relaxed);
}
#define __threadfence tm_check_threadfence
#define __threadfence_system tm_check_threadfence_system

static inline unsigned long long tm_gl_me(long long block, int t)
{
    return (unsigned long long)(block + 1) | ((unsigned long long)(t & 0xffff) << 48);
}
static inline long long tm_gl_block_of(unsigned long long r)
{
    return (long long)(r & 0xffffffffffffULL) - 1;
}
static inline int tm_gl_tid_of(unsigned long long r)
{
    return (int)(r >> 48);
}

static inline void tm_gl_on_write(const tm_check_buf *buf, long long index)
{
    tm_gl_cell &c = buf->cells[index];
    const long long block = tm_check_block_linear();
    const unsigned long long me = (unsigned long long)block + 1;
    const int t = tm_emu_tls.linear_tid;
    const unsigned long long e = tm_emu_barrier_epoch();
    const unsigned sw = tm_sw_count(t, e);
    const unsigned long long info =
        (unsigned long long)(t & 0xffff) | ((unsigned long long)(sw & 0xffff) << 16) | (e << 32);
    const unsigned long long owner = c.owner.exchange(me, std::memory_order_acq_rel);
    const unsigned long long prev = c.info.exchange(info, std::memory_order_acq_rel);
    if (owner != 0) {
        const int ptid = (int)(prev & 0xffff);
        if (owner != me) {
            tm_gl_race(TM_GL_WAW, buf, index, (long long)owner - 1, ptid);
            return;
        }
        const unsigned psw = (unsigned)((prev >> 16) & 0xffff);
        const bool same_interval = (prev >> 32) == (e & 0xffffffffu);
        if (same_interval && ptid != t && !((ptid >> 5) == (t >> 5) && sw > psw)) {
            tm_gl_race(TM_GL_WAW, buf, index, (long long)owner - 1, ptid);
            return;
        }
    }
    // Reads of this element: by another block (a race unless __threadfence() was called), or by
    // another thread of this block in this barrier interval.
    const unsigned long long r1 = c.r1.load(std::memory_order_acquire);
    if (!r1) return;
    const unsigned long long r2 = c.r2.load(std::memory_order_acquire);
    const unsigned long long other = tm_gl_block_of(r1) != block ? r1 : r2;
    if (other) {
        if (!tm_gl_fenced())
            tm_gl_race(TM_GL_WAR, buf, index, tm_gl_block_of(other), tm_gl_tid_of(other));
        return;
    }
    const unsigned long long ri = c.rinfo.load(std::memory_order_relaxed);
    if ((ri >> 32) != (e & 0xffffffffu)) return;
    const int rt1 = (int)(ri & 0x3ff), rt2 = (int)((ri >> 10) & 0x7ff) - 1;
    const unsigned rsw = (unsigned)((ri >> 21) & 0x7ff);
    const int other_reader = rt1 != t ? rt1 : rt2;   // rt2 differs from rt1 when set
    if (other_reader < 0) return;
    const bool warp_ordered =
        (rt1 >> 5) == (t >> 5) && (rt2 < 0 || (rt2 >> 5) == (t >> 5)) && sw > rsw;
    if (!warp_ordered) tm_gl_race(TM_GL_WAR, buf, index, block, other_reader);
}

static inline void tm_gl_on_read(const tm_check_buf *buf, long long index)
{
    tm_gl_cell &c = buf->cells[index];
    const long long block = tm_check_block_linear();
    const int t = tm_emu_tls.linear_tid;
    const unsigned long long me = tm_gl_me(block, t);
    const unsigned long long e = tm_emu_barrier_epoch();
    const unsigned sw = tm_sw_count(t, e);
    // the readers' blocks: the first, and one other
    unsigned long long r1 = c.r1.load(std::memory_order_acquire);
    if (!r1 && c.r1.compare_exchange_strong(r1, me, std::memory_order_acq_rel)) r1 = me;
    if (tm_gl_block_of(r1) != block && !c.r2.load(std::memory_order_relaxed)) {
        unsigned long long zero = 0;
        c.r2.compare_exchange_strong(zero, me, std::memory_order_acq_rel);
    }
    // this interval's readers in this block (only this block's threads, run on this OS thread,
    // write it while no other block reads the element)
    const unsigned long long ri = c.rinfo.load(std::memory_order_relaxed);
    unsigned long long next;
    const unsigned sw11 = sw > 0x7ff ? 0x7ff : sw;
    if ((ri >> 32) != (e & 0xffffffffu)) {
        next = (unsigned long long)(t & 0x3ff) | ((unsigned long long)sw11 << 21) | (e << 32);
    } else {
        const int rt1 = (int)(ri & 0x3ff), rt2 = (int)((ri >> 10) & 0x7ff) - 1;
        const unsigned rsw = (unsigned)((ri >> 21) & 0x7ff);
        next = (unsigned long long)rt1 |
               ((unsigned long long)(rt2 < 0 && rt1 != t ? t + 1 : rt2 + 1) << 10) |
               ((unsigned long long)(sw11 > rsw ? sw11 : rsw) << 21) | (e << 32);
    }
    c.rinfo.store(next, std::memory_order_relaxed);
    // the last write: by another block, or by another thread of this block in this interval
    const unsigned long long owner = c.owner.load(std::memory_order_acquire);
    if (!owner) return;
    const unsigned long long prev = c.info.load(std::memory_order_acquire);
    const int ptid = (int)(prev & 0xffff);
    if (owner != (unsigned long long)block + 1) {
        if (!tm_gl_fenced()) tm_gl_race(TM_GL_RAW, buf, index, (long long)owner - 1, ptid);
        return;
    }
    const unsigned psw = (unsigned)((prev >> 16) & 0xffff);
    if ((prev >> 32) == (e & 0xffffffffu) && ptid != t && !((ptid >> 5) == (t >> 5) && sw > psw))
        tm_gl_race(TM_GL_RAW, buf, index, block, ptid);
}

// ---- shared memory ----
// tm.compile rewrites `__shared__ T name[D1][D2]...;` (T a number type) into a tm_sh_array and
// `__shared__ T name;` into a tm_sh_scalar, on the same line; TM_DYNAMIC_SHARED (and, inside a
// function, `extern __shared__ T name[];`) gives a tm_sh_view over the dynamic buffer. Indexing
// returns a tm_sh_ref, a proxy that checks the index against the declared extent and records,
// per element, the last writer and the readers of the current barrier interval. The interval is
// the emulator's barrier epoch (tm_emu_barrier_epoch), which changes whenever a __syncthreads()
// of the block completes and when a block starts. In one interval, a read of an element another
// thread wrote (read after write), a write of an element another thread read (write after read)
// and a write of a different value over another thread's write (write after write) are races,
// reported with the element, both threads and the block. A read of an element that no thread of
// the block has written since the block started is reported too (compute-sanitizer's initcheck):
// its value is whatever an earlier block left. Atomics and raw pointers taken from a shared array
// (&s[i], float *p = s) are not tracked; once a raw pointer to an array was taken in a block,
// reads of it are no longer reported as uninitialised in that block (the raw pointer may have
// written it). Being a proxy, `auto v = s[i]` reads s[i] when v is used, not at the declaration,
// and a template helper called with s[i] deduces the proxy type: write `float v = s[i]` or pass
// `(float)s[i]`.
struct tm_sh_cell {
    unsigned long long w_epoch, r_epoch;   // interval of the last write / of the reads
    int w_tid, r_tid, r_tid2;   // last writer; first reader; another reader or -1
    int r_warp;   // the readers' warp, -1 when several warps
    unsigned w_sync, r_sync;   // __syncwarp counts at the write / latest read
};
struct tm_sh_meta {
    const char *name;
    int ndim;
    const long long *dims;
    bool dynamic;   // dynamic shared memory: dims[0] elements from the launch's shared_bytes
};
// Where an out-of-bounds index was met, reported when the element is read or written.
struct tm_sh_oob {
    int level;   // the dimension (0-based) whose index was outside it; -1: none
    long long index;   // that index
    long long prefix;   // flat offset of the indices before it
};

static inline void tm_sh_index_str(char *buf, size_t n, const tm_sh_meta *m, long long flat)
{
    long long idx[8] = {0};
    for (int l = m->ndim - 1; l >= 0; --l) {
        idx[l] = flat % m->dims[l];
        flat /= m->dims[l];
    }
    size_t k = (size_t)snprintf(buf, n, "%s", m->name);
    for (int l = 0; l < m->ndim && k < n; ++l)
        k += (size_t)snprintf(buf + k, n - k, "[%lld]", idx[l]);
}
static inline void tm_sh_shape_str(char *buf, size_t n, const tm_sh_meta *m)
{
    if (m->dynamic) {
        snprintf(buf, n, "TM_DYNAMIC_SHARED %s: %lld element%s in shared_bytes=%zu", m->name,
                 m->dims[0], m->dims[0] == 1 ? "" : "s",
                 tm_check_cur ? tm_check_cur->dyn_bytes : 0);
        return;
    }
    size_t k = (size_t)snprintf(buf, n, "__shared__ %s", m->name);
    for (int l = 0; l < m->ndim && k < n; ++l)
        k += (size_t)snprintf(buf + k, n - k, "[%lld]", m->dims[l]);
}

enum { TM_SH_RAW, TM_SH_WAR, TM_SH_WAW };
__attribute__((noinline)) static void tm_sh_race(int kind, const tm_sh_meta *m, long long flat,
                                                 int other)
{
    const int t = tm_emu_tls.linear_tid;
    const uint3 b = tm_emu_tls.block_idx;
    char elem[160], shape[160], me[48], them[48];
    tm_sh_index_str(elem, sizeof elem, m, flat);
    tm_sh_shape_str(shape, sizeof shape, m);
    tm_check_thread_str(me, sizeof me, t);
    tm_check_thread_str(them, sizeof them, other);
    const char *what = kind == TM_SH_RAW   ? "read after write"
                       : kind == TM_SH_WAR ? "write after read"
                                           : "write after write";
    const char *verb = kind == TM_SH_RAW ? "reads" : "writes";
    const char *past = kind == TM_SH_WAR ? "read" : "wrote";
    tm_check_report("shared-memory race (%s) on %s (%s) in block (%u,%u,%u): thread %s %s it "
                    "after thread %s %s it, with no __syncthreads() between them",
                    what, elem, shape, b.x, b.y, b.z, me, verb, them, past);
}
__attribute__((noinline)) static void tm_sh_uninit(const tm_sh_meta *m, long long flat)
{
    const uint3 t = tm_emu_tls.thread_idx, b = tm_emu_tls.block_idx;
    char elem[160], shape[160];
    tm_sh_index_str(elem, sizeof elem, m, flat);
    tm_sh_shape_str(shape, sizeof shape, m);
    tm_check_report("read of uninitialised shared memory: %s (%s) by thread (%u,%u,%u) of block "
                    "(%u,%u,%u); no thread of this block has written it (it holds whatever an "
                    "earlier block left there)",
                    elem, shape, t.x, t.y, t.z, b.x, b.y, b.z);
}
__attribute__((noinline)) static void tm_sh_out_of_bounds(const tm_sh_meta *m, const tm_sh_oob &o,
                                                          const char *what)
{
    const uint3 t = tm_emu_tls.thread_idx, b = tm_emu_tls.block_idx;
    char elem[160], shape[160];
    long long idx[8] = {0};
    for (int l = o.level - 1; l >= 0; --l) {   // the indices before the bad one
        long long stride = 1;
        for (int k = l + 1; k < m->ndim; ++k)
            stride *= m->dims[k];
        idx[l] = (o.prefix / stride) % m->dims[l];
    }
    size_t k = (size_t)snprintf(elem, sizeof elem, "%s", m->name);
    for (int l = 0; l < o.level && k < sizeof elem; ++l)
        k += (size_t)snprintf(elem + k, sizeof elem - k, "[%lld]", idx[l]);
    if (k < sizeof elem) snprintf(elem + k, sizeof elem - k, "[%lld]", o.index);
    tm_sh_shape_str(shape, sizeof shape, m);
    tm_check_report("out-of-bounds %s %s of %s (index %lld of dimension %d is outside [0, %lld)) "
                    "by thread (%u,%u,%u) of block (%u,%u,%u)",
                    what, elem, shape, o.index, o.level + 1, m->dims[o.level], t.x, t.y, t.z, b.x,
                    b.y, b.z);
}

static inline void tm_sh_on_read(tm_sh_cell &c, const tm_sh_meta *m, long long flat,
                                 unsigned long long escaped)
{
    const unsigned long long e = tm_emu_barrier_epoch();
    const int t = tm_emu_tls.linear_tid;
    const unsigned sw = tm_sw_count(t, e);
    if (c.w_epoch < tm_check_block_epoch && escaped < tm_check_block_epoch)
        tm_sh_uninit(m, flat);
    else if (c.w_epoch == e && c.w_tid != t && !((c.w_tid >> 5) == (t >> 5) && sw > c.w_sync))
        tm_sh_race(TM_SH_RAW, m, flat, c.w_tid);
    if (c.r_epoch != e) {
        c.r_epoch = e;
        c.r_tid = t;
        c.r_tid2 = -1;
        c.r_warp = t >> 5;
        c.r_sync = sw;
        return;
    }
    if (c.r_tid != t && c.r_tid2 < 0) c.r_tid2 = t;
    if (c.r_warp != (t >> 5)) c.r_warp = -1;
    if (sw > c.r_sync) c.r_sync = sw;
}
static inline void tm_sh_on_write(tm_sh_cell &c, const tm_sh_meta *m, long long flat, bool same)
{
    const unsigned long long e = tm_emu_barrier_epoch();
    const int t = tm_emu_tls.linear_tid;
    const unsigned sw = tm_sw_count(t, e);
    if (c.w_epoch == e && c.w_tid != t && !same && !((c.w_tid >> 5) == (t >> 5) && sw > c.w_sync))
        tm_sh_race(TM_SH_WAW, m, flat, c.w_tid);
    else if (c.r_epoch == e && (c.r_tid != t || c.r_tid2 >= 0) &&
             !(c.r_warp == (t >> 5) && sw > c.r_sync))
        tm_sh_race(TM_SH_WAR, m, flat, c.r_tid != t ? c.r_tid : c.r_tid2);
    c.w_epoch = e;
    c.w_tid = t;
    c.w_sync = sw;
}

template <typename T>
struct tm_sh_ref;
template <typename T, typename Name>
struct tm_sh_scalar;
template <typename T>
struct tm_gl_ref;
template <typename T>
struct tm_checked_ptr;
// Proxies: what indexing a checked array gives. They convert to the element's value.
template <typename X>
struct tm_is_sh : std::false_type {};
template <typename T>
struct tm_is_sh<tm_sh_ref<T>> : std::true_type {};
template <typename T, typename N>
struct tm_is_sh<tm_sh_scalar<T, N>> : std::true_type {};
template <typename T>
struct tm_is_sh<tm_gl_ref<T>> : std::true_type {};
// The value of a proxy (a checked read), anything else unchanged.
template <typename X, typename = std::enable_if_t<!tm_is_sh<X>::value>>
static inline const X &tm_sh_value(const X &x)
{
    return x;
}
template <typename T>
static inline T tm_sh_value(const tm_sh_ref<T> &r)
{
    return r.get();
}
template <typename T, typename N>
static inline T tm_sh_value(const tm_sh_scalar<T, N> &s)
{
    return s.ref().get();
}
template <typename T>
static inline typename std::remove_const<T>::type tm_sh_value(const tm_gl_ref<T> &r)
{
    return r.get();
}
template <typename I>
struct tm_sh_index_ok
    : std::integral_constant<bool, std::is_integral<I>::value || std::is_enum<I>::value ||
                                       tm_is_sh<I>::value> {};

#define TM_SH_COMPOUND(R, OP)   \
    template <typename U>       \
    R &operator OP(const U & u) \
    {                           \
        auto v = get();         \
        v OP tm_sh_value(u);    \
        set(v);                 \
        return *this;           \
    }

// One element of a checked shared array; flat < 0 after an out-of-bounds index (reads give
// T(), writes are dropped, either is reported).
template <typename T>
struct tm_sh_ref {
    T *base;
    tm_sh_cell *cells;
    const tm_sh_meta *meta;
    unsigned long long *escaped;   // epoch at which a raw pointer to the array was last taken
    long long flat;
    tm_sh_oob oob;

    T get() const
    {
        if (flat < 0) {
            tm_sh_out_of_bounds(meta, oob, "read of");
            return T();
        }
        tm_sh_on_read(cells[flat], meta, flat, *escaped);
        return base[flat];
    }
    void set(T v) const
    {
        if (flat < 0) {
            tm_sh_out_of_bounds(meta, oob, "write of");
            return;
        }
        tm_sh_on_write(cells[flat], meta, flat, std::memcmp(&base[flat], &v, sizeof(T)) == 0);
        base[flat] = v;
    }
    operator T() const { return get(); }
    tm_sh_ref &operator=(const tm_sh_ref &o)
    {
        set(o.get());
        return *this;
    }
    template <typename U>
    tm_sh_ref &operator=(const U &u)
    {
        set((T)tm_sh_value(u));
        return *this;
    }
    // clang-format off
    TM_SH_COMPOUND(tm_sh_ref, +=) TM_SH_COMPOUND(tm_sh_ref, -=) TM_SH_COMPOUND(tm_sh_ref, *=)
    TM_SH_COMPOUND(tm_sh_ref, /=) TM_SH_COMPOUND(tm_sh_ref, %=) TM_SH_COMPOUND(tm_sh_ref, &=)
    TM_SH_COMPOUND(tm_sh_ref, |=) TM_SH_COMPOUND(tm_sh_ref, ^=) TM_SH_COMPOUND(tm_sh_ref, <<=)
    TM_SH_COMPOUND(tm_sh_ref, >>=)
        // clang-format on
        tm_sh_ref &
        operator++()
    {
        T v = get();
        ++v;
        set(v);
        return *this;
    }
    tm_sh_ref &operator--()
    {
        T v = get();
        --v;
        set(v);
        return *this;
    }
    T operator++(int)
    {
        T v = get();
        T w = v;
        ++w;
        set(w);
        return v;
    }
    T operator--(int)
    {
        T v = get();
        T w = v;
        --w;
        set(w);
        return v;
    }
    T *operator&() const   // unchecked from here on
    {
        if (flat < 0) {
            tm_sh_out_of_bounds(meta, oob, "address of");
            return &tm_check_scratch<T>();
        }
        *escaped = tm_emu_barrier_epoch();
        return base + flat;
    }
};

// R dimensions left to index (R == 1: the next index gives an element).
template <typename T, int R>
struct tm_sh_view {
    T *base;
    tm_sh_cell *cells;
    const tm_sh_meta *meta;
    unsigned long long *escaped;
    long long flat;
    tm_sh_oob oob;

    typedef typename std::conditional<R == 1, tm_sh_ref<T>, tm_sh_view<T, R - 1>>::type Next;
    template <typename I, typename = std::enable_if_t<tm_sh_index_ok<I>::value>>
    Next operator[](const I &index) const
    {
        const long long i = (long long)tm_sh_value(index);
        const int level = meta->ndim - R;
        long long stride = 1;
        for (int k = level + 1; k < meta->ndim; ++k)
            stride *= meta->dims[k];
        if (flat < 0) return Next{base, cells, meta, escaped, -1, oob};
        if (i < 0 || i >= meta->dims[level])
            return Next{base, cells, meta, escaped, -1, tm_sh_oob{level, i, flat}};
        return Next{base, cells, meta, escaped, flat + i * stride, oob};
    }
    operator T *() const   // a row as a raw pointer: unchecked from here on
    {
        if (flat < 0) {
            tm_sh_out_of_bounds(meta, oob, "address of");
            return &tm_check_scratch<T>();
        }
        *escaped = tm_emu_barrier_epoch();
        return base + flat;
    }
};

template <typename T, typename Name, long long... D>
struct tm_sh_array {
    static constexpr int ndim = (int)sizeof...(D);
    static constexpr long long dims[] = {D...};
    static constexpr long long size = (1LL * ... * D);
    static constexpr tm_sh_meta meta{Name::name(), ndim, dims, false};
    static_assert(((D > 0) && ...), "shared array extents must be positive");
    T data[size];
    tm_sh_cell cells[size];
    unsigned long long escaped;

    template <typename I, typename = std::enable_if_t<tm_sh_index_ok<I>::value>>
    auto operator[](const I &i)
    {
        return tm_sh_view<T, ndim>{data, cells, &meta, &escaped, 0, tm_sh_oob{-1, 0, 0}}[i];
    }
    operator T *()   // unchecked from here on
    {
        escaped = tm_emu_barrier_epoch();
        return data;
    }
};

template <typename T, typename Name>
struct tm_sh_scalar {
    static constexpr long long dims[] = {1};
    static constexpr tm_sh_meta meta{Name::name(), 0, dims, false};
    T data;
    tm_sh_cell cell;
    unsigned long long escaped;

    tm_sh_ref<T> ref() const
    {
        return tm_sh_ref<T>{const_cast<T *>(&data),
                            const_cast<tm_sh_cell *>(&cell),
                            &meta,
                            const_cast<unsigned long long *>(&escaped),
                            0,
                            tm_sh_oob{-1, 0, 0}};
    }
    T get() const { return ref().get(); }
    void set(T v) { ref().set(v); }
    operator T() const { return get(); }
    tm_sh_scalar &operator=(const tm_sh_scalar &o)
    {
        set(o.get());
        return *this;
    }
    template <typename U>
    tm_sh_scalar &operator=(const U &u)
    {
        set((T)tm_sh_value(u));
        return *this;
    }
    // clang-format off
    TM_SH_COMPOUND(tm_sh_scalar, +=) TM_SH_COMPOUND(tm_sh_scalar, -=)
    TM_SH_COMPOUND(tm_sh_scalar, *=) TM_SH_COMPOUND(tm_sh_scalar, /=)
    TM_SH_COMPOUND(tm_sh_scalar, %=) TM_SH_COMPOUND(tm_sh_scalar, &=)
    TM_SH_COMPOUND(tm_sh_scalar, |=) TM_SH_COMPOUND(tm_sh_scalar, ^=)
    TM_SH_COMPOUND(tm_sh_scalar, <<=) TM_SH_COMPOUND(tm_sh_scalar, >>=)
        // clang-format on
        tm_sh_scalar &
        operator++()
    {
        ++ref();
        return *this;
    }
    tm_sh_scalar &operator--()
    {
        --ref();
        return *this;
    }
    T operator++(int) { return ref()++; }
    T operator--(int) { return ref()--; }
    T *operator&() { return &ref(); }   // unchecked (atomicAdd(&count, 1))
};

// Dynamic shared memory: a one-dimensional checked view of the launch's shared_bytes.
struct tm_sh_dyn_state {
    std::vector<tm_sh_cell> cells;
    unsigned long long escaped = 0;
};
template <typename T>
struct tm_sh_dyn {
    long long count;
    tm_sh_meta meta;
    tm_sh_view<T, 1> view;
    tm_sh_dyn(const char *name, tm_sh_dyn_state &st)
        : count((long long)((tm_check_cur ? tm_check_cur->dyn_bytes : 0) / sizeof(T))),
          meta{name, 1, &count, true}, view{reinterpret_cast<T *>(tm_emu_dynamic_shared()),
                                            nullptr,
                                            &meta,
                                            &st.escaped,
                                            0,
                                            tm_sh_oob{-1, 0, 0}}
    {
        if (st.cells.size() < (size_t)count) st.cells.resize((size_t)count);
        view.cells = st.cells.data();
    }
    tm_sh_dyn(const tm_sh_dyn &) = delete;
};
#undef TM_DYNAMIC_SHARED
#define TM_DYNAMIC_SHARED(type, name)                                \
    static thread_local tm_sh_dyn_state tm_sh_dyn_state_##name;      \
    tm_sh_dyn<type> tm_sh_dyn_##name(#name, tm_sh_dyn_state_##name); \
    const tm_sh_view<type, 1> name = tm_sh_dyn_##name.view

// ---- global memory: the checked pointer and its element proxy ----
// One element of a checked buffer of a number type. `index` counts elements of T from `base`
// (the start of the buffer); outside [0, count) nothing is read or written, and the access is
// reported as a read, a write, or both.
template <typename T>
struct tm_gl_ref {
    typedef typename std::remove_const<T>::type V;
    T *base;
    const tm_check_buf *buf;
    const char *as;   // element type name when the pointer was reinterpret_cast, else null
    long long index, count;
    tm_gl_idx at;   // an array parameter's or a float **'s indices (at.n == 0: a pointer's)

    bool inside(const char *what) const
    {
        if (at.n) {
            if (at.bad < 0) return true;
            tm_check_fail_nd(buf, at, what);
            return false;
        }
        if (index >= 0 && index < count) return true;
        tm_check_fail(buf, as, index, count, what);
        return false;
    }
    bool recorded() const { return buf->cells && !as && index >= 0 && index < buf->count; }
    V load() const
    {
        if (recorded()) tm_gl_on_read(buf, index);
        if (buf->init) tm_gl_init_read(buf, index, sizeof(V));
        return base[index];
    }
    void store(V v) const
    {
        if (recorded()) tm_gl_on_write(buf, index);
        if (buf->init) tm_gl_init_write(buf, index, sizeof(V));
        base[index] = v;
    }
    V get() const { return inside("read") ? load() : V(); }
    void set(V v) const
    {
        if (inside("write")) store(v);
    }
    template <typename F>
    tm_gl_ref &update(F f)   // +=, ++ ...: one report when outside the buffer
    {
        if (inside("read and write")) {
            V v = load();
            f(v);
            store(v);
        }
        return *this;
    }
    operator V() const { return get(); }
    tm_gl_ref &operator=(const tm_gl_ref &o)
    {
        set(o.get());
        return *this;
    }
    template <typename U>
    tm_gl_ref &operator=(const U &u)
    {
        set((V)tm_sh_value(u));
        return *this;
    }
#define TM_GL_COMPOUND(OP)                    \
    template <typename U>                     \
    tm_gl_ref &operator OP(const U & u)       \
    {                                         \
        auto w = tm_sh_value(u);              \
        return update([&](V &v) { v OP w; }); \
    }
    // clang-format off
    TM_GL_COMPOUND(+=) TM_GL_COMPOUND(-=) TM_GL_COMPOUND(*=) TM_GL_COMPOUND(/=)
    TM_GL_COMPOUND(%=) TM_GL_COMPOUND(&=) TM_GL_COMPOUND(|=) TM_GL_COMPOUND(^=)
    TM_GL_COMPOUND(<<=) TM_GL_COMPOUND(>>=)
    // clang-format on
#undef TM_GL_COMPOUND
            tm_gl_ref &
            operator++()
    {
        return update([](V &v) { ++v; });
    }
    tm_gl_ref &operator--()
    {
        return update([](V &v) { --v; });
    }
    V operator++(int)
    {
        V old = V();
        update([&](V &v) {
            old = v;
            ++v;
        });
        return old;
    }
    V operator--(int)
    {
        V old = V();
        update([&](V &v) {
            old = v;
            --v;
        });
        return old;
    }
    tm_checked_ptr<T> operator&() const { return tm_checked_ptr<T>(base, count, buf, index, as); }
};

template <typename T>
struct tm_checked_ptr {
    T *base;   // the start of the buffer, as T
    long long count;   // elements of T in it
    const tm_check_buf *buf;
    long long offset;   // where this pointer points, in elements of T from base
    const char *as;   // element type name after a reinterpret_cast, else null

    // Number types get a proxy that tells reads from writes; other types (float4, structs) a
    // plain reference, checked for the index only.
    typedef typename std::conditional<std::is_arithmetic<T>::value, tm_gl_ref<T>, T &>::type Ref;

    tm_checked_ptr() : base(nullptr), count(0), buf(nullptr), offset(0), as(nullptr) {}
    tm_checked_ptr(T *b, const tm_check_buf *cb)
        : base(b), count(cb->count), buf(cb), offset(0), as(nullptr)
    {
    }
    tm_checked_ptr(T *b, long long n, const tm_check_buf *cb, long long off, const char *a)
        : base(b), count(n), buf(cb), offset(off), as(a)
    {
    }
    template <typename U,
              typename = typename std::enable_if<std::is_convertible<U *, T *>::value>::type>
    tm_checked_ptr(const tm_checked_ptr<U> &o)
        : base(o.base), count(o.count), buf(o.buf), offset(o.offset), as(o.as)
    {
    }

    Ref at(long long i) const { return element(offset + i, std::is_arithmetic<T>()); }
    tm_gl_ref<T> element(long long j, std::true_type) const
    {
        return tm_gl_ref<T>{base, buf, as, j, count};
    }
    T &element(long long j, std::false_type) const
    {
        tm_gl_escape(buf);
        if (j < 0 || j >= count) {
            tm_check_fail(buf, as ? as : tm_type_name<std::remove_const_t<T>>::get(), j, count,
                          "access");
            return tm_check_scratch<T>();
        }
        return base[j];
    }
    template <typename I, typename = typename std::enable_if<std::is_integral<I>::value ||
                                                             std::is_enum<I>::value>::type>
    Ref operator[](I i) const
    {
        return at((long long)i);
    }
    template <typename I, typename = typename std::enable_if<tm_is_sh<I>::value>::type,
              typename = void>
    Ref operator[](const I &i) const
    {
        return at((long long)tm_sh_value(i));
    }   // s[k] as index
    Ref operator*() const { return at(0); }
    T *operator->() const
    {
        tm_gl_escape(buf);
        if (offset < 0 || offset >= count) {
            tm_check_fail(buf, as ? as : tm_type_name<std::remove_const_t<T>>::get(), offset, count,
                          "access");
            return &tm_check_scratch<T>();
        }
        return base + offset;
    }
    operator T *() const   // for helpers taking T*: unchecked there
    {
        tm_gl_escape(buf);
        return base + offset;
    }
    // (float (*)[N])p, (float4 *)p, static_cast<void *>(p): a plain pointer, unchecked from here
    template <typename U>
    explicit operator U *() const
    {
        tm_gl_escape(buf);
        return (U *)(base + offset);
    }

    template <typename I, typename = typename std::enable_if<std::is_integral<I>::value>::type>
    tm_checked_ptr operator+(I i) const
    {
        return tm_checked_ptr(base, count, buf, offset + (long long)i, as);
    }
    template <typename I, typename = typename std::enable_if<std::is_integral<I>::value>::type>
    tm_checked_ptr operator-(I i) const
    {
        return tm_checked_ptr(base, count, buf, offset - (long long)i, as);
    }
    template <typename I, typename = typename std::enable_if<std::is_integral<I>::value>::type>
    friend tm_checked_ptr operator+(I i, const tm_checked_ptr &p)
    {
        return p + i;
    }
    long long operator-(const tm_checked_ptr &o) const
    {
        return (base + offset) - (o.base + o.offset);
    }
    template <typename I>
    tm_checked_ptr &operator+=(I i)
    {
        offset += (long long)i;
        return *this;
    }
    template <typename I>
    tm_checked_ptr &operator-=(I i)
    {
        offset -= (long long)i;
        return *this;
    }
    tm_checked_ptr &operator++()
    {
        ++offset;
        return *this;
    }
    tm_checked_ptr &operator--()
    {
        --offset;
        return *this;
    }
    tm_checked_ptr operator++(int)
    {
        tm_checked_ptr old = *this;
        ++offset;
        return old;
    }
    tm_checked_ptr operator--(int)
    {
        tm_checked_ptr old = *this;
        --offset;
        return old;
    }
};

// An array parameter (`float A[N][N]`, `float A[][N]`, `float (*A)[N]`) is a tm_checked_arr
// <float, N>: A[i] is a tm_gl_view of the row, A[i][j] a tm_gl_ref whose indices are checked
// one by one against the array passed (its rows) and the declared extents, and reported as
// written (A[3][40]). A row used as a pointer (float *r = A[i]; passing A to a helper taking
// float (*)[N]) is a plain pointer, unchecked from there.
template <typename T,
          int R>   // R: the dimensions left to index (R == 1: the next gives an element)
struct tm_gl_view {
    T *base;
    const tm_check_buf *buf;
    long long flat;   // the first element of this row, in elements of T from base
    tm_gl_idx at;   // the indices so far

    template <typename I, typename = std::enable_if_t<tm_sh_index_ok<I>::value>>
    auto operator[](const I &index) const
    {
        const long long i = (long long)tm_sh_value(index);
        tm_gl_idx a = at;
        const int level = a.n;
        a.i[a.n++] = i;
        if (a.bad < 0 && (i < 0 || i >= buf->dims[level])) a.bad = level;
        long long stride = 1;
        for (int k = level + 1; k < buf->ndim; ++k)
            stride *= buf->dims[k];
        if constexpr (R == 1)
            return tm_gl_ref<T>{base, buf, nullptr, flat + i * stride, buf->count, a};
        else
            return tm_gl_view<T, R - 1>{base, buf, flat + i * stride, a};
    }
    T *row() const
    {
        if (at.bad >= 0) {
            tm_check_fail_nd(buf, at, "use of the row");
            return &tm_check_scratch<T>();
        }
        return base + flat;
    }
    operator T *() const { return row(); }   // a row as a pointer: unchecked from here
    template <typename U>
    explicit operator U *() const
    {
        return (U *)row();
    }
};

template <typename T, long long... D>
struct tm_arr_of {
    typedef T type;
};
template <typename T, long long D0, long long... D>
struct tm_arr_of<T, D0, D...> {
    typedef typename tm_arr_of<T, D...>::type type[D0];
};

template <typename T, long long... D>
struct tm_checked_arr : tm_gl_view<T, 1 + (int)sizeof...(D)> {
    typedef typename tm_arr_of<T, D...>::type Row;   // T[D1][D2]...
    tm_checked_arr() : tm_gl_view<T, 1 + (int)sizeof...(D)>{nullptr, nullptr, 0, tm_gl_idx{}} {}
    tm_checked_arr(Row *p, const tm_check_buf *cb)
        : tm_gl_view<T, 1 + (int)sizeof...(D)>{reinterpret_cast<T *>(p), cb, 0, tm_gl_idx{}}
    {
    }
    operator Row *() const { return reinterpret_cast<Row *>(this->base); }   // unchecked there
    template <typename U>
    explicit operator U *() const
    {
        return (U *)this->base;
    }
};

// A float ** parameter is a tm_checked_rows<float>: C[i] checks i against the table of row
// pointers (a row beyond it is reported, never read from the table), C[i][j] checks j against
// the row's length, both reported as written (C[40][2]). The table tiledmm builds is regular
// (row i at the data's start + i rows), so an element's record is its place in the 2-D array.
template <typename T>
struct tm_gl_row {
    T *row;   // null: outside the table
    T *data;   // the first row
    const tm_check_buf *buf;
    long long r;

    template <typename I, typename = std::enable_if_t<tm_sh_index_ok<I>::value>>
    tm_gl_ref<T> operator[](const I &index) const
    {
        const long long j = (long long)tm_sh_value(index), cols = buf->dims[1];
        tm_gl_idx a;
        a.n = 2;
        a.i[0] = r;
        a.i[1] = j;
        if (!row)
            a.bad = 0;
        else if (j < 0 || (cols >= 0 && j >= cols))
            a.bad = 1;
        if (cols < 0)   // one row: its length is not known; the row itself is the base
            return tm_gl_ref<T>{row, buf, nullptr, j, j + 1, a};
        return tm_gl_ref<T>{data, buf, nullptr, r * cols + j, buf->count, a};
    }
    T *get() const
    {
        if (!row) {
            tm_gl_idx a;
            a.n = 1;
            a.i[0] = r;
            a.bad = 0;
            tm_check_fail_nd(buf, a, "read");
            return &tm_check_scratch<T>();
        }
        return row;
    }
    operator T *() const { return get(); }   // float *r = C[i]: unchecked from here
    template <typename U>
    explicit operator U *() const
    {
        return (U *)get();
    }
};

template <typename T>
struct tm_checked_rows {
    T **table;
    const tm_check_buf *buf;   // dims: {rows, row length or -1}

    tm_checked_rows() : table(nullptr), buf(nullptr) {}
    tm_checked_rows(T **t, const tm_check_buf *cb) : table(t), buf(cb) {}
    template <typename I, typename = std::enable_if_t<tm_sh_index_ok<I>::value>>
    tm_gl_row<T> operator[](const I &index) const
    {
        const long long i = (long long)tm_sh_value(index);
        const bool in = i >= 0 && i < buf->dims[0];
        return tm_gl_row<T>{in ? table[i] : nullptr, buf->dims[0] > 0 ? table[0] : nullptr, buf, i};
    }
    operator T **() const { return table; }   // unchecked from here
    template <typename U>
    explicit operator U *() const
    {
        return (U *)table;
    }
};

// The launcher's view of a float ** argument: its rows (the table's entries) and their length
// (the distance between the first two rows; unknown, -1, for one row). Returns the elements.
template <typename T>
static inline long long tm_check_rows_shape(T **table, size_t table_bytes, long long dims[2])
{
    dims[0] = (long long)(table_bytes / sizeof(T *));
    dims[1] = dims[0] >= 2 ? (long long)(table[1] - table[0]) : -1;
    return dims[1] >= 0 ? dims[0] * dims[1] : 0;
}

// Check mode rewrites the student's `reinterpret_cast<` into `tm_check_reinterpret<`: a checked
// pointer reinterpreted as another element type (reinterpret_cast<float4 *>(y)) stays checked,
// counted in elements of the new type; anything else is a plain reinterpret_cast.
template <typename P, typename X>
static inline auto tm_check_reinterpret(X &&x) -> decltype(reinterpret_cast<P>(std::forward<X>(x)))
{
    return reinterpret_cast<P>(std::forward<X>(x));
}
template <typename P, typename T, typename = std::enable_if_t<std::is_pointer<P>::value>>
static inline tm_checked_ptr<std::remove_pointer_t<P>> tm_check_reinterpret(
    const tm_checked_ptr<T> &p)
{
    typedef std::remove_pointer_t<P> U;
    const long long bytes = p.count * (long long)sizeof(T), at = p.offset * (long long)sizeof(T);
    return tm_checked_ptr<U>(reinterpret_cast<U *>(p.base), bytes / (long long)sizeof(U), p.buf,
                             at / (long long)sizeof(U), tm_type_name<U>::get());
}
// const_cast<float *>(x) of a checked const float *: the same buffer, still checked (its writes
// are not recorded for races: a const parameter has no write record).
template <typename P, typename X>
static inline auto tm_check_const_cast(X &&x) -> decltype(const_cast<P>(std::forward<X>(x)))
{
    return const_cast<P>(std::forward<X>(x));
}
template <typename P, typename T, typename = std::enable_if_t<std::is_pointer<P>::value>>
static inline tm_checked_ptr<std::remove_pointer_t<P>> tm_check_const_cast(
    const tm_checked_ptr<T> &p)
{
    typedef std::remove_pointer_t<P> U;
    static_assert(std::is_same<std::remove_cv_t<U>, std::remove_cv_t<T>>::value,
                  "const_cast changes only const");
    return tm_checked_ptr<U>(const_cast<U *>(p.base), p.count, p.buf, p.offset, p.as);
}

// Atomics on a checked pointer (atomicAdd(&out[i], v), atomicAdd(out + i, v)): the index is
// checked; atomics are never races.
#define TM_CHECK_ATOMIC(FN)                                                                      \
    template <typename T, typename... A>                                                         \
    static inline auto FN(const tm_checked_ptr<T> &p,                                            \
                          const A &...a) -> decltype(FN(static_cast<T *>(p), tm_sh_value(a)...)) \
    {                                                                                            \
        const long long j = p.offset;                                                            \
        if (j < 0 || j >= p.count) {                                                             \
            tm_check_fail(p.buf, p.as, j, p.count, "atomic");                                    \
            return decltype(FN(static_cast<T *>(p), tm_sh_value(a)...))();                       \
        }                                                                                        \
        tm_gl_init_write(p.buf, j, sizeof(T));                                                   \
        return FN(p.base + j, tm_sh_value(a)...);                                                \
    }
// clang-format off
TM_CHECK_ATOMIC(atomicAdd) TM_CHECK_ATOMIC(atomicSub) TM_CHECK_ATOMIC(atomicExch)
TM_CHECK_ATOMIC(atomicMin) TM_CHECK_ATOMIC(atomicMax) TM_CHECK_ATOMIC(atomicCAS)
TM_CHECK_ATOMIC(atomicAnd) TM_CHECK_ATOMIC(atomicOr) TM_CHECK_ATOMIC(atomicXor)
TM_CHECK_ATOMIC(atomicInc) TM_CHECK_ATOMIC(atomicDec)
// clang-format on
#undef TM_CHECK_ATOMIC

    // min/max/shuffles/printf with proxies: as with the element's value.
    template <typename A, typename B,
              typename = std::enable_if_t < tm_is_sh<A>::value || tm_is_sh<B>::value>
    , typename = void > static inline auto min(const A &a, const B &b)
{
    return min(tm_sh_value(a), tm_sh_value(b));
}
template <typename A, typename B,
          typename = std::enable_if_t<tm_is_sh<A>::value || tm_is_sh<B>::value>, typename = void>
static inline auto max(const A &a, const B &b)
{
    return max(tm_sh_value(a), tm_sh_value(b));
}
#define TM_SH_SHFL(FN, ARG)                                                                      \
    template <typename T>                                                                        \
    static inline T FN(unsigned mask, const tm_sh_ref<T> &var, ARG a, int width = 32,            \
                       const char *file = __builtin_FILE(), int line = __builtin_LINE())         \
    {                                                                                            \
        return FN(mask, var.get(), a, width, file, line);                                        \
    }                                                                                            \
    template <typename T, typename N>                                                            \
    static inline T FN(unsigned mask, const tm_sh_scalar<T, N> &var, ARG a, int width = 32,      \
                       const char *file = __builtin_FILE(), int line = __builtin_LINE())         \
    {                                                                                            \
        return FN(mask, var.get(), a, width, file, line);                                        \
    }                                                                                            \
    template <typename T>                                                                        \
    static inline std::remove_const_t<T> FN(unsigned mask, const tm_gl_ref<T> &var, ARG a,       \
                                            int width = 32, const char *file = __builtin_FILE(), \
                                            int line = __builtin_LINE())                         \
    {                                                                                            \
        return FN(mask, var.get(), a, width, file, line);                                        \
    }
// clang-format off
TM_SH_SHFL(__shfl_sync, int)
TM_SH_SHFL(__shfl_up_sync, unsigned)
TM_SH_SHFL(__shfl_down_sync, unsigned)
TM_SH_SHFL(__shfl_xor_sync, int)
// clang-format on
#undef TM_SH_SHFL
template <typename... Args, typename = std::enable_if_t<std::disjunction<tm_is_sh<Args>...>::value>>
static inline int printf(const char *fmt, const Args &...args)   // printf("%f", s[i])
{
    return std::printf(fmt, tm_sh_value(args)...);
}

// The launch: like tm_emu_launch (cuda_emu.h), but every CUDA thread first points tm_check_cur
// at this launch's state and notes the epoch its block started at.
template <typename... Params, typename... Args>
static inline cudaError_t tm_check_launch(tm_check_launch_t *state, void (*kernel)(Params...),
                                          dim3 grid, dim3 block, size_t shared_bytes, Args... args)
{
    static_assert(sizeof...(Params) == sizeof...(Args), "kernel argument count mismatch");
    typedef std::tuple<std::decay_t<Params>...> Tuple;
    struct Pack {
        tm_check_launch_t *state;
        void (*k)(Params...);
        Tuple a;
    };
    Pack pack{state, kernel, Tuple(args...)};
    return tm_emu::launch(reinterpret_cast<const void *>(kernel), [](void *p) {
        Pack *pk = static_cast<Pack *>(p);
        tm_check_cur = pk->state;
        // no barrier of the block can open before all its threads started
        tm_check_block_epoch = tm_emu_barrier_epoch();
        std::apply(pk->k, pk->a);
    }, &pack, grid, block, shared_bytes);
}

// Reports name the student's types: the emulator names the kernel by its symbol, whose array
// parameters are check mode's types; they read as the symbol reads without check mode:
// tm_checked_ptr<float> as float*, tm_checked_rows<float const> as float const**,
// tm_checked_arr<float, 64ll> as float (*)[64].
static inline void tm_check_plain_types(char *text, size_t size)
{
    static const char *const keys[] = {"tm_checked_ptr<", "tm_checked_rows<", "tm_checked_arr<"};
    std::string t(text);
    for (int kind = 0; kind < 3; ++kind) {
        const std::string key = keys[kind];
        for (size_t p; (p = t.find(key)) != std::string::npos;) {
            size_t q = p + key.size();
            int depth = 1;
            for (; q < t.size() && depth; ++q)
                depth += t[q] == '<' ? 1 : t[q] == '>' ? -1 : 0;
            if (depth) return;
            const std::string inner = t.substr(p + key.size(), q - 1 - p - key.size());
            std::string plain;
            if (kind == 0)
                plain = inner + "*";
            else if (kind == 1)
                plain = inner + "**";
            else {   // "float, 64ll, 8ll": the element type, then the extents
                size_t c = inner.find(',');
                plain = inner.substr(0, c) + " (*)";
                while (c != std::string::npos) {
                    size_t d = inner.find(',', c + 1);
                    std::string ext = inner.substr(c + 1, d == std::string::npos ? d : d - c - 1);
                    while (!ext.empty() && (ext[0] == ' '))
                        ext.erase(0, 1);
                    while (!ext.empty() && (ext.back() == 'l' || ext.back() == 'L'))
                        ext.pop_back();
                    plain += "[" + ext + "]";
                    c = d;
                }
            }
            t.replace(p, q - p, plain);
        }
    }
    snprintf(text, size, "%s", t.c_str());
}

// After a check-mode launch: the emulator's report of a failed launch wins; else check mode's
// first problem (an out-of-bounds access, a race, an uninitialised shared read), reported as
// cudaErrorIllegalAddress.
static inline int tm_check_finish(tm_check_launch_t *state, cudaError_t err, char *detail,
                                  size_t detail_size)
{
    tm_check_cur = nullptr;   // the state dies with the launcher's frame
    const int rc = tm_user_finish(err, detail, detail_size);
    if (rc) {
        tm_check_plain_types(detail, detail_size);
        return rc;
    }
    const long long hits = state->hits.load();
    if (!hits) return 0;
    snprintf(detail, detail_size, "tiledmm check: %s%s", state->message,
             hits > 1 ? " (and more problems after it)" : "");
    tm_check_plain_types(detail, detail_size);
    return (int)cudaErrorIllegalAddress;
}
