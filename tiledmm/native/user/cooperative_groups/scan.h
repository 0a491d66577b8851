// cooperative_groups/scan.h: on the emulator cg::inclusive_scan is in tiledmm's cooperative_groups.h.
#pragma once
#include "../cooperative_groups.h"
