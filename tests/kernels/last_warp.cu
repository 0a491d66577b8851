// A student's tree reduction whose last warp synchronises with __syncwarp() in a helper of the
// same file (tests/test_barrier_split.py): `LANES` is replaced by the test (32: the whole last
// warp; 16: half of it, a divergent __syncwarp; with a condition: not warp-uniform).
// Written as a student would, beside tiledmm's own cuda/reduce_steps.cu last_warp_sum.
__device__ __forceinline__ void warp_tail(float *s, unsigned t)
{
    volatile float *p = s;
    float v = p[t] + p[t + 32];
    __syncwarp(); p[t] = v; __syncwarp();
    v += p[t + 16]; __syncwarp(); p[t] = v; __syncwarp();
    v += p[t + 8];  __syncwarp(); p[t] = v; __syncwarp();
    v += p[t + 4];  __syncwarp(); p[t] = v; __syncwarp();
    v += p[t + 2];  __syncwarp(); p[t] = v; __syncwarp();
    v += p[t + 1];  __syncwarp(); p[t] = v;
}
__global__ void tail_sum(const float *x, float *out, int n)
{
    __shared__ float s[256];
    const unsigned tid = threadIdx.x;
    const int i = blockIdx.x * 256 + tid;
    s[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned half = 128; half > 32; half /= 2) {
        if (tid < half) s[tid] += s[tid + half];
        __syncthreads();
    }
    if (tid < LANES) warp_tail(s, tid);
    if (tid == 0) out[blockIdx.x] = s[0];
}
