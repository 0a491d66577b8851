"""How much slower a program's launches are under tm.run(..., check=True) on emu (issue 32):
a naive matmul program (n x n, 16 x 16 blocks) run plain and in check mode, each launch's
emulator time (the median of 3 runs). usage: python benchmarks/program_check_speed.py [n ...]"""
import statistics
import sys

import tiledmm as tm

PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
__global__ void matmul(const float *A, const float *B, float *C, int n)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && col < n) {
        float s = 0;
        for (int k = 0; k < n; ++k) s += A[row * n + k] * B[k * n + col];
        C[row * n + col] = s;
    }
}
int main(int argc, char **argv)
{
    int n = atoi(argv[1]);
    size_t bytes = (size_t)n * n * sizeof(float);
    float *h = (float *)malloc(bytes);
    for (int i = 0; i < n * n; ++i) h[i] = (i % 7) * 0.25f;
    float *A, *B, *C;
    cudaMalloc(&A, bytes); cudaMalloc(&B, bytes); cudaMalloc(&C, bytes);
    cudaMemcpy(A, h, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(B, h, bytes, cudaMemcpyHostToDevice);
    dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
    matmul<<<grid, block>>>(A, B, C, n);
    cudaMemcpy(h, C, bytes, cudaMemcpyDeviceToHost);
    printf("%g\n", h[n + 1]);
    cudaFree(A); cudaFree(B); cudaFree(C); free(h);
    return 0;
}
"""


def launch_ms(n, check):
    times = []
    for _ in range(3):
        r = tm.run(PROGRAM, args=[str(n)], backend="emu", check=check, timeout=600)
        assert r.returncode == 0 and not r.problems, r.stderr
        times.append(r.launches[0].ms)
    return statistics.median(times)


if __name__ == "__main__":
    for n in [int(a) for a in sys.argv[1:]] or [128, 256]:
        plain, checked = launch_ms(n, False), launch_ms(n, True)
        print(f"n={n}: plain {plain:.1f} ms, check mode {checked:.1f} ms "
              f"({checked / plain:.1f}x)")
