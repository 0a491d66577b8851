// cuda_emu.h: makes plain CUDA C kernel sources compile with a host C++17 compiler (g++) and
// run on the tiledmm CPU emulator. Included by common.h when TM_EMU is defined.
//
// Model: each block's threads are cooperatively scheduled fibers on one OS thread; blocks run
// in parallel on OS worker threads. __shared__ is `static thread_local` (one block at a time
// per OS thread); threadIdx/blockIdx/... read per-OS-thread state the scheduler sets on each
// fiber switch; __syncthreads() and warp operations are barriers that switch fibers.
#pragma once
#ifndef __cplusplus
#error "cuda_emu.h is C++ (kernels are compiled as C++17); C code includes emu/runtime_api.h"
#endif

// Standard headers first: the macros below (__noinline__ in particular) would break them if
// they were included afterwards.
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#include <math.h>
#include <stdint.h>

#include "runtime_api.h"

#pragma GCC diagnostic ignored "-Wunknown-pragmas"   // `#pragma unroll`

// ---- function and variable qualifiers ----
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
// No __noinline__: newer libstdc++ headers spell `__attribute__((__noinline__))`, which such a
// macro would break in any standard header included after this one (seen with the GPU
// machine's g++); tiledmm's kernels do not use it.
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local
#define __CUDA_ARCH_EMU__ 1

// ---- per-OS-thread execution state (set by the scheduler on every fiber switch) ----
struct tm_emu_tls_t {
    uint3 thread_idx;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
    int linear_tid;     // x + y*bx + z*bx*by
    void *worker;       // the emulator's per-OS-thread state (opaque)
};
extern __thread tm_emu_tls_t tm_emu_tls __attribute__((visibility("hidden")));

#define threadIdx (static_cast<const uint3 &>(tm_emu_tls.thread_idx))
#define blockIdx (static_cast<const uint3 &>(tm_emu_tls.block_idx))
#define blockDim (static_cast<const dim3 &>(tm_emu_tls.block_dim))
#define gridDim (static_cast<const dim3 &>(tm_emu_tls.grid_dim))
static constexpr int warpSize = 32;

// ---- scheduler entry points (emu/scheduler.cpp) ----
extern "C" void *tm_emu_dynamic_shared(void);
extern "C" void tm_emu_syncthreads(const char *file, int line);
extern "C" int tm_emu_syncthreads_op(int op, int pred, const char *file, int line);
// grid.sync() in a cooperative launch; the next launch of this thread cooperative (scheduler.cpp)
extern "C" void tm_emu_grid_sync(const char *file, int line);
extern "C" void tm_emu_split_grid_sync(const char *file, int line);   // the same, split kernels
extern "C" void tm_emu_set_cooperative_launch(int on);
// The calling block's barrier epoch: changes at each completed __syncthreads() and block start
// (check mode's shared-memory race detection).
extern "C" unsigned long long tm_emu_barrier_epoch(void);

