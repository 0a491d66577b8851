// vector_types.h: tiledmm's stand-in for the CUDA toolkit's header of this name: what it declares is in
// tiledmm's prelude (emu/runtime_api.h, emu/cuda_emu.h). Being found here first also keeps a CUDA
// installation's own header (on the default include path) from colliding with the prelude.
#pragma once
#include "tiledmm_kernel.h"
