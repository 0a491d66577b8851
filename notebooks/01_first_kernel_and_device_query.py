# %% [markdown]
# # 01 · A first kernel and the device query
#
# Lecture 000 (CS133) starts with `vecAdd`: the host allocates device memory, copies `A` and
# `B` in, launches `ceil(n/256)` blocks of 256 threads, copies `C` back and frees everything.
# Each thread computes one element:
#
# ```cuda
# __global__ void vecAddKernel(float* A, float* B, float* C, int n) {
#     int i = blockIdx.x * blockDim.x + threadIdx.x;
#     if (i < n) C[i] = A[i] + B[i];
# }
# ```
#
# This notebook starts from the lecture's whole program, run as it is in a `%%cuda` cell, then
# runs the same kernel on NumPy arrays with `tm.compile` and `tm.vec_add`, where tiledmm does
# the host part for you, times every step separately, and tells you how it launched the kernel.
# It runs on the GPU when there is one and on tiledmm's CPU emulator otherwise (same kernel
# source; sizes are smaller there and times are CPU times).

# %%
import math
import numpy as np
import matplotlib.pyplot as plt
import tiledmm as tm
from tiledmm.notebook import have, start, table   # the notebooks' shared set-up
from tiledmm.testing import assert_matmul_close, assert_sum_close

BACKEND, ON_GPU, AVAILABLE = start()   # prints the backend; AVAILABLE: the registered kernels
rng = np.random.default_rng(0)

N_VEC = [1 << 20, 1 << 22, 1 << 24, 1 << 26] if ON_GPU else [1 << 12, 1 << 14, 1 << 16, 1 << 18]

# %% [markdown]
# ## The lecture's program, in a `%%cuda` cell
#
# `%load_ext tiledmm` gives Jupyter nvcc4jupyter's magics: a cell that begins `%%cuda` is
# compiled and run as a whole program — nvcc and the GPU where there is one, the emulator
# otherwise. Under the program's output comes a table of its kernel launches.

# %%
# %load_ext tiledmm

# %%
# %%cuda
#include <cstdio>
#include <cstdlib>

__global__ void vecAddKernel(float* A, float* B, float* C, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i] = A[i] + B[i];
}

void vecAdd(float* A_h, float* B_h, float* C_h, int n) {
    int size = n * sizeof(float);
    float *A_d, *B_d, *C_d;
    cudaMalloc((void**)&A_d, size);
    cudaMalloc((void**)&B_d, size);
    cudaMalloc((void**)&C_d, size);
    cudaMemcpy(A_d, A_h, size, cudaMemcpyHostToDevice);
    cudaMemcpy(B_d, B_h, size, cudaMemcpyHostToDevice);
    vecAddKernel<<<(n + 255) / 256, 256>>>(A_d, B_d, C_d, n);
    cudaMemcpy(C_h, C_d, size, cudaMemcpyDeviceToHost);
    cudaFree(A_d);
    cudaFree(B_d);
    cudaFree(C_d);
}

int main() {
    int n = 1000;
    float *A = (float*)malloc(n * sizeof(float));
    float *B = (float*)malloc(n * sizeof(float));
    float *C = (float*)malloc(n * sizeof(float));
    for (int i = 0; i < n; ++i) { A[i] = 0.5f * i; B[i] = (float)(n - i); }
    vecAdd(A, B, C, n);
    printf("C[0] = %.1f, C[%d] = %.1f\n", C[0], n - 1, C[n - 1]);
    free(A); free(B); free(C);
    return 0;
}

# %% [markdown]
# ## The same kernel on NumPy arrays: `tm.compile`
#
# The host half of that program — allocate, copy in, launch `ceil(n/256)` blocks, copy out,
# free — is what `tm.compile` does for you. Give it the kernel alone; call it on NumPy arrays
# with the grid and block; it returns the outputs and the kernel's time, and with
# `check=True` it runs under check mode, which reports out-of-bounds accesses and races.

# %%
VEC_ADD_SOURCE = r"""
__global__ void vecAddKernel(const float* A, const float* B, float* C, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i] = A[i] + B[i];
}
"""
vec_add_kernel = tm.compile(VEC_ADD_SOURCE)
n = 1000
A_np = 0.5 * np.arange(n, dtype=np.float32)
B_np = (n - np.arange(n)).astype(np.float32)
C_np = np.zeros(n, dtype=np.float32)
run = vec_add_kernel((math.ceil(n / 256),), (256,), A_np, B_np, C_np, n)
print(run)
assert np.array_equal(C_np, A_np + B_np)
print(f"C[0] = {C_np[0]:.1f}, C[{n - 1}] = {C_np[n - 1]:.1f}: as the program printed")

# %% [markdown]
# Check mode (on the emulator) watches every access. Drop the `if (i < n)` guard and the last
# block's extra threads read and write past the ends of the arrays: on a GPU that often goes
# unnoticed; check mode names the access, the argument, the index and the thread.

# %%
UNGUARDED = VEC_ADD_SOURCE.replace("if (i < n) C[i]", "C[i]")
unguarded = tm.compile(UNGUARDED, check=True, backend="emu")
try:
    unguarded((math.ceil(n / 256),), (256,), A_np, B_np, C_np, n)
