# %% [markdown]
# # 02 · Naive vs tiled matmul, and the traffic model
#
# **The naive kernel** (lecture 000, "A Simple Matrix Multiplication Kernel") gives each
# thread one element of C: it reads a row of A and a column of B from global memory. Every
# multiply-add (2 flops) needs two 4-byte loads, so it moves 4 bytes per flop, and a memory
# system of 150 GB/s caps it at 150/4 = 37.5 GFLOP/s. Lecture 001 counts the same thing in
# total: N² threads × 2N loads = **2N³** loads.
#
# **The tiled kernel** loads T×T tiles of A and B into shared memory once per block and lets
# all T² threads reuse them: every loaded element serves T multiply-adds, so global loads fall
# to **2N³/T** and the bound rises T-fold: (150/4)×16 = 600 GFLOP/s with 16×16 tiles,
# (150/4)×32 = 1,200 with 32×32. `tm.model` does this arithmetic.

# %%
import math
import numpy as np
import matplotlib.pyplot as plt
import tiledmm as tm
from tiledmm.notebook import have, start, table   # the notebooks' shared set-up
from tiledmm.testing import assert_matmul_close, assert_sum_close

BACKEND, ON_GPU, AVAILABLE = start()   # prints the backend; AVAILABLE: the registered kernels
rng = np.random.default_rng(0)

SIZES = [1024, 2048, 4096] if ON_GPU else [64, 128]

# %%
print("lecture 000, 150 GB/s, float32:")
for tile in (1, 16, 32):
    what = "naive" if tile == 1 else f"{tile}x{tile} tiles"
    print(f"  {what:>12}: intensity {tm.model.lecture_intensity(tile):5.2f} FLOP/B -> "
          f"{tm.model.bandwidth_bound_gflops(150, tile=tile):7.1f} GFLOP/s")
g80 = tm.occupancy.PRESETS["G80"]
print(f"lecture 003, G80 at {g80['bandwidth_gbs']} GB/s with 16x16 tiles: "
      f"{tm.model.bandwidth_bound_gflops(g80['bandwidth_gbs'], tile=16):.1f} GFLOP/s "
      "(the slide prints 347.6; (86.4/4) x 16 is this)")

# %% [markdown]
# ## Counting loads, also for rectangular matrices
#
# Lecture 000 leaves rectangular matrices to the reader. For A (M×K) @ B (K×N) with T×T
# tiles, each block-column of C re-reads A once and each block-row re-reads B once:
# `M·K·⌈N/T⌉ + K·N·⌈M/T⌉` loads, which is 2N³/T for square N a multiple of T. Each kernel in
# tiledmm's registry carries the same model, and every call reports it as `res.model_bytes`
# (loads plus the M·N stores of C); the cell checks that the two agree.

# %%
N = SIZES[-1]
print(f"N = {N}: naive 2N^3 = {tm.model.loads_naive(N):.3e} loads")
for T in (8, 16, 32):
    print(f"  tiled T={T:2d}: {tm.model.loads_tiled(N, tile=T):.3e} loads = 2N^3/{2 * N**3 // tm.model.loads_tiled(N, tile=T)}")

M_, K_, N_ = (1000, 300, 700) if ON_GPU else (100, 30, 70)
A = (rng.random((M_, K_)) * 2 - 1).astype(np.float32)
B = (rng.random((K_, N_)) * 2 - 1).astype(np.float32)
for kernel, params in (("naive", {}), ("tiled", {"tile": 16})):
    r = tm.matmul(A, B, kernel=kernel, **params)
    assert_matmul_close(r.out, A, B)
    predicted = tm.model.traffic_bytes(kernel, M_, N_, K_, **params)
    print(f"{kernel:6s} {M_}x{K_} @ {K_}x{N_}: model {predicted:,} bytes, the call reports "
          f"{r.model_bytes:,.0f}: {'agree' if predicted == r.model_bytes else 'DIFFER'}")

# %% [markdown]
# ## Measured beside predicted
#
# Now run both kernels on square matrices, check them against NumPy, and put each measured
# rate beside its bound. On the GPU the bound uses the device's peak FP32 rate and memory
# bandwidth (`tm.device_info()`); on the emulator there is no published peak, so the memory
# roof is the emulator's own measured `vec_add` bandwidth.

