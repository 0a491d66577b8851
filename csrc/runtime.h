/* runtime.h: the CUDA runtime API as the C glue sees it. The `cuda` build uses the real
 * runtime (linked statically); the `emu` build uses the emulator's C-compatible stand-in with
 * the same names, so the glue in csrc/ is written once. */
#pragma once
#ifdef TM_EMU
#include "emu/runtime_api.h"
#else
#include <cuda_runtime_api.h>
#endif
