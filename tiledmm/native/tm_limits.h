// tm_limits.h: CUDA's limits that tiledmm's C, C++ and CUDA sides all use, written once. It
// includes nothing, so the glue (csrc/), the emulator (emu/), the registry's kernels and the
// launcher tm.compile writes can all include it.
#pragma once

// Dynamic shared memory a block may use without cudaFuncSetAttribute's opt-in
// (cudaFuncAttributeMaxDynamicSharedMemorySize), on every architecture since Volta.
#define TM_SHARED_DEFAULT_BYTES (48 * 1024)
