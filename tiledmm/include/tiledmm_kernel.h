// tiledmm_kernel.h: the prelude of a kernel compiled with tiledmm.compile (tiledmm/user_kernels.py
// includes it before the user's source, then resets line numbers with #line 1). It gives user
// kernels the dialect of tiledmm's own kernels (cuda/common.h) on both backends:
//   cuda (NVRTC): the CUDA built-ins NVRTC provides, plus TM_DYNAMIC_SHARED and tm_ceil_div.
//   emu (g++ -DTM_EMU): cuda/common.h, i.e. csrc/emu/cuda_emu.h, plus, with -DTM_CHECK, the
//   bounds-checked pointer type that check mode gives the kernel's pointer parameters.
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
#include <cstdio>

struct tm_check_state_t {
    std::atomic<long long> hits{0};
    char message[1024] = {0};
};
static tm_check_state_t tm_check_state;

__attribute__((noinline)) static void tm_check_fail(const char *name, long long index,
                                                    long long count, bool read_only)
{
    if (tm_check_state.hits.fetch_add(1) != 0) return;
    const uint3 t = tm_emu_tls.thread_idx, b = tm_emu_tls.block_idx;
    snprintf(tm_check_state.message, sizeof tm_check_state.message,
             "out-of-bounds %s %s[%lld] (the buffer passed for '%s' has %lld elements) by thread "
             "(%u,%u,%u) of block (%u,%u,%u)",
             read_only ? "read of" : "read or write of", name, index, name, count, t.x, t.y, t.z,
             b.x, b.y, b.z);
}

template <typename T>
static inline T &tm_check_scratch()
{
    typedef typename std::remove_const<T>::type U;
    static thread_local U scratch;
    scratch = U();
    return scratch;
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
// or check mode's first out-of-bounds access (reported as cudaErrorIllegalAddress).
static inline int tm_user_finish(cudaError_t err, char *detail, size_t detail_size)
{
    if (err != cudaSuccess) {
        const char *d = tm_emu_last_error_detail();
        snprintf(detail, detail_size, "%s", d ? d : "");
        return (int)err;
    }
#ifdef TM_CHECK
    const long long hits = tm_check_state.hits.exchange(0);
    if (hits) {
        snprintf(detail, detail_size, "tiledmm check: %s%s", tm_check_state.message,
                 hits > 1 ? " (and more out-of-bounds accesses after it)" : "");
        tm_check_state.message[0] = '\0';
        return (int)cudaErrorIllegalAddress;
    }
#endif
    return 0;
}
#endif
