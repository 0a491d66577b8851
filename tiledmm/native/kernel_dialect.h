// kernel_dialect.h: the macros of tiledmm's kernel dialect that the registry's kernels
// (common.h) and the kernels users write (the prelude, tiledmm_kernel.h)
// share. Small and self-contained on purpose: the prelude must not include common.h (the
// registry's names M, N, K would meet a student's -DN=64). It includes only tm_limits.h: under TM_EMU
// its includer has included the emulator's cuda_emu.h first; otherwise the compiler is nvcc or
// NVRTC, whose built-ins it uses. It lives in tiledmm/native (package data, one path in a
// checkout and an installed copy); the registry's builds add -Itiledmm/native, and
// tiledmm/toolchain/compile_nvrtc.py hands it to NVRTC by name.
#pragma once

#include "tm_limits.h"

// Dynamic shared memory. `extern __shared__ T name[]` cannot be expressed on the emulator,
// so kernels declare it through this macro (16-byte aligned, so float4 access is legal).
// Check mode (tiledmm_check.h) redefines it as a race-checked view.
#ifdef TM_EMU
#define TM_DYNAMIC_SHARED(type, name) type *name = reinterpret_cast<type *>(tm_emu_dynamic_shared())
#else
#define TM_DYNAMIC_SHARED(type, name)                                 \
    extern __shared__ __align__(16) unsigned char tm_dynamic_smem_[]; \
    type *name = reinterpret_cast<type *>(tm_dynamic_smem_)
#endif

// The blocks needed to cover n items, d per block (a grid dimension); host and device code alike.
static __host__ __device__ inline unsigned tm_ceil_div(long long n, long long d)
{
    return (unsigned)((n + d - 1) / d);
}

// Profile mode's hooks in a kernel split at its barriers (tiledmm/toolchain/split/transform.py
// emits them; issue 34): empty here, so plain builds compile the split as if they were not
// there. The profile build's split kernels are compiled with emu/profile/split_hooks.h included
// first, which defines them as calls that tell emu_profile.cpp whose turn it is.
// TM_SPLIT_NOTE stores the running thread's index where the fault report reads it
// (tm_emu_tls.thread_idx): a plain store here.
#if defined(TM_EMU) && !defined(TM_SPLIT_STATE)
#define TM_SPLIT_NOTE(slot, value) (slot) = (value);
#define TM_SPLIT_STATE
#define TM_SPLIT_TURN(linear_tid)
#define TM_SPLIT_TURN_END()
#define TM_SPLIT_TURN_LAST()
#define TM_SPLIT_BARRIER(line)
#define TM_SPLIT_WARP_SYNC(lane_masks, line)
#endif
