// cooperative_groups.h: tiledmm's stand-in for the CUDA toolkit's header of this name, on the
// emulator (tm.compile kernels and tm.run programs): this_thread_block(), tiled_partition<N>()
// with shfl, shfl_up, shfl_down, shfl_xor, any, all, ballot, sync, thread_rank, size and
// meta_group_rank/size, and cg::reduce with cg::plus/less/greater/bit_and/bit_or/bit_xor
// (<cooperative_groups/reduce.h>). A tile's operations are the warp operations of the lanes of
// its tile (emu/cuda_emu.h), so a tile that not all its threads reach is reported as a
// stuck warp barrier, never a hang. Groups made at run time (issue 43): cg::thread_group (a
// group by value), tiled_partition(parent, n) up to 32, coalesced_threads() (the lanes that reach
// the call together: emu/scheduler.cpp, coalesce_release), labeled_partition, binary_partition,
// and this_grid() (grid.sync() in a cudaLaunchCooperativeKernel launch, whose blocks the
// emulator runs at once; refused at its line in any other launch). Tiles wider than 32 (tiled_partition<64..1024>, with
// or without block_tile_memory): sync, ranks, cg::reduce and cg::inclusive_scan (wide_tile).
#pragma once
#include "tiledmm_kernel.h"

#include <cstring>
#include <type_traits>

#ifdef TM_EMU
namespace cooperative_groups {

namespace tm_detail {
inline unsigned lane()
{
    return (unsigned)tm_emu_tls.linear_tid % 32u;
}
// the lane of a warp that holds the group's rank r (the r-th set bit of mask), or -1
inline int nth_lane(unsigned mask, unsigned r)
{
    for (unsigned m = mask; m; m &= m - 1)
        if (r-- == 0) return __builtin_ctz(m);
    return -1;
}
[[noreturn]] inline void refuse(const char *what, const char *file, int line)
{
    fflush(stdout);
    fprintf(stderr, "tiledmm: %s:%d: %s\n", file, line, what);
    fflush(stderr);
    abort();
}
// A group's shuffle takes any trivially copyable type (CUDA's moves one wider than 8 bytes in
// pieces); the warp intrinsics move at most 8 bytes. `shuffle(piece)` is the intrinsic, the
// same for every piece, so every lane makes the same calls in the same order.
template <typename T, typename Shuffle>
inline T shfl_pieces(const T &var, Shuffle shuffle)
{
    static_assert(std::is_trivially_copyable<T>::value,
                  "cooperative groups shuffle trivially copyable types");
    if constexpr (sizeof(T) <= 8) {
        return shuffle(var);
    } else {
        constexpr size_t pieces = (sizeof(T) + 7) / 8;
        unsigned long long in[pieces] = {}, out[pieces];
        std::memcpy(in, &var, sizeof(T));
        for (size_t i = 0; i < pieces; ++i)
            out[i] = shuffle(in[i]);
        T result = var;
        std::memcpy(&result, out, sizeof(T));
        return result;
    }
}
}   // namespace tm_detail

// A group held by value (cg::thread_group, what a dynamic tiled_partition returns): the whole
// block, or lanes of one warp (`mask`: a tile, a coalesced group, a partition of one), or the
// grid.
class thread_group {
  public:
    // BLOCK_TILE: a tile wider than a warp (tm_detail::wide_tile), tile_ threads
    enum Kind : unsigned { BLOCK = 0, WARP_LANES = 1, GRID = 2, BLOCK_TILE = 3 };
    thread_group(Kind kind, unsigned mask = 0, unsigned tile = 0)
        : kind_(kind), mask_(mask), tile_(tile)
    {
    }
    void sync(const char *file = __builtin_FILE(), int line = __builtin_LINE()) const
    {
        if (kind_ == BLOCK || kind_ == BLOCK_TILE)
            tm_emu_syncthreads(file, line);
        else if (kind_ == WARP_LANES)
            __syncwarp(mask_, file, line);
        else
            tm_emu_grid_sync(file, line);   // a cooperative launch's blocks run at once
    }
    unsigned long long thread_rank() const
    {
        if (kind_ == BLOCK) return (unsigned)tm_emu_tls.linear_tid;
        if (kind_ == BLOCK_TILE) return (unsigned)tm_emu_tls.linear_tid % tile_;
        if (kind_ == WARP_LANES)
            return (unsigned)__builtin_popcount(mask_ & ((1u << tm_detail::lane()) - 1u));
        const unsigned long long block =
            blockIdx.x + (unsigned long long)gridDim.x *
                             (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
        return block * ((unsigned long long)blockDim.x * blockDim.y * blockDim.z) +
               (unsigned)tm_emu_tls.linear_tid;
    }
    unsigned long long size() const
    {
        const unsigned long long block = (unsigned long long)blockDim.x * blockDim.y * blockDim.z;
        if (kind_ == BLOCK) return block;
        if (kind_ == BLOCK_TILE) return tile_;
        if (kind_ == WARP_LANES) return (unsigned)__builtin_popcount(mask_);
        return block * gridDim.x * gridDim.y * gridDim.z;
    }
    unsigned long long num_threads() const { return size(); }
    unsigned get_type() const { return kind_; }
    unsigned tm_mask() const { return mask_; }
    unsigned tm_tile() const { return tile_; }

  protected:
    Kind kind_;
    unsigned mask_, tile_;   // WARP_LANES: the lanes; tile_: a tile's width (0: not a tile)
};

static inline void sync(const thread_group &g, const char *file = __builtin_FILE(),
                        int line = __builtin_LINE())
{
    g.sync(file, line);
}

class thread_block : public thread_group {
  public:
    thread_block() : thread_group(BLOCK) {}
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

static inline thread_block this_thread_block()
{
    return thread_block();
}
static inline void sync(const thread_block &, const char *file = __builtin_FILE(),
                        int line = __builtin_LINE())
{
    thread_block::sync(file, line);
}

namespace tm_detail {
// A tile of up to 32 lanes: its operations are warp operations on its lanes.
template <unsigned N>
class warp_tile : public thread_group {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
                  "tiled_partition<N>: N is a power of two from 1 to 32");

