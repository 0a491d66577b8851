// y = a * x + y, launched from a host function of this file.
#include "saxpy.h"

__global__ void saxpy_kernel(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

void saxpy(int n, float a, const float *x, float *y)
{
    saxpy_kernel<<<(n + 127) / 128, 128>>>(n, a, x, y);
}
