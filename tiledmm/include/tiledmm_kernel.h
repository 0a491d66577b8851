// tiledmm_kernel.h: the prelude of a kernel compiled with tiledmm.compile (tiledmm/user_kernels.py
// includes it before the user's source, then resets line numbers with #line 1). It gives user
// kernels the dialect of tiledmm's own kernels (cuda/common.h) on both backends:
//   cuda (NVRTC): the CUDA built-ins NVRTC provides, plus TM_DYNAMIC_SHARED and tm_ceil_div.
//   emu (g++ -DTM_EMU): cuda/common.h, i.e. csrc/emu/cuda_emu.h, plus, with -DTM_CHECK, the
//   bounds-checked pointer type that check mode gives the kernel's pointer parameters and the
//   race-checked shared arrays it gives its __shared__ declarations.
#pragma once

#ifdef TM_EMU
#include "common.h"
#else
// NVRTC: no host headers; threadIdx, __syncthreads, atomics ... are built in.
#define TM_DYNAMIC_SHARED(type, name)                                  \
    extern __shared__ __align__(16) unsigned char tm_dynamic_smem_[];  \
    type *name = reinterpret_cast<type *>(tm_dynamic_smem_)
static __host__ __device__ inline unsigned tm_ceil_div(long long n, long long d)
{
    return (unsigned)((n + d - 1) / d);
}
#endif

#if defined(TM_EMU) && defined(TM_CHECK)
// ---- check mode (emulator only) ----
// Every pointer parameter of the kernel becomes a tm_checked_ptr<T> that knows the size of the
// buffer passed for it. Indexing (p[i]), dereferencing (*p, p->) and pointers derived with
// + - += -= ++ -- stay checked; an access outside the buffer does not touch memory (it reads or
// writes a scratch value instead), and the first one is recorded with the thread and block that
// made it. A plain pointer made from it (float *q = p + 1; &p[i]) is no longer checked.
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <vector>

struct tm_check_state_t {
    std::atomic<long long> hits{0};
    std::mutex mu;
    long long block = -1;   // linear index of the block whose report is kept (the lowest)
    char message[1024] = {0};
};
static tm_check_state_t tm_check_state;

// Records a problem of the calling CUDA thread: the first one of the lowest block is kept (a
// block runs on one OS thread in a fixed order, so the report does not depend on timing).
__attribute__((noinline, format(printf, 1, 2))) static void tm_check_report(const char *fmt, ...)
{
    tm_check_state.hits.fetch_add(1);
    const uint3 b = tm_emu_tls.block_idx;
    const dim3 g = tm_emu_tls.grid_dim;
    const long long block = b.x + (long long)g.x * (b.y + (long long)g.y * b.z);
    std::lock_guard<std::mutex> lock(tm_check_state.mu);
    if (tm_check_state.block >= 0 && tm_check_state.block <= block) return;
    tm_check_state.block = block;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tm_check_state.message, sizeof tm_check_state.message, fmt, ap);
    va_end(ap);
}

__attribute__((noinline)) static void tm_check_fail(const char *name, long long index,
                                                    long long count, bool read_only)
{
    const uint3 t = tm_emu_tls.thread_idx, b = tm_emu_tls.block_idx;
    tm_check_report("out-of-bounds %s %s[%lld] (the buffer passed for '%s' has %lld elements) by "
                    "thread (%u,%u,%u) of block (%u,%u,%u)",
                    read_only ? "read of" : "read or write of", name, index, name, count, t.x,
                    t.y, t.z, b.x, b.y, b.z);
}

template <typename T>
static inline T &tm_check_scratch()
{
    typedef typename std::remove_const<T>::type U;
    static thread_local U scratch;
    scratch = U();
    return scratch;
}