  public:
    warp_tile() : thread_group(WARP_LANES, mask(), N) {}
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
        return shfl_pieces(var,
                           [&](auto v) { return __shfl_sync(mask(), v, src, (int)N, file, line); });
    }
    template <typename T>
    static T shfl_down(T var, unsigned delta, const char *file = __builtin_FILE(),
                       int line = __builtin_LINE())
    {
        return shfl_pieces(
            var, [&](auto v) { return __shfl_down_sync(mask(), v, delta, (int)N, file, line); });
    }
    template <typename T>
    static T shfl_up(T var, unsigned delta, const char *file = __builtin_FILE(),
                     int line = __builtin_LINE())
    {
        return shfl_pieces(
            var, [&](auto v) { return __shfl_up_sync(mask(), v, delta, (int)N, file, line); });
    }
    template <typename T>
    static T shfl_xor(T var, unsigned lane_mask, const char *file = __builtin_FILE(),
                      int line = __builtin_LINE())
    {
        return shfl_pieces(var, [&](auto v) {
            return __shfl_xor_sync(mask(), v, (int)lane_mask, (int)N, file, line);
        });
    }
    static int any(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        return __any_sync(mask(), pred, file, line);
    }
    static int all(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        return __all_sync(mask(), pred, file, line);
    }
    static unsigned ballot(int pred, const char *file = __builtin_FILE(),
                           int line = __builtin_LINE())
    {
        return __ballot_sync(mask(), pred, file, line) >> (lane() / N * N);
    }
};

// A tile wider than a warp (64 to 1024 threads, what block_tile_memory makes room for on a GPU).
// Its sync and collective operations are the block's barrier here: stronger than the tile's own
// (only the tile's threads) and the same where every thread of the block reaches them, as in a
// block partitioned into tiles that all reduce; a tile that other threads of its block skip is
// reported as a stuck __syncthreads at its line, not run with a different meaning.
template <unsigned N>
class wide_tile : public thread_group {
    static_assert(N >= 64 && N <= 1024 && (N & (N - 1)) == 0,
                  "tiled_partition<N> wider than 32: N is a power of two up to 1024");

