// common.h: what every kernel file includes. One dialect of CUDA C for both backends:
// on `cuda` this is nvcc's own; on `emu` (TM_EMU defined) emu/cuda_emu.h supplies the
// same names for the host C++ compiler, so kernel bodies never need #ifdef.
#pragma once

#ifdef TM_EMU
#include "emu/cuda_emu.h"
#else
#include <cuda_runtime.h>
#endif

#include <stddef.h>
#include <type_traits>
#include "registry.h"
// TM_DYNAMIC_SHARED and tm_ceil_div, shared with the prelude of the kernels users write
#include "kernel_dialect.h"

// Launch a kernel and return the launch error (not the completion error).
// The `<<<...>>>` syntax exists only under nvcc; the emulator runs the grid itself.
template <typename... Params, typename... Args>
static inline cudaError_t tm_launch(void (*kernel)(Params...), dim3 grid, dim3 block,
                                    size_t shared_bytes, Args... args)
{
#ifdef TM_EMU
    return tm_emu_launch(kernel, grid, block, shared_bytes, args...);
#else
    kernel<<<grid, block, shared_bytes>>>(args...);
    return cudaGetLastError();
#endif
}

#ifdef TM_EMU
// A registry kernel the emulator's build split at its barriers (emu/cuda_emu.h): thread loops.
template <typename Fn, typename... Args>
static inline cudaError_t tm_launch(const tm_emu_split_kernel<Fn> &kernel, dim3 grid, dim3 block,
                                    size_t shared_bytes, Args... args)
{
    return tm_emu_launch_split(kernel, grid, block, shared_bytes, args...);
}
#endif

// Largest gridDim.y / gridDim.z the hardware allows (gridDim.x allows 2^31-1).
#define TM_MAX_GRID_YZ 65535u

// Whether a matmul's index arithmetic fits in int: every offset read or written is below a
// matrix's element count, and indices run at most one tile (< 256) past an extent. 32-bit
// arithmetic is cheaper on the GPU; kernels instantiate both and launchers pick with this.
static inline bool tm_int_indices_suffice(const tm_problem *p)
{
    const double limit = (double)((1LL << 31) - 256);
    return (double)p->M * p->K < limit && (double)p->K * p->N < limit &&
           (double)p->M * p->N < limit;
}

static inline void tm_facts_set(tm_launch_facts *facts, const void *func, dim3 grid, dim3 block,
                                size_t shared_bytes, size_t dynamic_shared_bytes, int launches)
{
    facts->grid[0] = grid.x;
    facts->grid[1] = grid.y;
    facts->grid[2] = grid.z;
    facts->block[0] = block.x;
    facts->block[1] = block.y;
    facts->block[2] = block.z;
    facts->shared_bytes = shared_bytes;
    facts->dynamic_shared_bytes = dynamic_shared_bytes;
    facts->func = func;
    facts->launches = launches;
}

// The lecture's "loop around the kernel call" (003, multi-block matmul): when a grid needs
// more blocks along y than gridDim.y allows, launch once per chunk of at most 65535 block-rows
// and pass the chunk's first block-row to the kernel. `launch_chunk(grid, first_block_y)`
// returns the launch error; facts record the first chunk's shape and the launch count.
// `shared_bytes` is the block's static shared memory (facts only); the launch passes none.
// A grid with no rows launches nothing (the caller handles empty problems before this).
template <typename LaunchChunk>
static inline int tm_launch_row_chunks(const void *func, dim3 grid, dim3 block, size_t shared_bytes,
                                       tm_launch_facts *facts, LaunchChunk launch_chunk)
{
    unsigned total_rows = grid.y;
    int launches = 0;
    for (unsigned first = 0; first < total_rows; first += TM_MAX_GRID_YZ) {
        unsigned rows = total_rows - first < TM_MAX_GRID_YZ ? total_rows - first : TM_MAX_GRID_YZ;
        cudaError_t err = launch_chunk(dim3(grid.x, rows, grid.z), first);
        if (err != cudaSuccess) return err;
        ++launches;
    }
    tm_facts_set(facts, func,
                 dim3(grid.x, grid.y < TM_MAX_GRID_YZ ? grid.y : TM_MAX_GRID_YZ, grid.z), block,
                 shared_bytes, 0, launches);
    return cudaSuccess;
}

// Global traffic of a matmul whose blocks each compute a bm x bn piece of C and read the A rows
// and B columns it needs once: A once per block-column of C, B once per block-row, C written
// once (lecture 001's 2N^3/L with L = bm = bn; naive is 1 x 1). In bytes of the problem's dtype.
static inline double tm_blocked_matmul_bytes(const tm_problem *p, long long bm, long long bn)
{
    if (bm <= 0 || bn <= 0) return 0.0;   // parameters the kernel does not take
    const double elem = p->dtype == TM_F32 ? 4.0 : 8.0;
    return elem * ((double)p->M * p->K * tm_ceil_div(p->N, bn) +
                   (double)p->K * p->N * tm_ceil_div(p->M, bm) + (double)p->M * p->N);
}

// A launcher's switch over a parameter's allowed values, written once: tm_dispatch<TM_VALUES_X>
// (value, f) calls f(std::integral_constant<int, V>{}) for the V equal to `value` (so f can
// instantiate a template on it) and returns its result, or cudaErrorInvalidValue for a value
// not in the list (the glue refuses those first, from the registry row's copy of the same list).
template <int... Values, typename F>
static inline int tm_dispatch(int value, F f)
{
    int rc = cudaErrorInvalidValue;
    (void)((value == Values ? (rc = f(std::integral_constant<int, Values>{}), true) : false) ||
           ...);
    return rc;
}