// ---- shared memory races (check mode) ----
// tm.compile rewrites `__shared__ T name[D1][D2]...;` (T a number type) into a tm_sh_array and
// `__shared__ T name;` into a tm_sh_scalar, on the same line; TM_DYNAMIC_SHARED gives a
// tm_sh_view over the dynamic buffer. Indexing returns a tm_sh_ref, a proxy that checks the
// index against the declared extent and records, per element, the last writer and the readers
// of the current barrier interval. The interval is the emulator's barrier epoch
// (tm_emu_barrier_epoch), which changes whenever a __syncthreads() of the block completes. In
// one interval, a read of an element another thread wrote (read after write), a write of an
// element another thread read (write after read) and a write of a different value over another
// thread's write (write after write) are races, reported with the element, both threads and
// the block. Lanes of one warp are ordered by a __syncwarp() they both passed after the first
// access (counted per thread; full-warp __syncwarp assumed). Atomics and raw pointers taken
// from a shared array (&s[i], float *p = s) are not tracked. Being a proxy, `auto v = s[i]`
// reads s[i] when v is used, not at the declaration, and a template helper called with s[i]
// deduces the proxy type: write `float v = s[i]` or pass `(float)s[i]`.
struct tm_sh_cell {
    unsigned long long w_epoch, r_epoch;   // interval of the last write / of the reads
    int w_tid, r_tid, r_tid2;              // last writer; first reader; another reader or -1
    int r_warp;                            // the readers' warp, -1 when several warps
    unsigned w_sync, r_sync;               // __syncwarp counts at the write / latest read
};
static size_t tm_check_dyn_bytes;   // the launch's shared_bytes (set by the generated launcher)
struct tm_sh_meta {
    const char *name;
    int ndim;
    const long long *dims;
    bool dynamic;   // TM_DYNAMIC_SHARED: dims[0] elements from the launch's shared_bytes
};

