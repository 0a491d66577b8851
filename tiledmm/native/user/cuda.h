// cuda.h: tiledmm's stand-in for the CUDA toolkit's header of this name (lecture code includes
// it for the runtime API), on the emulator: everything is in tiledmm's prelude.
#pragma once
#include "tiledmm_kernel.h"
