// cooperative_groups/reduce.h: on the emulator cg::reduce is in tiledmm's cooperative_groups.h.
#pragma once
#include "../cooperative_groups.h"
