// The program's own which.h: `#include "which.h"` must find this one (the including file's
// folder first, as nvcc), not tests/programs/runpath_other/which.h of an -I folder.
#pragma once
#define WHICH 1
