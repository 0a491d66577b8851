// Launches in a function template (dependent on T), in a lambda in a member function, and of
// a template kernel whose arguments are deduced.
#include <stdio.h>
template <typename T>
__global__ void fill(T *x, T v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }

template <typename T>
void run(T *d, T v, int n)
{
    fill<T><<<(n + 127) / 128, 128>>>(d, v, n);
}

struct Runner {
    void go(float *d, int n) { auto l = [&]() { fill<float><<<1, n>>>(d, 2.5f, n); }; l(); }
};

int main()
{
    int n = 300;
    float *d; cudaMalloc(&d, n * sizeof(float));
    run(d, 1.5f, n);
    float h[300]; cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("%.1f %.1f\n", h[0], h[299]);
    Runner r; r.go(d, 64);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("%.1f %.1f\n", h[0], h[299]);
    fill<<<1, 4>>>(d, 7.0f, 4);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("%.1f %.1f\n", h[0], h[4]);
    return 0;
}
