// cooperative_groups.h: tiledmm's stand-in for the CUDA toolkit's header of this name, on the
// emulator (tm.compile kernels and tm.run programs): this_thread_block(), tiled_partition<N>()
// with shfl, shfl_up, shfl_down, shfl_xor, any, all, ballot, sync, thread_rank, size and
// meta_group_rank/size, and cg::reduce with cg::plus/less/greater/bit_and/bit_or/bit_xor
// (<cooperative_groups/reduce.h>). A tile's operations are the warp operations of the lanes of
// its tile (emu/cuda_emu.h), so a tile that not all its threads reach is reported as a
// stuck warp barrier, never a hang. Grid groups (this_grid, cooperative launches) are not
// emulated: they are a compile error here.
#pragma once
#include "tiledmm_kernel.h"

#ifdef TM_EMU
namespace cooperative_groups {

class thread_block {
public:
    static void sync(const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        tm_emu_syncthreads(file, line);
    }
    static unsigned thread_rank() { return (unsigned)tm_emu_tls.linear_tid; }
    static unsigned size() { return blockDim.x * blockDim.y * blockDim.z; }
    static unsigned num_threads() { return size(); }
    static dim3 group_index() { return dim3(blockIdx); }
    static dim3 thread_index() { return dim3(threadIdx); }
    static dim3 group_dim() { return blockDim; }
    static dim3 dim_threads() { return blockDim; }
};

static inline thread_block this_thread_block() { return thread_block(); }
static inline void sync(const thread_block &, const char *file = __builtin_FILE(),
                        int line = __builtin_LINE())
{
    thread_block::sync(file, line);
}

template <unsigned N, typename Parent = void>
class thread_block_tile {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
                  "tiled_partition<N>: N is a power of two from 1 to 32");

public:
    thread_block_tile() = default;
    // tiled_partition<32>(block) is a thread_block_tile<32, thread_block>, which converts to
    // the thread_block_tile<32> that programs declare
    template <typename Q>
    thread_block_tile(const thread_block_tile<N, Q> &) {}
    static unsigned lane() { return (unsigned)tm_emu_tls.linear_tid % 32u; }
    static unsigned mask()
    {
        const unsigned base = lane() / N * N;
        return N == 32 ? 0xffffffffu : (((1u << N) - 1u) << base);
    }
    static unsigned thread_rank() { return (unsigned)tm_emu_tls.linear_tid % N; }
    static constexpr unsigned size() { return N; }
    static constexpr unsigned num_threads() { return N; }
    static unsigned meta_group_rank() { return (unsigned)tm_emu_tls.linear_tid / N; }
    static unsigned meta_group_size() { return (thread_block::size() + N - 1) / N; }
    static void sync(const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        __syncwarp(mask(), file, line);
    }
    template <typename T>
    static T shfl(T var, int src, const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        return __shfl_sync(mask(), var, src, (int)N, file, line);
    }
    template <typename T>
    static T shfl_down(T var, unsigned delta, const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        return __shfl_down_sync(mask(), var, delta, (int)N, file, line);
    }
    template <typename T>
    static T shfl_up(T var, unsigned delta, const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        return __shfl_up_sync(mask(), var, delta, (int)N, file, line);
    }
    template <typename T>
    static T shfl_xor(T var, unsigned lane_mask, const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        return __shfl_xor_sync(mask(), var, (int)lane_mask, (int)N, file, line);
    }
    static int any(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        return __any_sync(mask(), pred, file, line);
    }
    static int all(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        return __all_sync(mask(), pred, file, line);
    }
    static unsigned ballot(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        return __ballot_sync(mask(), pred, file, line) >> (lane() / N * N);
    }
};

template <unsigned N, typename Parent>
static inline thread_block_tile<N, Parent> tiled_partition(const Parent &)
{
    return thread_block_tile<N, Parent>();
}
template <unsigned N, typename P>
static inline void sync(const thread_block_tile<N, P> &t) { t.sync(); }

// ---- cg::reduce (cooperative_groups/reduce.h): every lane of the tile gets the result ----
#define TM_CG_OP(NAME, EXPR)                                                                   \
    template <typename T = void> struct NAME {                                                 \
        T operator()(const T &a, const T &b) const { return EXPR; }                           \
    };                                                                                         \
    template <> struct NAME<void> {                                                            \
        template <typename T> T operator()(const T &a, const T &b) const { return EXPR; }     \
    };
TM_CG_OP(plus, a + b)
TM_CG_OP(less, b < a ? b : a)
TM_CG_OP(greater, a < b ? b : a)
TM_CG_OP(bit_and, a & b)
TM_CG_OP(bit_or, a | b)
TM_CG_OP(bit_xor, a ^ b)
#undef TM_CG_OP

template <unsigned N, typename P, typename T, typename Op>
static inline T reduce(const thread_block_tile<N, P> &tile, T value, Op op)
{
    for (unsigned d = N / 2; d > 0; d /= 2) value = op(value, tile.shfl_xor(value, d));
    return value;
}

template <unsigned N, typename P, typename T, typename Op>
static inline T inclusive_scan(const thread_block_tile<N, P> &tile, T value, Op op)
{
    for (unsigned d = 1; d < N; d *= 2) {
        T other = tile.shfl_up(value, d);
        if (tile.thread_rank() >= d) value = op(value, other);
    }
    return value;
}

}  // namespace cooperative_groups
#endif