except tm.KernelError as exc:
    print(exc)

# %% [markdown]
# ## The device query
#
# The lecture's device query calls `cudaGetDeviceCount` and `cudaGetDeviceProperties` and
# reads fields such as `maxThreadsPerBlock` and `sharedMemPerBlock`. `tm.device_info()` prints
# the same, plus the peak FP32 rate and memory bandwidth a roofline needs (on the GPU). On the
# emulator the limits are the emulator's, and it says that it has no peaks.

# %%
info = tm.device_info()
print(info)

# %%
print(f"A block may have up to {info['max_threads_per_block']} threads and "
      f"{info['shared_mem_per_block']:,} bytes of shared memory;")
print(f"one multiprocessor holds up to {info['max_threads_per_multiprocessor']} threads, "
      f"{info['max_blocks_per_multiprocessor']} blocks and "
      f"{info['shared_mem_per_multiprocessor']:,} bytes of shared memory; "
      f"there are {info['multiprocessors']} multiprocessors.")

# %% [markdown]
# ## vecAdd
#
# `tm.vec_add(a, b)` runs tiledmm's own copy of that kernel. The result unpacks as `(output, timing)` and also
# carries the launch: with 256 threads per block the grid must have `ceil(n/256)` blocks, and
# the `if (i < n)` guard keeps the extra threads of the last block from writing past the end.

# %%
n = N_VEC[0] + 3          # not a multiple of the block: the guard matters
a = rng.random(n, dtype=np.float32)
b = rng.random(n, dtype=np.float32)
res = tm.vec_add(a, b)
c, timing = res
assert np.array_equal(c, a + b)
print(res)
print(res.launch)
print("ceil(n / 256) =", math.ceil(n / 256), "blocks; the launch used", res.launch.grid[0])

# %%
for block in (128, 256, 512, 1024):
    r = tm.vec_add(a, b, block=block)
    print(f"block={block:5d}: grid {r.launch.grid[0]:7d} blocks = ceil({n}/{block}) = "
          f"{math.ceil(n / block)}; {r.launch.threads_per_block * r.launch.grid[0] - n} idle threads")

# %% [markdown]
# ## Matrix add with 2-D indices
#
# Lecture 001 (CMU 15-418) adds matrices with a 2-D grid of 2-D blocks:
# `x = blockIdx.x * blockDim.x + threadIdx.x`, `y = blockIdx.y * blockDim.y + threadIdx.y`.
# The lecture's launch uses `X_len / blockSize.x` blocks, which drops the edge when the size is
# not a multiple of the block; tiledmm rounds up and guards, as `vecAdd` does.

# %%
rows_, cols_ = (3000, 2000) if ON_GPU else (300, 200)
A2 = rng.random((rows_, cols_), dtype=np.float32)
B2 = rng.random((rows_, cols_), dtype=np.float32)
r = tm.mat_add(A2, B2, block=16)
assert np.array_equal(r.out, A2 + B2)
print(r.launch.grid, "blocks of", r.launch.block, "threads for a", A2.shape, "matrix")

# %% [markdown]
# ## Where the time goes
#
# A vector add does one floating-point addition per 12 bytes it moves (two 4-byte reads, one
# write): it can only be as fast as memory. And before the kernel can run, the inputs must
# cross from host to device. The plots below split each call into its copy-in, kernel and
# copy-out times, and show the kernel's effective bandwidth as the vector grows.

# %%
rows = []
for n_ in N_VEC:
    x = rng.random(n_, dtype=np.float32)
    y = rng.random(n_, dtype=np.float32)
    r = tm.vec_add(x, y)
    t = r.timing
    rows.append(dict(n=n_, h2d_ms=t.h2d_ms, kernel_ms=t.kernel_ms, d2h_ms=t.d2h_ms, gbps=r.gbps))
table(rows)

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
labels = [f"{r['n']:,}" for r in rows]
bottom = np.zeros(len(rows))
for key, label in (("h2d_ms", "copy in"), ("kernel_ms", "kernel"), ("d2h_ms", "copy out")):
    values = np.array([r[key] for r in rows])
    ax1.bar(labels, values, bottom=bottom, label=label)
    bottom += values
ax1.set_yscale("log")
ax1.set_xlabel("elements")
ax1.set_ylabel("ms (stacked)")
ax1.set_title(f"vec_add: where the time goes ({res.timing.clock})")
ax1.legend()
ax2.plot([r["n"] for r in rows], [r["gbps"] for r in rows], marker="o")
ax2.set_xscale("log", base=2)
ax2.set_xlabel("elements")
ax2.set_ylabel("GB/s (12 bytes per element over kernel time)")
ax2.set_title("vec_add effective bandwidth")
ax2.grid(True, alpha=0.3)
plt.tight_layout()
plt.show()
share = sum(r["kernel_ms"] for r in rows) / sum(r["h2d_ms"] + r["kernel_ms"] + r["d2h_ms"] for r in rows)
print(f"over these runs the kernel took {share:.0%} of the total; the copies took the rest")