namespace tm_emu {
// OP_COALESCE: cg::coalesced_threads(), the lanes that reach the call together (scheduler.cpp)
enum WarpOp {
    OP_SYNCWARP = 0,
    OP_SHFL,
    OP_SHFL_UP,
    OP_SHFL_DOWN,
    OP_SHFL_XOR,
    OP_BALLOT,
    OP_ALL,
    OP_ANY,
    OP_COALESCE,
    OP_MATCH_ANY
};
unsigned long long warp_op(int op, unsigned mask, unsigned long long value, int arg, int width,
                           const char *file, int line);
unsigned activemask();
void threadfence();
cudaError_t launch(const void *func, void (*invoke)(void *), void *pack, dim3 grid, dim3 block,
                   size_t shared_bytes);
// `invoke` runs a whole block (a kernel split at its barriers into loops over the block's
// threads, tiledmm/toolchain/split/transform.py) on the worker's own stack, without fibers.
cudaError_t launch_whole_blocks(const void *func, void (*invoke)(void *), void *pack, dim3 grid,
                                dim3 block, size_t shared_bytes);
long long clock64();
// A kernel split at warp granularity (barrier_split's warp `if`) found warp `warp` of the block
// running as thread loops with lanes `waiting` entering an `if` holding a full-mask __syncwarp()
// at file:line and the other existing lanes `missing` not: on fibers no thread could proceed.
// Records the failure; the split function returns at once and the block is reported as the
// fibers report it (scheduler.cpp, run_block).
// `op`: the branch's first warp operation, where those lanes wait (a shuffle or vote there too).
void split_warp_stuck(const char *file, int line, int warp, unsigned waiting, unsigned missing,
                      const char *op = "__syncwarp()");

// A shuffle's width as warp_op takes it: a power of two in 1..32, anything else is 32.
static inline int shfl_width(int width)
{
    return (width <= 0 || width > 32 || (width & (width - 1))) ? 32 : width;
}
// The lane whose value a shuffle `op` gives lane `l` (arg: srcLane, delta or laneMask as an int;
// `wd` from shfl_width), or -1 for the lane's own value; the caller also takes the own value
// when that lane is not in the group (warp_op) or does not exist (split_shfl).
static inline int shfl_source(int op, int l, int arg, int wd)
{
    const int seg = l & ~(wd - 1);
    int src = -1;
    switch (op) {
    case OP_SHFL: src = seg + (arg & (wd - 1)); break;
    case OP_SHFL_UP: src = ((l & (wd - 1)) >= arg) ? l - arg : -1; break;
    case OP_SHFL_DOWN: src = ((l & (wd - 1)) + arg < wd) ? l + arg : -1; break;
    case OP_SHFL_XOR:
        src = l ^ arg;
        if (src < 0 || src >= seg + wd) src = -1;
        break;
    default: break;
    }
    return src;
}
// A kernel split into thread loops (tiledmm/toolchain/split/transform.py) runs a full-mask shuffle
// as two loops: each thread's value's bits go to `vals` (one per thread of the block), then
// thread `t` (linear index; `nt` threads in the block) takes its result here: what warp_op
// gives when every existing lane of the warp arrives with a full mask.
static inline unsigned long long split_shfl(int op, const unsigned long long *vals, unsigned t,
                                            unsigned nt, int arg, int width)
{
    const int l = (int)(t & 31u);
    const unsigned base = t - (unsigned)l;
    const int lanes = nt - base >= 32 ? 32 : (int)(nt - base);
    const int src = shfl_source(op, l, arg, shfl_width(width));
    return (src >= 0 && src < lanes) ? vals[base + (unsigned)src] : vals[t];
}
// The same for a full-mask vote: `ballots[w]` holds warp w's lanes whose predicate is not zero.
static inline unsigned long long split_vote(int op, const unsigned *ballots, unsigned t,
                                            unsigned nt)
{
    const unsigned base = t & ~31u;
    const unsigned lanes = nt - base >= 32 ? 32 : nt - base;
    const unsigned exist = lanes == 32 ? ~0u : (1u << lanes) - 1u;
    const unsigned bal = ballots[t >> 5];
    return op == OP_BALLOT ? bal
           : op == OP_ALL  ? (unsigned long long)(bal == exist)
                           : (unsigned long long)(bal != 0);
}

template <typename T>
static inline unsigned long long to_bits(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffles move scalars of at most 8 bytes");
    unsigned long long b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <typename T>
static inline T from_bits(unsigned long long b)
{
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}
}  // namespace tm_emu

// ---- synchronisation ----
#define __syncthreads() tm_emu_syncthreads(__FILE__, __LINE__)
#define __syncthreads_count(pred) tm_emu_syncthreads_op(0, (pred), __FILE__, __LINE__)
#define __syncthreads_and(pred) tm_emu_syncthreads_op(1, (pred), __FILE__, __LINE__)
#define __syncthreads_or(pred) tm_emu_syncthreads_op(2, (pred), __FILE__, __LINE__)

static inline void __syncwarp(unsigned mask = 0xffffffffu, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE())
{
    tm_emu::warp_op(tm_emu::OP_SYNCWARP, mask, 0, 0, 32, file, line);
}
static inline void __threadfence()
{
    tm_emu::threadfence();
}
static inline void __threadfence_block()
{
    std::atomic_signal_fence(std::memory_order_seq_cst);
}
static inline void __threadfence_system()
{
    tm_emu::threadfence();
}
static inline unsigned __activemask()
{
    return tm_emu::activemask();
}
static inline long long clock64()
{
    return tm_emu::clock64();
}

// ---- warp shuffles and votes (32-lane semantics over the lanes in the mask) ----
template <typename T>
static inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32,
                            const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return tm_emu::from_bits<T>(
        tm_emu::warp_op(tm_emu::OP_SHFL, mask, tm_emu::to_bits(var), srcLane, width, file, line));
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                               const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return tm_emu::from_bits<T>(tm_emu::warp_op(tm_emu::OP_SHFL_UP, mask, tm_emu::to_bits(var),
                                                (int)delta, width, file, line));
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                                 const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return tm_emu::from_bits<T>(tm_emu::warp_op(tm_emu::OP_SHFL_DOWN, mask, tm_emu::to_bits(var),
                                                (int)delta, width, file, line));
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32,
                                const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return tm_emu::from_bits<T>(tm_emu::warp_op(tm_emu::OP_SHFL_XOR, mask, tm_emu::to_bits(var),
                                                laneMask, width, file, line));
}
static inline unsigned __ballot_sync(unsigned mask, int pred, const char *file = __builtin_FILE(),
                                     int line = __builtin_LINE())
{
    return (unsigned)tm_emu::warp_op(tm_emu::OP_BALLOT, mask, pred != 0, 0, 32, file, line);
}
static inline int __all_sync(unsigned mask, int pred, const char *file = __builtin_FILE(),
                             int line = __builtin_LINE())
{
    return (int)tm_emu::warp_op(tm_emu::OP_ALL, mask, pred != 0, 0, 32, file, line);
}
static inline int __any_sync(unsigned mask, int pred, const char *file = __builtin_FILE(),
                             int line = __builtin_LINE())
{
    return (int)tm_emu::warp_op(tm_emu::OP_ANY, mask, pred != 0, 0, 32, file, line);
}
// __match_any_sync / __match_all_sync (compute capability 7.0): lanes holding the same value
template <typename T>
static inline unsigned __match_any_sync(unsigned mask, T value, const char *file = __builtin_FILE(),
                                        int line = __builtin_LINE())
{
    static_assert(sizeof(T) <= 8, "__match_any_sync takes a value of at most 8 bytes");
    return (unsigned)tm_emu::warp_op(tm_emu::OP_MATCH_ANY, mask, tm_emu::to_bits(value), 0, 32,
                                     file, line);
}
template <typename T>
static inline unsigned __match_all_sync(unsigned mask, T value, int *pred,
                                        const char *file = __builtin_FILE(),
                                        int line = __builtin_LINE())
{
    const unsigned same = __match_any_sync(mask, value, file, line);
    const bool all = same == (mask & same) && (same | ~mask) == ~0u;
    if (pred) *pred = all;
    return all ? mask : 0u;
}
// __reduce_*_sync (compute capability 8.0): the lanes of mask reduce a value (via shuffles)
#define TM_EMU_REDUCE_SYNC(NAME, T, OP)                                           \
    static inline T NAME(unsigned mask, T v, const char *file = __builtin_FILE(), \
                         int line = __builtin_LINE())                             \
    {                                                                             \
        T acc = v;                                                                \
        bool first = true;                                                        \
        for (unsigned m = mask; m; m &= m - 1) {                                  \
            const T x = __shfl_sync(mask, v, __builtin_ctz(m), 32, file, line);   \
            acc = first ? x : OP;                                                 \
            first = false;                                                        \
        }                                                                         \
        return acc;                                                               \
    }
