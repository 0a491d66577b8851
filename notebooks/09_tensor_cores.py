# %% [markdown]
# # 09 · Tensor cores: `wmma`, and FP32 accuracy back with 3xTF32
#
# The ladder so far ends at FP32 fused multiply-adds: `fast` is close to cuBLAS SGEMM and to
# the FFMA peak. Tensor cores multiply small matrices in one warp instruction, at many times
# that peak, but they take narrow inputs: FP16 (10 fraction bits) or TF32 (FP32's range, also
# 10 fraction bits), accumulating in FP32. This notebook climbs three rungs:
#
# 1. `tiled` (notebook 02): FP32 in, FP32 out, every product an FFMA;
# 2. `wmma`: the same tiled kernel, with each warp's 16 x 16 piece of C held in a *fragment*
#    and updated by `mma_sync` (FP16 inputs with `precision=1`, TF32 with `precision=0`);
# 3. `tf32x3` (GPU only): every FP32 input split into a TF32 "big" part and a TF32 "small"
#    part, three tensor-core products per multiply-add (CUTLASS's 3xTF32): FP32 accuracy at
#    tensor-core speed.
#
# On the emulator the tensor core is modelled bit for bit (the H200's alignment and
# truncation), so the accuracy story is the GPU's; its timings are CPU times.

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
# ## What the narrow inputs cost: accuracy against float64
#
# Each rung computes C = A B for inputs uniform in [0, 1] (positive, so that errors add up
# rather than cancel) at growing K. The error is normwise: the largest |C - A B| over the
# largest |A| |B| entry, with A B computed in float64.
#
# FP16 and TF32 keep 11 significant bits, so rounding the inputs alone costs about 2^-12
# relative per product, whatever K is; FP32 keeps 24. The 3xTF32 split writes a = a_big +
# a_small with both parts in TF32: a_big a_big' + a_big b_small + a_small b_big misses only
# a_small b_small (about 2^-22 relative) and the rounding of a_small, so it gets back to
# FP32's accuracy. Where the `tf32x3` kernel cannot run (the emulator), the split is shown in
# NumPy: the same three products (exact in float32: 11 bits times 11 bits), summed in float32
# by NumPy's SGEMM, as the kernel sums them in FP32.

