# %% [markdown]
# # 08 · Write your own kernel
#
# The lectures end with "extend the code to handle rectangular matrices yourself". Here you do
# it: `tm.compile` takes CUDA C source text (the dialect of tiledmm's own kernels), compiles it
# (NVRTC on the GPU, the C++ compiler against the emulator on a laptop) and returns a kernel
# you launch on NumPy arrays with an explicit grid and block. It returns the same `Result` as
# `tm.matmul`: outputs, timing, launch facts. `tm.check_matmul` grades it on awkward shapes.

# %%
import math
import numpy as np
import matplotlib.pyplot as plt
import tiledmm as tm
from tiledmm.notebook import have, start, table   # the notebooks' shared set-up
from tiledmm.testing import assert_matmul_close, assert_sum_close

BACKEND, ON_GPU, AVAILABLE = start()   # prints the backend; AVAILABLE: the registered kernels
rng = np.random.default_rng(0)

# %% [markdown]
# ## The lecture's tiled kernel
#
# Square `Width x Width` matrices, `Width` a multiple of the tile: every thread loads one
# element of each tile, the block multiplies the tiles from shared memory.

# %%
SQUARE = r"""
#define TILE 16
__global__ void matmul_square(const float *A, const float *B, float *C, int Width)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int t = 0; t < Width / TILE; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * Width + t * TILE + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * Width + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k)
            sum += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * Width + col] = sum;
}
"""
square = tm.compile(SQUARE)          # compiled once, then cached (memory and disk)
print(square)

n = 64
A = (rng.random((n, n)) * 2 - 1).astype(np.float32)
B = (rng.random((n, n)) * 2 - 1).astype(np.float32)
C = np.empty((n, n), np.float32)
res = square((n // 16, n // 16), (16, 16), A, B, C, n)   # grid, block, then the arguments
assert_matmul_close(C, A, B)         # tiledmm.testing: float64 reference, K-scaled tolerance
res


# %% [markdown]
# ## Grading it on awkward shapes
#
# `tm.check_matmul(kernel, launch, ...)` runs the kernel over 1x1, non-multiples of the tile,
# tall, wide and empty problems and compares with NumPy. `launch(M, N, K)` gives the grid and
# block; `args` maps (A, B, C, M, N, K) to this kernel's parameters (it only has `Width`). On
# the emulator, `check=True` bounds-checks every pointer access and names the thread and
# block of the first one outside its array.

# %%
def launch(M, N, K):
    return ((N + 15) // 16, (M + 15) // 16), (16, 16)

report = tm.check_matmul(square, launch, args=lambda A, B, C, M, N, K: (A, B, C, N),
                         check=not ON_GPU)
print(f"{len(report.failures)} of {len(report.rows)} shapes fail")
report

# %% [markdown]
# ## The rectangular kernel
#
# Three changes: `A` is `M x K` and `B` is `K x N`, so each index uses its own width; the tile
# loop runs `ceil(K / TILE)` times; threads load `0` for elements outside the matrices (the
# tile's products then add nothing) and write `C` only inside it. The barriers stay outside
# every `if`: all threads of a block must reach them.

# %%
RECT = r"""
#define TILE 16
__global__ void matmul_rect(const float *A, const float *B, float *C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int a_col = t * TILE + threadIdx.x, b_row = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k)
            sum += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = sum;
}
"""
rect = tm.compile(RECT)
report = tm.check_matmul(rect, launch, check=not ON_GPU)   # M, N, K found by name
report.assert_passed()                                      # what a pytest file would do
report

# %% [markdown]
# ## Timed beside tiledmm's `tiled` and cuBLAS
#
# The same events time your kernel and the built-in ones (on the emulator these are CPU
# times: compare kernels with each other, not with a GPU).

# %%
SIZES = [(1024, 1024, 1024), (2048, 1000, 1500)] if ON_GPU else [(128, 128, 128), (96, 130, 70)]
builtin = [("tiled", {"tile": 16})] + ([("cublas", {})] if ON_GPU and have("cublas") else [])
rows = []
for M, N, K in SIZES:
    A = (rng.random((M, K)) * 2 - 1).astype(np.float32)
    B = (rng.random((K, N)) * 2 - 1).astype(np.float32)
    C = np.empty((M, N), np.float32)
    grid, block = launch(M, N, K)
    mine = rect(grid, block, A, B, C, M, N, K, flops=2.0 * M * N * K)
    assert_matmul_close(C, A, B)
    rows.append({"shape": f"{M}x{N}x{K}", "kernel": "yours (matmul_rect)",
                 "ms": mine.timing.kernel_ms, "GFLOP/s": mine.gflops})
    for name, params in builtin:
        r = tm.matmul(A, B, kernel=name, **params)
        rows.append({"shape": f"{M}x{N}x{K}", "kernel": name, "ms": r.timing.kernel_ms,
                     "GFLOP/s": r.gflops})
table(rows)

# %%
shapes = list(dict.fromkeys(r["shape"] for r in rows))
names = list(dict.fromkeys(r["kernel"] for r in rows))
width = 0.8 / len(names)
fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
for i, name in enumerate(names):
    rates = [next(r["GFLOP/s"] for r in rows if r["shape"] == s and r["kernel"] == name)
             for s in shapes]
    ax.bar([j + (i - (len(names) - 1) / 2) * width for j in range(len(shapes))], rates,
           width=width, label=name)
ax.set_xticks(range(len(shapes)))
ax.set_xticklabels(shapes)
ax.set_xlabel("M x N x K")
ax.set_ylabel("GFLOP/s" + ("" if ON_GPU else " (emulator: CPU time)"))
ax.set_title("your kernel beside " + " and ".join(name for name, _ in builtin))
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the bars, never over them
ax.grid(True, axis="y", alpha=0.3)
plt.show()

# %% [markdown]
# ## Your turn
#
# - Make `TILE` a compile-time option: `tm.compile(RECT.replace("#define TILE 16", ""),
#   defines={"TILE": 32})` and launch 32 x 32 blocks. Which is faster here, and why
#   (notebook 03)?
# - Move a `__syncthreads()` inside `if (row < M && col < N)`: the emulator reports the
#   barrier that not every thread reaches, with the block and the line.
# - Write a reduction and grade it with `tm.check_reduce(kernel, lambda n: (grid, block,
#   shared_bytes))`.
