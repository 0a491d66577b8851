# %% [markdown]
# # 06 · From register tiling to a fast kernel, against cuBLAS
#
# Lecture 001 (CMU 15-418) takes the traffic argument one level further. If each **thread**
# computes a V×V piece of C, it loads V values of A and V of B per k and does V² multiply-adds:
# total global traffic **2N³/V** ("thread-level register tiling"). Combining it with **block
# tiling** — a block computes an L×L piece through shared memory — gives 2N³/L global loads
# and 2N³/V shared-memory loads.
#
# tiledmm's ladder:
# - `tiled` (T = 32): shared-memory tiles, one output per thread;
# - `regtile dims=1`: 64×64 block tiles, each thread a column of 8 outputs;
# - `regtile dims=2`: 128×128 block tiles, each thread an 8×8 block of outputs;
# - `fast`: register + warp tiling, 128-bit loads, a transposed A tile, double buffering;
# - `cutlass`: CUTLASS's SIMT SGEMM (128×256×8 blocks, 64×64 warps, 3 `cp.async` stages), the
#   same FP32 FFMA arithmetic as `fast` in source you can read: `cutlass/gemm/threadblock/
#   mma_multistage.h` (the main loop), `warp/mma_simt.h` and `thread/mma_sm50.h` (each lane's
#   FFMAs in 2×2 blocks) in the `nvidia-cutlass` wheel (GPU only, built where its headers are);
# - `cublas`: NVIDIA's library, the reference (GPU only, closed source).

# %%
import math
import numpy as np
import matplotlib.pyplot as plt
import tiledmm as tm
from tiledmm.notebook import have, start, table   # the notebooks' shared set-up
from tiledmm.testing import assert_matmul_close, assert_sum_close

BACKEND, ON_GPU, AVAILABLE = start()   # prints the backend; AVAILABLE: the registered kernels
rng = np.random.default_rng(0)

SIZES = [1024, 2048, 4096] if ON_GPU else [128]
LADDER = [("naive", {}), ("tiled", {"tile": 32}), ("coarse", {}), ("regtile", {"dims": 1}),
          ("regtile", {"dims": 2}), ("fast", {}), ("cutlass", {}), ("cublas", {})]
GPU_ONLY = ("cutlass", "cublas")


def runs_here(kernel):
    """cutlass is built only where setup.py found CUTLASS's headers; an unbuilt one refuses."""
    if kernel != "cutlass" or not ON_GPU:
        return True
    try:
        tm.matmul(np.ones((1, 1), np.float32), np.ones((1, 1), np.float32), kernel="cutlass")
        return True
    except RuntimeError:
        print("note: cutlass was not built here (no CUTLASS headers at build time); skipped")
        return False


present = [(k, p) for k, p in LADDER
           if k in AVAILABLE and (k not in GPU_ONLY or ON_GPU) and runs_here(k)]
absent = [k for k, _ in LADDER if k not in AVAILABLE]
if absent:
    print("note: not registered in this build, skipped:", ", ".join(sorted(set(absent))))
if "cublas" in AVAILABLE and not ON_GPU:
    print("note: cublas and cutlass run only on the GPU; the ladder below has no reference on "
          "the emulator")

# %%
N = SIZES[-1]
SMS = tm.device_info()["multiprocessors"]   # fast config=0 picks its tile by size and SMs
rows = []
for kernel, params in present:
    if kernel == "cublas":
        continue
    p = dict(params, multiprocessors=SMS) if kernel == "fast" else dict(params)
    rows.append(dict(kernel=kernel, params=" ".join(f"{k}={v}" for k, v in params.items()),
                     block_tile="x".join(map(str, tm.model.block_tile(kernel, N, N, N, **p))),
                     loads=tm.model.traffic_bytes(kernel, N, stores=False, **p) // 4,
                     vs_naive=tm.model.loads_naive(N) / (tm.model.traffic_bytes(kernel, N, stores=False, **p) // 4),
                     intensity=tm.model.arithmetic_intensity(kernel, N, **p)))
print(f"global loads at N = {N} (the model, before running anything)")
table(rows)

# %%
results = []
for n in SIZES:
    A = (rng.random((n, n)) * 2 - 1).astype(np.float32)
    B = (rng.random((n, n)) * 2 - 1).astype(np.float32)
    for kernel, params in present:
        r = tm.matmul(A, B, kernel=kernel, **params)
        if n == SIZES[0]:
            assert_matmul_close(r.out, A, B)
        results.append(r)
rows = tm.plot.as_rows(results)
ref = {r["M"]: r for r in rows if r["kernel"] == "cublas"}
for r in rows:
    r["pct_cublas"] = 100 * r["gflops"] / ref[r["M"]]["gflops"] if r["M"] in ref else None
table(rows, ["kernel", "params", "M", "ms", "tflops", "pct_cublas", "intensity"])

# %%
if ON_GPU:
    PEAK, BW = tm.model.device_peaks()
else:
    PEAK, BW = None, tm.model.measure_bandwidth(1 << 20)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
tm.plot.ladder(results, ax=ax1)   # in TFLOP/s on a GPU, a smaller unit on the emulator
tm.plot.roofline(results, peak_gflops=PEAK, bandwidth_gbs=BW, ax=ax2)
plt.tight_layout()
plt.show()
if ON_GPU and len(SIZES) > 1:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label in dict.fromkeys(f"{r['kernel']} {r['params']}".strip() for r in rows):
        pts = [(r["M"], r["tflops"]) for r in rows
               if f"{r['kernel']} {r['params']}".strip() == label]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale("log", base=2); ax.set_xlabel("N"); ax.set_ylabel("TFLOP/s")
    ax.set_title("the ladder across sizes"); ax.legend(fontsize=8); ax.grid(True, alpha=0.3)
    plt.show()

# %% [markdown]
# Each rung raises the intensity (points move right on the roofline) and, on a GPU, the rate.
# Past register tiling the remaining gap to cuBLAS is not DRAM traffic but instruction
# efficiency: wide loads, bank-conflict-free shared reads, enough independent work per thread
# to hide latency, and overlapping the next tile's loads with this tile's math. On the
# emulator only the correctness and the traffic model carry over; the rates are CPU rates.

# %% [markdown]
# ## Register tiling on an H100: counted traffic and the predicted H100 time
#
# Register tiles cut shared-memory reads per multiply-add; `fast` adds 128-bit loads and keeps enough warps per scheduler busy. `tm.profile.lesson_table` counts each kernel's memory traffic as Nsight Compute
# counts it on a GPU (global requests, 32-byte sectors per request, shared-memory bank
# conflicts, divergent branches) at the lesson's size, and predicts the H100's time from
# those counts (`docs/profile.md`: what is exact and what is modelled). The chart labels the
# prediction "predicted for H100 from counted traffic". Beside it is the time measured here:
# on a GPU the kernel's own time, on the emulator CPU time, which is **not** the lesson (a CPU
# runs a warp's loads one after another, so caches, not DRAM bursts, decide).

# %%
rows = tm.profile.lesson_table("matmul", [("tiled", {"tile": 32}), ("coarse", {"coarsen": 4}),
                                        ("regtile", {"dims": 1}), ("regtile", {"dims": 2}),
                                        ("fast", {"config": 0})])
table(rows, ["kernel", "params", "global_load_requests", "load_sectors_per_request",
             "shared_conflicts_per_request", "predicted_ms", "bound", "measured_ms", "measured_on"])

# %%
tm.plot.lesson(rows, title="the ladder: predicted for H100 from counted traffic")
plt.tight_layout()
plt.show()