# %%
def to_tf32(x):
    """float32 rounded to TF32 (10 fraction bits), ties away from zero, as cvt.rna does."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def split_3xtf32(A, B):
    """A B by the 3xTF32 split in float32: what tf32x3 computes, up to the order of its sums
    (the small terms first, as the kernel adds them)."""
    a_big, b_big = to_tf32(A), to_tf32(B)
    a_small, b_small = to_tf32(A - a_big), to_tf32(B - b_big)
    return (a_big @ b_small + a_small @ b_big) + a_big @ b_big


def normwise_error(C, A, B):
    exact = A.astype(np.float64) @ B.astype(np.float64)
    scale = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    return float(np.abs(C - exact).max() / scale.max())


MN = 512 if ON_GPU else 64
KS = [256, 1024, 4096, 8192] if ON_GPU else [64, 256, 1024, 4096]
rungs = [("tiled FP32", "tiled", {"tile": 16}), ("wmma FP16", "wmma", {"precision": 1}),
         ("wmma TF32", "wmma", {"precision": 0})]
if ON_GPU and have("tf32x3"):
    rungs.append(("tf32x3", "tf32x3", {}))
rows = []
for K in KS:
    A = rng.random((MN, K), dtype=np.float32)
    B = rng.random((K, MN), dtype=np.float32)
    row = {"K": K}
    for label, kernel, params in rungs:
        res = tm.matmul(A, B, kernel=kernel, **params)
        row[label] = normwise_error(res.out, A, B)
    if not ON_GPU:
        row["3xTF32 split (NumPy)"] = normwise_error(split_3xtf32(A, B), A, B)
    rows.append(row)
table(rows)

# %%
fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
for label in [k for k in rows[0] if k != "K"]:
    ax.plot(KS, [r[label] for r in rows], "o-", label=label)
ax.axhline(2.0 ** -24, color="gray", ls=":", label="FP32 unit roundoff 2^-24")
ax.axhline(2.0 ** -11, color="gray", ls="--", label="FP16/TF32 unit roundoff 2^-11")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("K")
ax.set_ylabel("max |C - AB| / max |A||B|")
ax.set_title(f"accuracy against float64, inputs uniform in [0, 1], {MN} x K x {MN}")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# The FP16 and TF32 rungs stay near 10^-4, within a small factor of 2^-11 at every K (the
# inputs' rounding errors partly cancel in the sums): what they lose is the inputs' bits, not
# the sum's. FP32 FFMAs and the 3xTF32 split, both summing in FP32, are a hundred times
# closer or more.

# %% [markdown]
# ## A fragment belongs to the warp
#
# `wmma::fragment<accumulator, 16, 16, 16, float>` is a 16 x 16 tile of C spread over the 32
# lanes of a warp: each lane holds `num_elements` = 8 of its 256 values in `x[]`, and which
# ones is the hardware's business (the API leaves it unspecified; tiledmm uses the PTX ISA's
# `mma.m16n8k16` layout, as the GPU does). `load_matrix_sync`, `store_matrix_sync` and
# `mma_sync` are warp-collective: all 32 lanes call them together, as for a shuffle.
#
# The kernel below lets each lane write its own lane number into every element it holds,
# then the warp stores the fragment: the picture is the map of who owns what.

# %%
OWNERS = r"""
#include <mma.h>
using namespace nvcuda;
__global__ void owners(float *C, int *per_lane)
{
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    for (int i = 0; i < acc.num_elements; ++i)
        acc.x[i] = (float)threadIdx.x;          // this lane's elements, whichever they are
    wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);   // the whole warp stores
    per_lane[threadIdx.x] = acc.num_elements;
}
"""
owners = tm.compile(OWNERS)
C = np.full(256, -1.0, np.float32)
per_lane = np.zeros(32, np.int32)
owners((1,), (32,), C, per_lane)
print(f"elements per lane: {sorted(set(per_lane.tolist()))}, lanes: {len(per_lane)}")
fig, ax = plt.subplots(figsize=(5.5, 5), layout="constrained")
ax.imshow(C.reshape(16, 16), cmap="tab20b")
for (r, c), lane in np.ndenumerate(C.reshape(16, 16)):
    ax.text(c, r, int(lane), ha="center", va="center", fontsize=7)
ax.set_title("which lane holds C[row][col] in an accumulator fragment")
ax.set_xlabel("col")
ax.set_ylabel("row")
plt.show()

# %% [markdown]
# Lane l holds rows l/4 and l/4 + 8, columns 2(l%4) and the next, in each 8-column half: four
# lanes share a row. A kernel that wrote `acc.x[i]` assuming another order would be wrong on
# the GPU; on the emulator it is wrong the same way.
#
# ## The `wmma` rung
#
# `tm.matmul(A, B, kernel="wmma", precision=...)` is lecture 003's tiled kernel on fragments:
# a block of 4 warps computes a 32 x 32 tile of C; per 16-wide k-tile each warp loads an A and
# a B fragment from shared memory and issues `mma_sync`. Its results match float64 to the
# inputs' precision (`tiledmm.testing` knows how many bits a rung keeps):

# %%
n = 1024 if ON_GPU else 96
A = rng.uniform(-1, 1, (n, n)).astype(np.float32)
B = rng.uniform(-1, 1, (n, n)).astype(np.float32)
for precision in (1, 0):
    res = tm.matmul(A, B, kernel="wmma", precision=precision)
    assert_matmul_close(res.out, A, B, kernel="wmma")
    print(res)

# %% [markdown]
# ## The speed ladder and its roofs
#
# The model's roof for each rung is the pipe its multiply-adds run on: the FP32 FFMA peak for
# `tiled` and `fast`, the dense tensor-core peak for `wmma` (FP16 or TF32), and a third of
# TF32's for `tf32x3`, which makes three products per multiply-add
# (`tm.model.device_peaks(device, kernel=..., params=...)`, from the presets' data sheets).

# %%
DEVICE = "H100"
roofs = [("FP32 FFMA", "tiled", {}), ("wmma FP16", "wmma", {"precision": 1}),
         ("wmma TF32", "wmma", {"precision": 0}), ("tf32x3", "tf32x3", {})]
table([{"rung": label, f"{DEVICE} roof (TFLOP/s)":
        tm.model.device_peaks(DEVICE, kernel=kernel, params=params)[0] / 1e3}
       for label, kernel, params in roofs])

# %% [markdown]
# Measured: each rung timed on this backend (on the GPU at full size, beside cuBLAS SGEMM; on
# the emulator at a small size, where the tensor-core model is a CPU's work, so `wmma` is
# *slower* than `tiled` here: compare rungs on the GPU).

# %%
n = 8192 if ON_GPU else 128
ladder = [("tiled", {"tile": 32}), ("fast", {}), ("wmma", {"precision": 0}),
          ("wmma", {"precision": 1})]
if ON_GPU:
    ladder += [(k, {}) for k in ("tf32x3", "cublas") if have(k)]
A = rng.uniform(-1, 1, (n, n)).astype(np.float32)
B = rng.uniform(-1, 1, (n, n)).astype(np.float32)
rows = []
for kernel, params in ladder:
    res = tm.matmul(A, B, kernel=kernel, **params)
    label = kernel + "".join(f" {k}={v}" for k, v in params.items())
    rows.append({"rung": label, "ms": res.timing.kernel_ms, "GFLOP/s": res.gflops})
table(rows)

# %%
fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
ax.bar([r["rung"] for r in rows], [r["GFLOP/s"] for r in rows])
ax.set_ylabel("GFLOP/s" + ("" if ON_GPU else " (emulator: CPU time)"))
ax.set_title(f"{n}^3 on {BACKEND}")
ax.tick_params(axis="x", rotation=20)
ax.grid(True, axis="y", alpha=0.3)
plt.show()

# %% [markdown]
# ## Your turn
#
# - Feed the inputs uniform in [-1, 1] to the accuracy table: why do the errors shrink?
# - Change `OWNERS` to a `matrix_a` fragment (`__half`, `row_major`) and load it from a
#   16 x 16 array of lane numbers: which elements does each lane hold now?
# - In `split_3xtf32`, add the fourth product `a_small b_small`: how much does it buy?
