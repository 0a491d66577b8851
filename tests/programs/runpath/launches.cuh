// A header of the program's own with launches in it (issue 44): a plain kernel with a default
// argument, a template kernel, both launched from an inline function of the header.
#pragma once
#include "which.h"

__global__ void set_first(int *out, int value = WHICH * 10)
{
    if (threadIdx.x == 0) out[0] = value;
}

template <int Add>
__global__ void add_each(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += Add;
}

inline void launch_from_header(int *out, int n)
{
    set_first<<<1, 32>>>(out);
    add_each<3><<<(n + 31) / 32, 32>>>(out, n);
}
