// A header of kernels with dynamic shared memory, as the samples write them: the emulator
// rewrites it as it rewrites the program's own files.
#pragma once

__global__ void reverse(int *d)
{
    extern int __shared__ s[];   // the other word order
    const int t = threadIdx.x;
    s[t] = d[t];
    __syncthreads();
    d[t] = s[blockDim.x - 1 - t];
}

__global__ void rows(int *d)
{
    extern __shared__ float grid2[][4];   // 2-D: rows of 4
    const int t = threadIdx.x;
    for (int c = 0; c < 4; ++c) grid2[t][c] = (float)(t * 4 + c);
    __syncthreads();
    if (t == 50) d[200] = (int)grid2[50][0] + (int)grid2[50][3];
}