  public:
    wide_tile() : thread_group(BLOCK_TILE, 0, N) {}
    static unsigned thread_rank() { return (unsigned)tm_emu_tls.linear_tid % N; }
    static constexpr unsigned size() { return N; }
    static constexpr unsigned num_threads() { return N; }
    static unsigned meta_group_rank() { return (unsigned)tm_emu_tls.linear_tid / N; }
    static unsigned meta_group_size() { return (thread_block::size() + N - 1) / N; }
    static void sync(const char *file = __builtin_FILE(), int line = __builtin_LINE())
    {
        tm_emu_syncthreads(file, line);
    }
};

// Every thread's value, one slot per thread of the block: block_tile_memory's role. Per OS
// thread like __shared__ (emu/cuda_emu.h: one block at a time per OS thread).
template <typename T>
inline T *wide_slots()
{
    alignas(T) static thread_local unsigned char slots[1024 * sizeof(T)];
    return reinterpret_cast<T *>(slots);
}
}   // namespace tm_detail

template <unsigned N, typename Parent = void>
class thread_block_tile
    : public std::conditional<(N <= 32), tm_detail::warp_tile<N>, tm_detail::wide_tile<N>>::type {
  public:
    thread_block_tile() = default;
    // tiled_partition<32>(block) is a thread_block_tile<32, thread_block>, which converts to
    // the thread_block_tile<32> that programs declare
    template <typename Q>
    thread_block_tile(const thread_block_tile<N, Q> &)
    {
    }
};

// cg::block_tile_memory<MaxBlockSize>: the room a GPU's tiles wider than 32 share, given to
// this_thread_block(); the emulator's wide tiles keep their own (tm_detail::wide_slots).
template <unsigned MaxBlockSize = 1024>
struct block_tile_memory {
    static_assert(MaxBlockSize >= 1 && MaxBlockSize <= 1024,
                  "block_tile_memory<MaxBlockSize>: a block has at most 1024 threads");
};
template <unsigned M>
static inline thread_block this_thread_block(block_tile_memory<M> &)
{
    return thread_block();
}

template <unsigned N, typename Parent>
static inline thread_block_tile<N, Parent> tiled_partition(const Parent &)
{
    return thread_block_tile<N, Parent>();
}
template <unsigned N, typename P>
static inline void sync(const thread_block_tile<N, P> &t)
{
    t.sync();
}

// ---- groups made at run time: tiled_partition(parent, n), coalesced_threads(), partitions ----
// A group of lanes of one warp, as a thread_group (a dynamic tile, a coalesced group, a labeled
// or binary partition): its shuffles and votes by rank within the group.
class coalesced_group : public thread_group {
  public:
    explicit coalesced_group(unsigned mask, unsigned tile = 0)
        : thread_group(WARP_LANES, mask, tile)
    {
    }
    unsigned thread_rank() const { return (unsigned)thread_group::thread_rank(); }
    unsigned size() const { return (unsigned)__builtin_popcount(mask_); }
    unsigned num_threads() const { return size(); }
    unsigned meta_group_rank() const { return tile_ ? tm_detail::lane() / tile_ : 0; }
    unsigned meta_group_size() const
    {
        return tile_ ? (thread_block::size() + tile_ - 1) / tile_ : 1;
    }
    void sync(const char *file = __builtin_FILE(), int line = __builtin_LINE()) const
    {
        __syncwarp(mask_, file, line);
    }
    template <typename T>
    T shfl(T var, unsigned rank, const char *file = __builtin_FILE(),
           int line = __builtin_LINE()) const
    {
        const int src = tm_detail::nth_lane(mask_, rank);
        const int from = src < 0 ? (int)tm_detail::lane() : src;
        return tm_detail::shfl_pieces(
            var, [&](auto v) { return __shfl_sync(mask_, v, from, 32, file, line); });
    }
    template <typename T>
    T shfl_down(T var, unsigned delta, const char *file = __builtin_FILE(),
                int line = __builtin_LINE()) const
    {
        const unsigned r = thread_rank() + delta;
        return shfl(var, r < size() ? r : thread_rank(), file, line);
    }
    template <typename T>
    T shfl_up(T var, unsigned delta, const char *file = __builtin_FILE(),
              int line = __builtin_LINE()) const
    {
        const unsigned r = thread_rank();
        return shfl(var, r >= delta ? r - delta : r, file, line);
    }
    template <typename T>
    T shfl_xor(T var, unsigned m, const char *file = __builtin_FILE(),
               int line = __builtin_LINE()) const
    {
        const unsigned r = thread_rank() ^ m;
        return shfl(var, r < size() ? r : thread_rank(), file, line);
    }
    int any(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) const
    {
        return __any_sync(mask_, pred, file, line);
    }
    int all(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) const
    {
        return __all_sync(mask_, pred, file, line);
    }
    // the group's lanes whose pred is true, as bits in rank order
    unsigned ballot(int pred, const char *file = __builtin_FILE(),
                    int line = __builtin_LINE()) const
    {
        const unsigned b = __ballot_sync(mask_, pred, file, line);
        unsigned out = 0, r = 0;
        for (unsigned m = mask_; m; m &= m - 1, ++r)
            if (b & (1u << __builtin_ctz(m))) out |= 1u << r;
        return out;
    }
};

static inline coalesced_group coalesced_threads(const char *file = __builtin_FILE(),
                                                int line = __builtin_LINE())
{
    return coalesced_group(
        (unsigned)tm_emu::warp_op(tm_emu::OP_COALESCE, 0xffffffffu, 0, 0, 32, file, line));
}

// tiled_partition(parent, n): tiles of n threads (a power of two up to 32) of a block or a tile.
static inline coalesced_group tiled_partition(const thread_group &parent, unsigned n,
                                              const char *file = __builtin_FILE(),
                                              int line = __builtin_LINE())
{
    if (n == 0 || n > 32 || (n & (n - 1)))
        tm_detail::refuse(
            "tiled_partition(parent, n): the emulator takes n a power of two from 1 to 32", file,
            line);
    (void)parent;
    const unsigned base = tm_detail::lane() / n * n;
    return coalesced_group(n == 32 ? 0xffffffffu : (((1u << n) - 1u) << base), n);
}

// labeled_partition(g, label): the lanes of g with the same label.
template <typename G>
static inline coalesced_group labeled_partition(const G &g, int label,
                                                const char *file = __builtin_FILE(),
                                                int line = __builtin_LINE())
{
    return coalesced_group(__match_any_sync(g.tm_mask(), label, file, line));
}

// binary_partition(g, pred): the lanes of g whose pred is the same as this lane's.
template <typename G>
static inline coalesced_group binary_partition(const G &g, bool pred,
                                               const char *file = __builtin_FILE(),
                                               int line = __builtin_LINE())
{
    const unsigned gm = g.tm_mask();
    const unsigned yes = __ballot_sync(gm, pred, file, line);
    return coalesced_group(pred ? (yes & gm) : (gm & ~yes));
}

// The grid: thread_rank() and size() as on a GPU; sync() needs a cooperative launch.
class grid_group : public thread_group {
  public:
    grid_group() : thread_group(GRID) {}
    bool is_valid() const { return true; }
    unsigned long long block_rank() const
    {
        return blockIdx.x + (unsigned long long)gridDim.x *
                                (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    }
    unsigned long long num_blocks() const
    {
        return (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
    }
    dim3 group_dim() const { return gridDim; }
    dim3 dim_blocks() const { return gridDim; }
    dim3 block_index() const { return dim3(blockIdx); }
};
static inline grid_group this_grid()
{
    return grid_group();
}

template <typename T, typename Op>
static inline T reduce(const coalesced_group &g, T value, Op op)
{
    // every member folds the members' values in rank order (the same result in every lane)
    T acc = g.shfl(value, 0);
    for (unsigned r = 1; r < g.size(); ++r)
        acc = op(acc, g.shfl(value, r));
    return acc;
}

// ---- cg::reduce (cooperative_groups/reduce.h): every lane of the tile gets the result ----
#define TM_CG_OP(NAME, EXPR)                       \
    template <typename T = void>                   \
    struct NAME {                                  \
        T operator()(const T &a, const T &b) const \
        {                                          \
            return EXPR;                           \
        }                                          \
    };                                             \
    template <>                                    \
    struct NAME<void> {                            \
        template <typename T>                      \
        T operator()(const T &a, const T &b) const \
        {                                          \
            return EXPR;                           \
        }                                          \
    };
TM_CG_OP(plus, a + b)
TM_CG_OP(less, b < a ? b : a)
TM_CG_OP(greater, a < b ? b : a)
TM_CG_OP(bit_and, a &b)
TM_CG_OP(bit_or, a | b)
TM_CG_OP(bit_xor, a ^ b)
#undef TM_CG_OP

template <unsigned N, typename T, typename Op>
static inline T reduce(const tm_detail::warp_tile<N> &tile, T value, Op op)
{
    for (unsigned d = N / 2; d > 0; d /= 2)
        value = op(value, tile.shfl_xor(value, d));
    return value;
}

template <unsigned N, typename T, typename Op>
static inline T inclusive_scan(const tm_detail::warp_tile<N> &tile, T value, Op op)
{
    for (unsigned d = 1; d < N; d *= 2) {
        T other = tile.shfl_up(value, d);
        if (tile.thread_rank() >= d) value = op(value, other);
    }
    return value;
}

// A wide tile's reduce and scans: every thread's value through the block's slots, folded in
// rank order from the tile's first thread up to (not including) `end(base, tid)`, between two
// block barriers (the second keeps the slots until all have read them).
namespace tm_detail {
template <unsigned N, typename T, typename Op, typename End>
static inline T wide_fold(T value, Op op, End end, const char *file, int line)
{
    T *slots = wide_slots<T>();
    const unsigned tid = (unsigned)tm_emu_tls.linear_tid, base = tid / N * N;
    slots[tid] = value;
    tm_emu_syncthreads(file, line);
    T acc = slots[base];
    for (unsigned t = base + 1, last = end(base, tid); t < last; ++t)
        acc = op(acc, slots[t]);
    tm_emu_syncthreads(file, line);
    return acc;
}
}   // namespace tm_detail

template <unsigned N, typename T, typename Op>
static inline T reduce(const tm_detail::wide_tile<N> &, T value, Op op,
                       const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    const auto whole_tile = [](unsigned base, unsigned) {
        const unsigned block = (unsigned)thread_block::size();
        return base + N < block ? base + N : block;
    };
    return tm_detail::wide_fold<N>(value, op, whole_tile, file, line);
}

template <unsigned N, typename T, typename Op>
static inline T inclusive_scan(const tm_detail::wide_tile<N> &, T value, Op op,
                               const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    const auto up_to_me = [](unsigned, unsigned tid) { return tid + 1; };
    return tm_detail::wide_fold<N>(value, op, up_to_me, file, line);
}

}   // namespace cooperative_groups
#endif