# %%
if ON_GPU:
    PEAK, BW = tm.model.device_peaks()
else:
    BW, PEAK = tm.model.measure_bandwidth(1 << 20), None
print(f"memory roof {BW:,.2f} GB/s" + (f", compute roof {PEAK:,.0f} GFLOP/s" if PEAK else
                                       " (measured with vec_add; no compute roof on the emulator)"))

results = []
for n in SIZES:
    A = (rng.random((n, n)) * 2 - 1).astype(np.float32)
    B = (rng.random((n, n)) * 2 - 1).astype(np.float32)
    for kernel, params in (("naive", {}), ("tiled", {"tile": 8}), ("tiled", {"tile": 16}),
                           ("tiled", {"tile": 32})):
        r = tm.matmul(A, B, kernel=kernel, **params)
        if n == SIZES[0]:
            assert_matmul_close(r.out, A, B)
        results.append(r)
cmp = tm.model.compare_table([r for r in results if r.out.shape[0] == SIZES[-1]],
                             bandwidth_gbs=BW, peak_gflops=PEAK)
table(cmp, ["kernel", "params", "intensity", "bound_gflops", "measured_gflops",
            "fraction_of_bound", "model_gbps"])

# %%
rows = tm.plot.as_rows(results)
by = {(r["kernel"], r.get("tile")): r for r in rows if r["M"] == SIZES[-1]}
naive, best = by[("naive", None)], max((r for r in rows if r["M"] == SIZES[-1]), key=lambda r: r["gflops"])
print(f"at {SIZES[-1]}^3 the fastest was {best['kernel']} {best['params']}: "
      f"{best['gflops'] / naive['gflops']:.1f}x the naive kernel's rate")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
tm.plot.measured_vs_predicted(cmp, ax=ax1, title=f"{SIZES[-1]}^3: model bound beside measured")
tm.plot.roofline(results, peak_gflops=PEAK, bandwidth_gbs=BW, ax=ax2,
                 extra_roofs=[("lecture: 150 GB/s", 150.0)] if ON_GPU else [])
plt.tight_layout()
plt.show()

# %% [markdown]
# **Reading the plots.** Tiling raises the arithmetic intensity roughly T-fold (the points
# move right), and on a GPU the measured rate follows the roof until something other than
# DRAM traffic limits it: shared-memory bandwidth, latency, occupancy (notebook 03). On the
# emulator the "memory" is the CPU's cache hierarchy, the naive kernel's repeated loads mostly
# hit in cache, and each block's threads run as loops between its `__syncthreads`
# (`res.launch.path` says "thread loops"), nothing like a GPU's warps: the emulator shows that the
# kernels are correct and how their traffic differs, not how fast a GPU would run them.

# %% [markdown]
# ## What an H100 would do: counted traffic and the predicted H100 time
#
# Tiling cuts global requests 16-fold at tile 16; on a GPU that is what makes it faster. `tm.profile.lesson_table` counts each kernel's memory traffic as Nsight Compute
# counts it on a GPU (global requests, 32-byte sectors per request, shared-memory bank
# conflicts, divergent branches) at the lesson's size, and predicts the H100's time from
# those counts (`docs/profile.md`: what is exact and what is modelled). The chart labels the
# prediction "predicted for H100 from counted traffic". Beside it is the time measured here:
# on a GPU the kernel's own time, on the emulator CPU time, which is **not** the lesson (a CPU
# runs a warp's loads one after another, so caches, not DRAM bursts, decide).

# %%
rows = tm.profile.lesson_table("matmul", [("naive", {"block": 16}), ("tiled", {"tile": 8}),
                                        ("tiled", {"tile": 16}), ("tiled", {"tile": 32})])
table(rows, ["kernel", "params", "global_load_requests", "load_sectors_per_request",
             "l1_l2_bytes", "predicted_ms", "bound", "measured_ms", "measured_on"])

# %%
tm.plot.lesson(rows, title="naive vs tiled: predicted for H100 from counted traffic")
plt.tight_layout()
plt.show()