// __syncwarp() calls each thread passed in the current barrier interval (per OS thread: the
// block running on it).
struct tm_sw_t {
    unsigned long long epoch;
    unsigned count;
};
static thread_local tm_sw_t tm_sw_state[1024];
static inline unsigned tm_sw_count(int t, unsigned long long e)
{
    return tm_sw_state[t].epoch == e ? tm_sw_state[t].count : 0u;
}
static inline void tm_check_syncwarp(unsigned mask = 0xffffffffu, const char *file = __builtin_FILE(),
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

static inline void tm_sh_thread_str(char *buf, size_t n, int t)
{
    const dim3 d = tm_emu_tls.block_dim;
    snprintf(buf, n, "(%u,%u,%u)", (unsigned)t % d.x, ((unsigned)t / d.x) % d.y,
             (unsigned)t / (d.x * d.y));
}
static inline void tm_sh_index_str(char *buf, size_t n, const tm_sh_meta *m, long long flat)
{
    long long idx[8] = {0};
    for (int l = m->ndim - 1; l >= 0; --l) {
        idx[l] = flat % m->dims[l];
        flat /= m->dims[l];
    }
    size_t k = (size_t)snprintf(buf, n, "%s", m->name);
    for (int l = 0; l < m->ndim && k < n; ++l) k += (size_t)snprintf(buf + k, n - k, "[%lld]", idx[l]);
}
static inline void tm_sh_shape_str(char *buf, size_t n, const tm_sh_meta *m)
{
    if (m->dynamic) {
        snprintf(buf, n, "TM_DYNAMIC_SHARED %s: %lld elements in shared_bytes=%zu", m->name,
                 m->dims[0], tm_check_dyn_bytes);
        return;
    }
    size_t k = (size_t)snprintf(buf, n, "__shared__ %s", m->name);
    for (int l = 0; l < m->ndim && k < n; ++l) k += (size_t)snprintf(buf + k, n - k, "[%lld]", m->dims[l]);
}

enum { TM_SH_RAW, TM_SH_WAR, TM_SH_WAW };
__attribute__((noinline)) static void tm_sh_race(int kind, const tm_sh_meta *m, long long flat,
                                                 int other, int other2)
{
    const int t = tm_emu_tls.linear_tid;
    const uint3 b = tm_emu_tls.block_idx;
    char elem[160], shape[160], me[48], them[48], them2[48];
    tm_sh_index_str(elem, sizeof elem, m, flat);
    tm_sh_shape_str(shape, sizeof shape, m);
    tm_sh_thread_str(me, sizeof me, t);
    tm_sh_thread_str(them, sizeof them, other);
    if (other2 >= 0) tm_sh_thread_str(them2, sizeof them2, other2);
    const char *what = kind == TM_SH_RAW ? "read after write"
                       : kind == TM_SH_WAR ? "write after read" : "write after write";
    const char *verb = kind == TM_SH_RAW ? "reads" : "writes";
    const char *past = kind == TM_SH_WAR ? "read" : "wrote";
    tm_check_report("shared-memory race (%s) on %s (%s) in block (%u,%u,%u): thread %s %s it "
                    "after thread %s%s%s %s it, with no __syncthreads() between them",
                    what, elem, shape, b.x, b.y, b.z, me, verb, them,
                    other2 >= 0 ? " and thread " : "", other2 >= 0 ? them2 : "", past);
}
__attribute__((noinline)) static void tm_sh_out_of_bounds(const tm_sh_meta *m, long long flat,
                                                          int level, long long i)
{
    const uint3 t = tm_emu_tls.thread_idx, b = tm_emu_tls.block_idx;
    char elem[160], shape[160];
    long long idx[8] = {0};
    for (int l = level - 1; l >= 0; --l) {   // the indices before this one
        long long stride = 1;
        for (int k = l + 1; k < m->ndim; ++k) stride *= m->dims[k];
        idx[l] = (flat / stride) % m->dims[l];
    }
    size_t k = (size_t)snprintf(elem, sizeof elem, "%s", m->name);
    for (int l = 0; l < level && k < sizeof elem; ++l)
        k += (size_t)snprintf(elem + k, sizeof elem - k, "[%lld]", idx[l]);
    if (k < sizeof elem) snprintf(elem + k, sizeof elem - k, "[%lld]", i);
    tm_sh_shape_str(shape, sizeof shape, m);
    tm_check_report("out-of-bounds access %s of %s (index %lld of dimension %d is outside [0, %lld)) "
                    "by thread (%u,%u,%u) of block (%u,%u,%u)",
                    elem, shape, i, level + 1, m->dims[level], t.x, t.y, t.z, b.x, b.y, b.z);
}

static inline void tm_sh_on_read(tm_sh_cell &c, const tm_sh_meta *m, long long flat)
{
    const unsigned long long e = tm_emu_barrier_epoch();
    const int t = tm_emu_tls.linear_tid;
    const unsigned sw = tm_sw_count(t, e);
    if (c.w_epoch == e && c.w_tid != t && !((c.w_tid >> 5) == (t >> 5) && sw > c.w_sync))
        tm_sh_race(TM_SH_RAW, m, flat, c.w_tid, -1);
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
        tm_sh_race(TM_SH_WAW, m, flat, c.w_tid, -1);
    else if (c.r_epoch == e && (c.r_tid != t || c.r_tid2 >= 0) &&
             !(c.r_warp == (t >> 5) && sw > c.r_sync))
        tm_sh_race(TM_SH_WAR, m, flat, c.r_tid != t ? c.r_tid : c.r_tid2, -1);
    c.w_epoch = e;
    c.w_tid = t;
    c.w_sync = sw;
}

template <typename T> struct tm_sh_ref;
template <typename T, typename Name> struct tm_sh_scalar;
template <typename X> struct tm_is_sh : std::false_type {};
template <typename T> struct tm_is_sh<tm_sh_ref<T>> : std::true_type {};
template <typename T, typename N> struct tm_is_sh<tm_sh_scalar<T, N>> : std::true_type {};
// The value of a proxy (a checked read), anything else unchanged.
template <typename X, typename = std::enable_if_t<!tm_is_sh<X>::value>>
static inline const X &tm_sh_value(const X &x) { return x; }
template <typename T>
static inline T tm_sh_value(const tm_sh_ref<T> &r) { return r.get(); }
template <typename T, typename N>
static inline T tm_sh_value(const tm_sh_scalar<T, N> &s) { return s.ref().get(); }
template <typename I>
struct tm_sh_index_ok
    : std::integral_constant<bool, std::is_integral<I>::value || std::is_enum<I>::value ||
                                       tm_is_sh<I>::value> {};

#define TM_SH_COMPOUND(R, OP)                                                             \
    template <typename U>                                                                 \
    R &operator OP(const U &u) { auto v = get(); v OP tm_sh_value(u); set(v); return *this; }

// One element of a checked shared array; flat < 0 after an out-of-bounds index (reads give
// T(), writes are dropped).
template <typename T>
struct tm_sh_ref {
    T *base;
    tm_sh_cell *cells;
    const tm_sh_meta *meta;
    long long flat;

    T get() const
    {
        if (flat < 0) return T();
        tm_sh_on_read(cells[flat], meta, flat);
        return base[flat];
    }
    void set(T v) const
    {
        if (flat < 0) return;
        tm_sh_on_write(cells[flat], meta, flat, std::memcmp(&base[flat], &v, sizeof(T)) == 0);
        base[flat] = v;
    }
    operator T() const { return get(); }
    tm_sh_ref &operator=(const tm_sh_ref &o) { set(o.get()); return *this; }
    template <typename U>
    tm_sh_ref &operator=(const U &u) { set((T)tm_sh_value(u)); return *this; }
    TM_SH_COMPOUND(tm_sh_ref, +=) TM_SH_COMPOUND(tm_sh_ref, -=) TM_SH_COMPOUND(tm_sh_ref, *=)
    TM_SH_COMPOUND(tm_sh_ref, /=) TM_SH_COMPOUND(tm_sh_ref, %=) TM_SH_COMPOUND(tm_sh_ref, &=)
    TM_SH_COMPOUND(tm_sh_ref, |=) TM_SH_COMPOUND(tm_sh_ref, ^=) TM_SH_COMPOUND(tm_sh_ref, <<=)
    TM_SH_COMPOUND(tm_sh_ref, >>=)
    tm_sh_ref &operator++() { T v = get(); ++v; set(v); return *this; }
    tm_sh_ref &operator--() { T v = get(); --v; set(v); return *this; }
    T operator++(int) { T v = get(); T w = v; ++w; set(w); return v; }
    T operator--(int) { T v = get(); T w = v; --w; set(w); return v; }
    T *operator&() const { return flat < 0 ? &tm_check_scratch<T>() : base + flat; }   // unchecked
};

// R dimensions left to index (R == 1: the next index gives an element).
template <typename T, int R>
struct tm_sh_view {
    T *base;
    tm_sh_cell *cells;
    const tm_sh_meta *meta;
    long long flat;

    typedef typename std::conditional<R == 1, tm_sh_ref<T>, tm_sh_view<T, R - 1>>::type Next;
    template <typename I, typename = std::enable_if_t<tm_sh_index_ok<I>::value>>
    Next operator[](const I &index) const
    {
        const long long i = (long long)tm_sh_value(index);
        const int level = meta->ndim - R;
        long long stride = 1;
        for (int k = level + 1; k < meta->ndim; ++k) stride *= meta->dims[k];
        if (flat < 0) return Next{base, cells, meta, -1};
        if (i < 0 || i >= meta->dims[level]) {
            tm_sh_out_of_bounds(meta, flat, level, i);
            return Next{base, cells, meta, -1};
        }
        return Next{base, cells, meta, flat + i * stride};
    }
    operator T *() const { return flat < 0 ? &tm_check_scratch<T>() : base + flat; }   // unchecked
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

    template <typename I, typename = std::enable_if_t<tm_sh_index_ok<I>::value>>
    auto operator[](const I &i) { return tm_sh_view<T, ndim>{data, cells, &meta, 0}[i]; }
    operator T *() { return data; }   // unchecked
};

template <typename T, typename Name>
struct tm_sh_scalar {
    static constexpr long long dims[] = {1};
    static constexpr tm_sh_meta meta{Name::name(), 0, dims, false};
    T data;
    tm_sh_cell cell;

    tm_sh_ref<T> ref() const
    {
        return tm_sh_ref<T>{const_cast<T *>(&data), const_cast<tm_sh_cell *>(&cell), &meta, 0};
    }
    T get() const { return ref().get(); }
    void set(T v) { ref().set(v); }
    operator T() const { return get(); }
    tm_sh_scalar &operator=(const tm_sh_scalar &o) { set(o.get()); return *this; }
    template <typename U>
    tm_sh_scalar &operator=(const U &u) { set((T)tm_sh_value(u)); return *this; }
    TM_SH_COMPOUND(tm_sh_scalar, +=) TM_SH_COMPOUND(tm_sh_scalar, -=)
    TM_SH_COMPOUND(tm_sh_scalar, *=) TM_SH_COMPOUND(tm_sh_scalar, /=)
    TM_SH_COMPOUND(tm_sh_scalar, %=) TM_SH_COMPOUND(tm_sh_scalar, &=)
    TM_SH_COMPOUND(tm_sh_scalar, |=) TM_SH_COMPOUND(tm_sh_scalar, ^=)
    TM_SH_COMPOUND(tm_sh_scalar, <<=) TM_SH_COMPOUND(tm_sh_scalar, >>=)
    tm_sh_scalar &operator++() { ++ref(); return *this; }
    tm_sh_scalar &operator--() { --ref(); return *this; }
    T operator++(int) { return ref()++; }
    T operator--(int) { return ref()--; }
    T *operator&() { return &data; }   // unchecked (atomicAdd(&count, 1))
};
#undef TM_SH_COMPOUND

// Dynamic shared memory: a one-dimensional checked view of the launch's shared_bytes.
template <typename T>
struct tm_sh_dyn {
    long long count;
    tm_sh_meta meta;
    tm_sh_view<T, 1> view;
    tm_sh_dyn(const char *name, std::vector<tm_sh_cell> &cells)
        : count((long long)(tm_check_dyn_bytes / sizeof(T))), meta{name, 1, &count, true},
          view{reinterpret_cast<T *>(tm_emu_dynamic_shared()), nullptr, &meta, 0}
    {
        if (cells.size() < (size_t)count) cells.resize((size_t)count);
        view.cells = cells.data();
    }
    tm_sh_dyn(const tm_sh_dyn &) = delete;
};
#undef TM_DYNAMIC_SHARED
#define TM_DYNAMIC_SHARED(type, name)                                              \
    static thread_local std::vector<tm_sh_cell> tm_sh_dyn_cells_##name;            \
    tm_sh_dyn<type> tm_sh_dyn_##name(#name, tm_sh_dyn_cells_##name);               \
    const tm_sh_view<type, 1> name = tm_sh_dyn_##name.view

// min/max/shuffles/printf with proxies: as with the element's value.
template <typename A, typename B,
          typename = std::enable_if_t<tm_is_sh<A>::value || tm_is_sh<B>::value>, typename = void>
static inline auto min(const A &a, const B &b) { return min(tm_sh_value(a), tm_sh_value(b)); }
template <typename A, typename B,
          typename = std::enable_if_t<tm_is_sh<A>::value || tm_is_sh<B>::value>, typename = void>
static inline auto max(const A &a, const B &b) { return max(tm_sh_value(a), tm_sh_value(b)); }
#define TM_SH_SHFL(FN, ARG)                                                                  \
    template <typename T>                                                                    \
    static inline T FN(unsigned mask, const tm_sh_ref<T> &var, ARG a, int width = 32,        \
                       const char *file = __builtin_FILE(), int line = __builtin_LINE())     \
    {                                                                                        \
        return FN(mask, var.get(), a, width, file, line);                                    \
    }                                                                                        \
    template <typename T, typename N>                                                        \
    static inline T FN(unsigned mask, const tm_sh_scalar<T, N> &var, ARG a, int width = 32,  \
                       const char *file = __builtin_FILE(), int line = __builtin_LINE())     \
    {                                                                                        \
        return FN(mask, var.get(), a, width, file, line);                                    \
    }
TM_SH_SHFL(__shfl_sync, int)
TM_SH_SHFL(__shfl_up_sync, unsigned)
TM_SH_SHFL(__shfl_down_sync, unsigned)
TM_SH_SHFL(__shfl_xor_sync, int)
#undef TM_SH_SHFL
template <typename... Args,
          typename = std::enable_if_t<std::disjunction<tm_is_sh<Args>...>::value>>
static inline int printf(const char *fmt, const Args &...args)   // printf("%f", s[i])
{
    return std::printf(fmt, tm_sh_value(args)...);
}

template <typename T>
struct tm_checked_ptr {
    T *base;
    long long count, offset;
    const char *name;

    tm_checked_ptr() : base(nullptr), count(0), offset(0), name("?") {}
    tm_checked_ptr(T *b, long long n, const char *nm, long long off = 0)
        : base(b), count(n), offset(off), name(nm) {}
    template <typename U, typename = typename std::enable_if<std::is_convertible<U *, T *>::value>::type>
    tm_checked_ptr(const tm_checked_ptr<U> &o) : base(o.base), count(o.count), offset(o.offset), name(o.name) {}

    T &at(long long i) const
    {
        const long long j = offset + i;
        if (j < 0 || j >= count) {
            tm_check_fail(name, j, count, std::is_const<T>::value);
            return tm_check_scratch<T>();
        }
        return base[j];
    }
    template <typename I, typename = typename std::enable_if<std::is_integral<I>::value>::type>
    T &operator[](I i) const { return at((long long)i); }
    template <typename I, typename = typename std::enable_if<tm_is_sh<I>::value>::type, typename = void>
    T &operator[](const I &i) const { return at((long long)tm_sh_value(i)); }   // s[k] as index
    T &operator*() const { return at(0); }
    T *operator->() const { return &at(0); }
    operator T *() const { return base + offset; }   // for helpers taking T*: unchecked there

    template <typename I, typename = typename std::enable_if<std::is_integral<I>::value>::type>
    tm_checked_ptr operator+(I i) const { return tm_checked_ptr(base, count, name, offset + (long long)i); }
    template <typename I, typename = typename std::enable_if<std::is_integral<I>::value>::type>
    tm_checked_ptr operator-(I i) const { return tm_checked_ptr(base, count, name, offset - (long long)i); }
    template <typename I, typename = typename std::enable_if<std::is_integral<I>::value>::type>
    friend tm_checked_ptr operator+(I i, const tm_checked_ptr &p) { return p + i; }
    long long operator-(const tm_checked_ptr &o) const { return (base + offset) - (o.base + o.offset); }
    template <typename I>
    tm_checked_ptr &operator+=(I i) { offset += (long long)i; return *this; }
    template <typename I>
    tm_checked_ptr &operator-=(I i) { offset -= (long long)i; return *this; }
    tm_checked_ptr &operator++() { ++offset; return *this; }
    tm_checked_ptr &operator--() { --offset; return *this; }
    tm_checked_ptr operator++(int) { tm_checked_ptr old = *this; ++offset; return old; }
    tm_checked_ptr operator--(int) { tm_checked_ptr old = *this; --offset; return old; }
};
#endif

#ifdef TM_EMU
// What the generated launcher calls after a launch: the emulator's report of a failed launch,
// or check mode's first problem: an out-of-bounds access or a shared-memory race (reported as
// cudaErrorIllegalAddress).
static inline int tm_user_finish(cudaError_t err, char *detail, size_t detail_size)
{
    if (err != cudaSuccess) {
        const char *d = tm_emu_last_error_detail();
        snprintf(detail, detail_size, "%s", d ? d : "");
#ifdef TM_CHECK
        tm_check_state.hits.store(0);   // the emulator's report wins; start the next one clean
        tm_check_state.block = -1;
#endif
        return (int)err;
    }
#ifdef TM_CHECK
    const long long hits = tm_check_state.hits.exchange(0);
    if (hits) {
        snprintf(detail, detail_size, "tiledmm check: %s%s", tm_check_state.message,
                 hits > 1 ? " (and more problems after it)" : "");
        tm_check_state.message[0] = '\0';
        tm_check_state.block = -1;
        return (int)cudaErrorIllegalAddress;
    }
#endif
    return 0;
}
#endif
