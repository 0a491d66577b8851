// A student's saxpy: the parameters are matched by name (x, y, a, n).
// tiledmm-grade: block 128
// tiledmm-grade: grid cdiv(n, 128)
__global__ void saxpy(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
