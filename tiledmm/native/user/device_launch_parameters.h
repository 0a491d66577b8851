// device_launch_parameters.h: tiledmm's stand-in for the CUDA toolkit's header of this name, for kernels compiled with
// tm.compile (a student's `#include <device_launch_parameters.h>` as nvcc accepts it). Everything a kernel needs from it
// is in tiledmm's prelude (tiledmm_kernel.h), included before the kernel's source on both
// backends; the real header cannot be included there (on the emulator it redefines the vector
// types, and NVRTC has no host headers).
#pragma once
#include "tiledmm_kernel.h"
