// The lecture's tiled matmul (16x16 tiles, any M x K @ K x N): the kernel split at its two
// barriers (issue 34), in tests/test_barrier_split.py and benchmarks/emu_speed.py.
#define TILE 16
__global__ void tiled(const float *A, const float *B, float *C, int m, int n, int k)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float sum = 0.0f;
    for (int t = 0; t < (k + TILE - 1) / TILE; ++t) {
        As[ty][tx] = (row < m && t * TILE + tx < k) ? A[row * k + t * TILE + tx] : 0.0f;
        Bs[ty][tx] = (col < n && t * TILE + ty < k) ? B[(t * TILE + ty) * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }
    if (row < m && col < n)
        C[row * n + col] = sum;
}