TM_EMU_REDUCE_SYNC(__reduce_add_sync, int, acc + x)
TM_EMU_REDUCE_SYNC(__reduce_add_sync, unsigned, acc + x)
TM_EMU_REDUCE_SYNC(__reduce_min_sync, int, x < acc ? x : acc)
TM_EMU_REDUCE_SYNC(__reduce_min_sync, unsigned, x < acc ? x : acc)
TM_EMU_REDUCE_SYNC(__reduce_max_sync, int, x > acc ? x : acc)
TM_EMU_REDUCE_SYNC(__reduce_max_sync, unsigned, x > acc ? x : acc)
TM_EMU_REDUCE_SYNC(__reduce_and_sync, unsigned, acc &x)
TM_EMU_REDUCE_SYNC(__reduce_or_sync, unsigned, acc | x)
TM_EMU_REDUCE_SYNC(__reduce_xor_sync, unsigned, acc ^ x)
#undef TM_EMU_REDUCE_SYNC

// ---- atomics (real atomics: blocks run in parallel) ----
namespace tm_emu {
template <typename T>
static inline T atomic_fetch_add(T *p, T v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
template <typename F, typename U>
static inline F atomic_float_update(F *p, F v, int op)
{
    static_assert(sizeof(F) == sizeof(U), "size");
    U *up = reinterpret_cast<U *>(p);
    U old = __atomic_load_n(up, __ATOMIC_RELAXED);
    for (;;) {
        F of;
        std::memcpy(&of, &old, sizeof(F));
        F nf = op == 0 ? of + v : op == 1 ? (v < of ? v : of) : op == 2 ? (v > of ? v : of) : v;
        U nu;
        std::memcpy(&nu, &nf, sizeof(F));
        if (__atomic_compare_exchange_n(up, &old, nu, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            return of;
    }
}
template <typename T>
static inline T atomic_min(T *p, T v)
{
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < old &&
           !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {}
    return old;
}
template <typename T>
static inline T atomic_max(T *p, T v)
{
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > old &&
           !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {}
    return old;
}
template <typename T>
static inline T atomic_cas(T *p, T compare, T val)
{
    __atomic_compare_exchange_n(p, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare;   // the old value either way
}
}  // namespace tm_emu

static inline int atomicAdd(int *p, int v)
{
    return tm_emu::atomic_fetch_add(p, v);
}
static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    return tm_emu::atomic_fetch_add(p, v);
}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    return tm_emu::atomic_fetch_add(p, v);
}
static inline long long atomicAdd(long long *p, long long v)
{
    return tm_emu::atomic_fetch_add(p, v);
}
static inline float atomicAdd(float *p, float v)
{
    return tm_emu::atomic_float_update<float, uint32_t>(p, v, 0);
}
static inline double atomicAdd(double *p, double v)
{
    return tm_emu::atomic_float_update<double, uint64_t>(p, v, 0);
}
static inline int atomicSub(int *p, int v)
{
    return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned atomicSub(unsigned *p, unsigned v)
{
    return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
}
static inline int atomicExch(int *p, int v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned atomicExch(unsigned *p, unsigned v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned long long atomicExch(unsigned long long *p, unsigned long long v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
static inline float atomicExch(float *p, float v)
{
    return tm_emu::atomic_float_update<float, uint32_t>(p, v, 3);
}
static inline int atomicMin(int *p, int v)
{
    return tm_emu::atomic_min(p, v);
}
static inline unsigned atomicMin(unsigned *p, unsigned v)
{
    return tm_emu::atomic_min(p, v);
}
static inline long long atomicMin(long long *p, long long v)
{
    return tm_emu::atomic_min(p, v);
}
static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v)
{
    return tm_emu::atomic_min(p, v);
}
static inline int atomicMax(int *p, int v)
{
    return tm_emu::atomic_max(p, v);
}
static inline unsigned atomicMax(unsigned *p, unsigned v)
{
    return tm_emu::atomic_max(p, v);
}
static inline long long atomicMax(long long *p, long long v)
{
    return tm_emu::atomic_max(p, v);
}
static inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v)
{
    return tm_emu::atomic_max(p, v);
}
static inline int atomicCAS(int *p, int c, int v)
{
    return tm_emu::atomic_cas(p, c, v);
}
static inline unsigned atomicCAS(unsigned *p, unsigned c, unsigned v)
{
    return tm_emu::atomic_cas(p, c, v);
}
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long c,
                                           unsigned long long v)
{
    return tm_emu::atomic_cas(p, c, v);
}
static inline int atomicAnd(int *p, int v)
{
    return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned atomicAnd(unsigned *p, unsigned v)
{
    return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);
}
static inline int atomicOr(int *p, int v)
{
    return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned atomicOr(unsigned *p, unsigned v)
{
    return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
static inline int atomicXor(int *p, int v)
{
    return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned atomicXor(unsigned *p, unsigned v)
{
    return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned atomicInc(unsigned *p, unsigned limit)
{
    unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1u, true,
                                        __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {}
    return old;
}
static inline unsigned atomicDec(unsigned *p, unsigned limit)
{
    unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, (old == 0u || old > limit) ? limit : old - 1u,
                                        true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {}
    return old;
}

// ---- loads, math and bit intrinsics ----
template <typename T>
static inline T __ldg(const T *p)
{
    return *p;
}

template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline std::common_type_t<A, B> min(A a, B b)
{
    typedef std::common_type_t<A, B> C;
    return (C)b < (C)a ? (C)b : (C)a;
}
template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline std::common_type_t<A, B> max(A a, B b)
{
    typedef std::common_type_t<A, B> C;
    return (C)a < (C)b ? (C)b : (C)a;
}
static inline float rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}
static inline double rsqrt(double x)
{
    return 1.0 / sqrt(x);
}
static inline float __fdividef(float a, float b)
{
    return a / b;
}
static inline float __fdiv_rn(float a, float b)
{
    return a / b;
}
static inline float __fmul_rn(float a, float b)
{
    return a * b;
}
static inline float __fadd_rn(float a, float b)
{
    return a + b;
}
static inline float __fmaf_rn(float a, float b, float c)
{
    return fmaf(a, b, c);
}
static inline double __fma_rn(double a, double b, double c)
{
    return fma(a, b, c);
}
static inline double __dmul_rn(double a, double b)
{
    return a * b;
}
static inline double __dadd_rn(double a, double b)
{
    return a + b;
}
// The fast-math intrinsics: glibc's <math.h> declares __expf, __logf, __sinf... (C linkage,
// noexcept) and libm exports none of them, so they are defined here with those declarations'
// linkage (an inline definition: each program has its own, and the loader finds nothing missing).
#define TM_EMU_FAST1(NAME, EXPR)                   \
    extern "C" inline float NAME(float x) noexcept \
    {                                              \
        return EXPR;                               \
    }
TM_EMU_FAST1(__expf, expf(x))
TM_EMU_FAST1(__exp10f, powf(10.0f, x))
TM_EMU_FAST1(__logf, logf(x))
TM_EMU_FAST1(__log2f, log2f(x))
TM_EMU_FAST1(__log10f, log10f(x))
TM_EMU_FAST1(__sinf, sinf(x))
TM_EMU_FAST1(__cosf, cosf(x))
TM_EMU_FAST1(__tanf, tanf(x))
#undef TM_EMU_FAST1
extern "C" inline float __powf(float x, float y) noexcept
{
    return powf(x, y);
}
extern "C" inline void __sincosf(float x, float *s, float *c) noexcept
{
    *s = sinf(x);
    *c = cosf(x);
}
// the integer and float helpers of CUDA's math API that have no C library counterpart: device
// functions, so not in a program's host-only file (a .cpp: nvcc gives it to the host compiler,
// which sees none of them; NVIDIA's mergeSort_host.cpp defines its own umin)
#ifndef TM_PROG_HOST_FILE
static inline unsigned umin(unsigned a, unsigned b)
{
    return a < b ? a : b;
}
static inline unsigned umax(unsigned a, unsigned b)
{
    return a < b ? b : a;
}
static inline unsigned long long ullmin(unsigned long long a, unsigned long long b)
{
    return a < b ? a : b;
}
static inline unsigned long long ullmax(unsigned long long a, unsigned long long b)
{
    return a < b ? b : a;
}
static inline long long llmin(long long a, long long b)
{
    return a < b ? a : b;
}
static inline long long llmax(long long a, long long b)
{
    return a < b ? b : a;
}
#endif
static inline float __frcp_rn(float x)
{
    return 1.0f / x;
}
static inline float __fsqrt_rn(float x)
{
    return sqrtf(x);
}
static inline float __fsub_rn(float a, float b)
{
    return a - b;
}
static inline double __dsub_rn(double a, double b)
{
    return a - b;
}
static inline double __ddiv_rn(double a, double b)
{
    return a / b;
}
static inline int __sad(int a, int b, unsigned c)
{
    return (int)((a > b ? (unsigned)(a - b) : (unsigned)(b - a)) + c);
}
static inline unsigned __usad(unsigned a, unsigned b, unsigned c)
{
    return (a > b ? a - b : b - a) + c;
}
static inline int __float2int_rn(float x)
{
    return (int)nearbyintf(x);
}
static inline int __float2int_rz(float x)
{
    return (int)x;
}
static inline int __float2int_rd(float x)
{
    return (int)floorf(x);
}
static inline int __float2int_ru(float x)
{
    return (int)ceilf(x);
}
static inline unsigned __float2uint_rn(float x)
{
    return (unsigned)nearbyintf(x);
}
static inline unsigned __float2uint_rz(float x)
{
    return (unsigned)x;
}
static inline float __int2float_rn(int x)
{
    return (float)x;
}
static inline float __uint2float_rn(unsigned x)
{
    return (float)x;
}
static inline int __double2int_rn(double x)
{
    return (int)nearbyint(x);
}
static inline int __double2int_rz(double x)
{
    return (int)x;
}
static inline float __double2float_rn(double x)
{
    return (float)x;
}
static inline double __int2double_rn(int x)
{
    return (double)x;
}
static inline int __hadd(int a, int b)
{
    return (int)(((long long)a + b) >> 1);
}
static inline int __rhadd(int a, int b)
{
    return (int)(((long long)a + b + 1) >> 1);
}
static inline unsigned __uhadd(unsigned a, unsigned b)
{
    return (unsigned)(((unsigned long long)a + b) >> 1);
}
static inline unsigned __urhadd(unsigned a, unsigned b)
{
    return (unsigned)(((unsigned long long)a + b + 1) >> 1);
}
static inline long long __mul64hi(long long a, long long b)
{
    return (long long)(((__int128)a * b) >> 64);
}
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline float __saturatef(float x)
{
    return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
static inline int __float_as_int(float f)
{
    return tm_emu::from_bits<int>(tm_emu::to_bits(f));
}
static inline float __int_as_float(int i)
{
    return tm_emu::from_bits<float>(tm_emu::to_bits(i));
}
static inline unsigned __float_as_uint(float f)
{
    return tm_emu::from_bits<unsigned>(tm_emu::to_bits(f));
}
static inline float __uint_as_float(unsigned i)
{
    return tm_emu::from_bits<float>(tm_emu::to_bits(i));
}
static inline long long __double_as_longlong(double d)
{
    return tm_emu::from_bits<long long>(tm_emu::to_bits(d));
}
static inline double __longlong_as_double(long long i)
{
    return tm_emu::from_bits<double>(tm_emu::to_bits(i));
}
static inline int __popc(unsigned x)
{
    return __builtin_popcount(x);
}
static inline int __popcll(unsigned long long x)
{
    return __builtin_popcountll(x);
}
static inline int __ffs(int x)
{
    return __builtin_ffs(x);
}
static inline int __ffsll(long long x)
{
    return __builtin_ffsll(x);
}
static inline int __clz(int x)
{
    return x == 0 ? 32 : __builtin_clz((unsigned)x);
}
static inline int __clzll(long long x)
{
    return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}
static inline unsigned __brev(unsigned x)
{
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
static inline int __mul24(int a, int b)
{
    return a * b;
}
static inline unsigned __umul24(unsigned a, unsigned b)
{
    return a * b;
}
static inline int __mulhi(int a, int b)
{
    return (int)(((long long)a * b) >> 32);
}
static inline unsigned __umulhi(unsigned a, unsigned b)
{
    return (unsigned)(((unsigned long long)a * b) >> 32);
}

// ---- C++ overloads of the runtime API that take a kernel pointer (as cuda_runtime.h has) ----
template <typename... P>
static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, void (*func)(P...))
{
    return cudaFuncGetAttributes(attr, reinterpret_cast<const void *>(func));
}
template <typename... P>
static inline cudaError_t cudaFuncSetAttribute(void (*func)(P...), cudaFuncAttribute attr,
                                               int value)
{
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(func), attr, value);
}
template <typename... P>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void (*func)(P...),
                                                                        int blockSize, size_t dyn)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, reinterpret_cast<const void *>(func),
                                                         blockSize, dyn);
}
template <typename T>
static inline cudaError_t cudaMemcpyToSymbol(T &symbol, const void *src, size_t count,
                                             size_t offset = 0,
                                             cudaMemcpyKind kind = cudaMemcpyHostToDevice)
{
    if (offset + count > sizeof(T)) return cudaErrorInvalidValue;
    (void)kind;
    std::memcpy(reinterpret_cast<char *>(&symbol) + offset, src, count);
    return cudaSuccess;
}
template <typename T>
static inline cudaError_t cudaMemcpyFromSymbol(void *dst, const T &symbol, size_t count,
                                               size_t offset = 0,
                                               cudaMemcpyKind kind = cudaMemcpyDeviceToHost)
{
    if (offset + count > sizeof(T)) return cudaErrorInvalidValue;
    (void)kind;
    std::memcpy(dst, reinterpret_cast<const char *>(&symbol) + offset, count);
    return cudaSuccess;
}

// ---- launch: runs the whole grid synchronously; returns the launch's error ----
// Packs the arguments as the kernel's own parameter types and hands `fn` (the kernel, or its
// split) to one of the scheduler's two entries; `kernel` names the launch (its attributes,
// its reports).
template <typename... Params, typename... Args>
static inline cudaError_t tm_emu_launch_via(decltype(&tm_emu::launch) entry,
                                            void (*kernel)(Params...), void (*fn)(Params...),
                                            dim3 grid, dim3 block, size_t shared_bytes,
                                            Args... args)
{
    static_assert(sizeof...(Params) == sizeof...(Args), "kernel argument count mismatch");
    typedef std::tuple<std::decay_t<Params>...> Tuple;
    struct Pack {
        void (*k)(Params...);
        Tuple a;
    };
    Pack pack{fn, Tuple(args...)};
    return entry(reinterpret_cast<const void *>(kernel), [](void *p) {
        Pack *pk = static_cast<Pack *>(p);
        std::apply(pk->k, pk->a);
    }, &pack, grid, block, shared_bytes);
}

// One fiber per thread.
template <typename... Params, typename... Args>
static inline cudaError_t tm_emu_launch(void (*kernel)(Params...), dim3 grid, dim3 block,
                                        size_t shared_bytes, Args... args)
{
    return tm_emu_launch_via(&tm_emu::launch, kernel, kernel, grid, block, shared_bytes, args...);
}

// The same launch of a kernel split at its barriers (tiledmm/toolchain/split/transform.py): `block_fn`,
// with the kernel's parameters, runs one whole block per call.
template <typename... Params, typename... Args>
static inline cudaError_t tm_emu_launch_blocks(void (*kernel)(Params...),
                                               void (*block_fn)(Params...), dim3 grid, dim3 block,
                                               size_t shared_bytes, Args... args)
{
    return tm_emu_launch_via(&tm_emu::launch_whole_blocks, kernel, block_fn, grid, block,
                             shared_bytes, args...);
}

// A registry kernel paired with its split at barriers (setup.py runs
// tiledmm/toolchain/split/transform.registry_source over cuda/*.cu for this build): the kernel's
// name in the rest of its file names this pair, which converts back to the kernel, so only
// tm_launch (common.h) sees the difference. `frame`: bytes of per-thread arrays per thread.
template <typename Fn>
struct tm_emu_split_kernel;
template <typename... Params>
struct tm_emu_split_kernel<void (*)(Params...)> {
    typedef void (*fn_type)(Params...);
    fn_type kernel, split;
    size_t frame;
    operator fn_type() const { return kernel; }
    operator const void *() const { return reinterpret_cast<const void *>(kernel); }
};

// The largest per-block frame run as thread loops (barrier_split.MAX_FRAME; larger: fibers).
#define TM_EMU_SPLIT_MAX_FRAME (512u * 1024u)

// The one decision whether a kernel that has a split (`split`, `frame` bytes of per-thread
// arrays per thread) takes its thread loops, for registry launches, tm.compile launchers and
// whole programs alike: not when the block's per-thread arrays exceed TM_EMU_SPLIT_MAX_FRAME,
// nor under TILEDMM_EMU_SPLIT=0 (read at each launch, so that it can change between calls).
// Why not is noted for Launch.path_reason (tm_emu_last_launch_reason).
template <typename... Params, typename... Args>
static inline cudaError_t tm_emu_launch_pair(void (*kernel)(Params...), void (*split)(Params...),
                                             size_t frame, dim3 grid, dim3 block,
                                             size_t shared_bytes, Args... args)
{
    char why[160] = "";
    const unsigned long long bytes = (unsigned long long)block.x * block.y * block.z * frame;
    const char *env = getenv("TILEDMM_EMU_SPLIT");
    if (!split) return tm_emu_launch(kernel, grid, block, shared_bytes, args...);
    if (bytes > TM_EMU_SPLIT_MAX_FRAME)
        snprintf(why, sizeof why, "per-thread arrays of %llu bytes per block (more than %u)", bytes,
                 TM_EMU_SPLIT_MAX_FRAME);
    else if (env && env[0] == '0' && env[1] == 0)
        snprintf(why, sizeof why, "TILEDMM_EMU_SPLIT=0");
    if (!why[0]) return tm_emu_launch_blocks(kernel, split, grid, block, shared_bytes, args...);
    const cudaError_t err = tm_emu_launch(kernel, grid, block, shared_bytes, args...);
    tm_emu_note_launch_reason(why);
    return err;
}

template <typename... Params, typename... Args>
static inline cudaError_t tm_emu_launch_split(const tm_emu_split_kernel<void (*)(Params...)> &k,
                                              dim3 grid, dim3 block, size_t shared_bytes,
                                              Args... args)
{
    return tm_emu_launch_pair(k.kernel, k.split, k.frame, grid, block, shared_bytes, args...);
}
