# %% [markdown]
# # 05 · Thread coarsening
#
# Lecture 002: parallelism has a price (launching threads, redundant loads). In the tiled
# kernel, the blocks along a row of C all load the same tiles of A. If the hardware would run
# those blocks one after another anyway, that redundancy buys nothing. **Coarsening** gives
# one block `COARSE_FACTOR` adjacent output tiles: it loads each A tile once and reuses it
# for all of them, so A's traffic falls by the factor:
#
# `loads = M·K·⌈N/(T·C)⌉ + K·N·⌈M/T⌉`
#
# The lecture's `matMulCoarse` listing has two bugs that tiledmm's `coarse` kernel fixes:
# its column index `colStart + c*TILE_WIDTH` forgets `+ tx` (every thread of a row would
# write the same column), and it has no bounds checks (sizes must be multiples of the tile).

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
N = SIZES[-1]
model_rows = []
for C in (1, 2, 4, 8):
    for T in (16, 32):
        b = tm.model.traffic_bytes("coarse", N, coarsen=C, tile=T, stores=False)
        model_rows.append(dict(tile=T, coarsen=C, loads=b // 4,
                               vs_tiled=tm.model.loads_tiled(N, tile=T) / (b // 4),
                               blocks=math.ceil(N / T) * math.ceil(N / (T * C)),
                               intensity=tm.model.arithmetic_intensity("coarse", N, coarsen=C, tile=T)))
table(model_rows)

# %% [markdown]
# Coarsening also cuts the number of blocks C-fold. That is the risk the lecture names: with
# too few blocks the GPU's multiprocessors sit idle. The number of "waves" — blocks in the
# grid over blocks the whole GPU holds at once — tells when that happens: below one wave part
# of the GPU is idle.

# %%
if have("coarse"):
    df = tm.sweep("coarse", SIZES, coarsen="all", tile=[16, 32], progress=False, check=True)
    sms = tm.device_info()["multiprocessors"]
    df_rows = tm.plot.as_rows(df)
    for r in df_rows:
        blocks = r["grid"][0] * r["grid"][1] * r["grid"][2]
        r["waves"] = blocks / max(1, sms * r["blocks_per_sm"])
    display_cols = ["M", "tile", "coarsen", "ms", "gflops", "shared_bytes", "blocks_per_sm",
                    "waves", "max_rel_error"]
    print(table(df_rows, display_cols))

# %%
if have("coarse"):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, tile in zip(axes, (16, 32)):
        sub = [r for r in df_rows if r["tile"] == tile]
        tm.plot.tile_sizes(sub, ax=ax, kernel="coarse", x="coarsen",
                           title=f"coarse, tile {tile}: rate against coarsening factor")
        ax.set_xlabel("coarsening factor (output tiles per block)")
    plt.tight_layout()
    plt.show()
    best = max(df_rows, key=lambda r: r["gflops"] if r["M"] == SIZES[-1] else -1)
    print(f"fastest at {SIZES[-1]}^3: tile {best['tile']}, coarsen {best['coarsen']}")

# %% [markdown]
# Coarsening helps while it saves traffic and the grid still fills the machine; past that,
# fewer blocks (and more shared memory and registers per block) cost more than the saved
# loads. Where the best factor lies depends on the size and the GPU, which is why the lecture
# says to measure rather than guess.

# %% [markdown]
# ## Coarsening on an H100: counted traffic and the predicted H100 time
#
# Each coarsened block reuses its A tile for several output tiles, so global requests fall. `tm.profile.lesson_table` counts each kernel's memory traffic as Nsight Compute
# counts it on a GPU (global requests, 32-byte sectors per request, shared-memory bank
# conflicts, divergent branches) at the lesson's size, and predicts the H100's time from
# those counts (`docs/profile.md`: what is exact and what is modelled). The chart labels the
# prediction "predicted for H100 from counted traffic". Beside it is the time measured here:
# on a GPU the kernel's own time, on the emulator CPU time, which is **not** the lesson (a CPU
# runs a warp's loads one after another, so caches, not DRAM bursts, decide).

# %%
rows = tm.profile.lesson_table("matmul", [("tiled", {"tile": 32})] +
                               [("coarse", {"coarsen": c, "tile": 32}) for c in (2, 4, 8)])
table(rows, ["kernel", "params", "global_load_requests", "load_sectors_per_request",
             "predicted_ms", "bound", "measured_ms", "measured_on"])

# %%
tm.plot.lesson(rows, title="coarsening: predicted for H100 from counted traffic")
plt.tight_layout()
plt.show()
