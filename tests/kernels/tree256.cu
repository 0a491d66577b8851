// A student's shared-memory tree reduction (blocks of 256 threads): lanes diverge at every level
// but the last five. Profile mode's split against its fibers (tests/test_profile_user_split.py)
// and its speed (benchmarks/profile_user_speed.py).
__global__ void tree(const float *x, float *out, int n)
{
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int d = blockDim.x / 2; d > 0; d /= 2) {
        if (threadIdx.x < d) s[threadIdx.x] += s[threadIdx.x + d];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
