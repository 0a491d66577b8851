// cuda_runtime.h: tiledmm's stand-in for the CUDA toolkit's header of this name, for kernels compiled with
// tm.compile (a student's `#include <cuda_runtime.h>` as nvcc accepts it). Everything a kernel needs from it
// is in tiledmm's prelude (tiledmm_kernel.h), included before the kernel's source on both
// backends; the real header cannot be included there (on the emulator it redefines the vector
// types, and NVRTC has no host headers).
#pragma once
#include "tiledmm_kernel.h"
// the real header's guard, which code such as the samples' helper_cuda.h tests
#ifndef __CUDA_RUNTIME_H__
#define __CUDA_RUNTIME_H__
#endif
