# %% [markdown]
# # 03 · Tile size and occupancy: the worksheet answered
#
# A block of the tiled kernel has T² threads and two T×T tiles in shared memory
# (2·T²·4 bytes in float32). A multiprocessor (SM) keeps a block resident only if it has room
# for all of it at once: threads, a block slot, shared memory and registers. Lecture 000 works
# this out for the Maxwell GM107:
#
# - T = 16: 2 KB of shared memory per block, so 64 KB would hold 32 blocks, but 2,048 threads
#   per SM allow only 8 blocks of 256;
# - T = 32: 8 KB per block, 8 blocks by shared memory, 2 by threads (1,024 each).
#
# `tm.occupancy` does this arithmetic for the lectures' GPUs (G80, GM107, GM204), for current
# ones (T4, A100, H100) and for the device you run on.

# %%
import math
import numpy as np
import matplotlib.pyplot as plt
import tiledmm as tm
from tiledmm.notebook import have, start, table   # the notebooks' shared set-up
from tiledmm.testing import assert_matmul_close, assert_sum_close

BACKEND, ON_GPU, AVAILABLE = start()   # prints the backend; AVAILABLE: the registered kernels
rng = np.random.default_rng(0)

SIZES = [512, 1024, 2048, 4096] if ON_GPU else [64, 128]
COLUMNS = ["tile", "threads_per_block", "shared_bytes", "by_threads", "by_blocks",
           "by_shared_memory", "blocks_per_sm", "active_threads", "limited_by"]

# %%
table(tm.occupancy.tile_table("GM107", tiles=(8, 16, 32)), COLUMNS)

# %% [markdown]
# The G80 of lecture 003 is smaller: 16 KB of shared memory, 768 threads and 8 blocks per SM,
# at most 512 threads per block. The slide says 16×16 tiles "can potentially have up to 8
# thread blocks" — that is the shared-memory count alone; 768 threads per SM hold only 3
# blocks of 256. And 32×32 tiles need 1,024 threads per block: the kernel does not launch.

# %%
table(tm.occupancy.tile_table("G80", tiles=(8, 16, 32)), COLUMNS)

# %% [markdown]
# ## The worksheet
#
# > What is the maximum tile size that you may use for the tiled matrix multiplication on the
# > Maxwell GM204 GPU? How much global memory access can such an implementation reduce
# > compared to the basic MM kernel? Please explain why.

# %%
ws = tm.occupancy.max_tile_size("GM204")
gm204 = tm.occupancy.PRESETS["GM204"]
by_shared_alone = int(math.isqrt(gm204["shared_mem_per_block_optin"] // (2 * 4)))
print(f"Maximum tile on GM204: {ws['tile']}x{ws['tile']} ({ws['threads_per_block']} threads, "
      f"{ws['shared_bytes']:,} B of shared memory per block).")
print(f"The next size ({ws['next_tile']}x{ws['next_tile']}) fails: {ws['next_reason']}.")
print(f"Shared memory alone ({gm204['shared_mem_per_block_optin']:,} B per block) would allow "
      f"tiles up to {by_shared_alone}x{by_shared_alone}: the limit is the threads per block.")
print(f"At {ws['tile']}x{ws['tile']}: {ws['blocks_per_sm']} resident blocks per SM, limited by "
      f"{ws['limited_by']}: {ws['occupancy']}")
print(f"Global loads fall from 2N^3 to 2N^3/{ws['load_reduction']}: a factor of "
      f"{ws['load_reduction']}, because every element loaded into shared memory is used by "
      f"{ws['load_reduction']} threads' multiply-adds.")

# %%
rows = []
for name in tm.occupancy.PRESETS:
    ans = tm.occupancy.max_tile_size(name)
    rows.append(dict(device=name, board=tm.occupancy.PRESETS[name]["board"], max_tile=ans["tile"],
                     limited_by=ans["limited_by"], next_fails_on=ans["next_fails_on"],
                     blocks_per_sm=ans["blocks_per_sm"], load_reduction=ans["load_reduction"]))
table(rows)

# %% [markdown]
# ## Registers
#
# The occupancy calculator also counts registers: each thread's registers come out of the
# SM's 64K. The tiled kernel needs few, but a kernel that keeps more in registers (coarsening,
# register tiling) can become register-limited. What if a 16×16 tile's threads needed more?

# %%
regs_rows = [tm.occupancy(threads_per_block=256, shared_bytes=2048, registers_per_thread=r,
                          device="GM204").as_dict() for r in (16, 32, 48, 64, 128, 255)]
table(regs_rows, ["registers_per_thread", "by_threads", "by_shared_memory", "by_registers",
                  "blocks_per_sm", "occupancy", "limited_by"])

# %% [markdown]
# ## The device you are on
#
# `tm.occupancy(res)` reads a real launch: the block shape and shared memory the kernel used,
# and on the GPU the registers the compiler gave it; it agrees with the CUDA occupancy API's
# answer, which the call reports as `res.launch.blocks_per_sm`.

# %%
A = (rng.random((SIZES[0], SIZES[0])) * 2 - 1).astype(np.float32)
for tile in (8, 16, 32):
    r = tm.matmul(A, A, kernel="tiled", tile=tile)
    occ = tm.occupancy(r)
    print(occ)
    print(f"    CUDA occupancy API (res.launch.blocks_per_sm): {r.launch.blocks_per_sm}")

# %% [markdown]
# ## The tile-size effect, measured
#
# Finally, time the tiled kernel for each tile size and matrix size. Bigger tiles cut global
# traffic, but fewer, larger blocks also mean fewer resident blocks per SM and less
# parallelism for small matrices; the plot shows where each effect wins on this backend.

# %%
df = tm.sweep("tiled", SIZES, tile="all", progress=False)
table(df, ["M", "tile", "ms", "gflops", "blocks_per_sm", "occupancy"])

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
tm.plot.tile_sizes(df, ax=ax1)   # the unit (TFLOP/s, GFLOP/s, ...) from the data
for name in ("G80", "GM107", "GM204", "H100"):
    t_rows = tm.occupancy.tile_table(name, tiles=(4, 8, 16, 32))
    ax2.plot([r["tile"] for r in t_rows], [r["active_threads"] for r in t_rows], marker="o",
             label=name)
ax2.set_xscale("log", base=2)
ax2.set_xticks([4, 8, 16, 32])
ax2.set_xticklabels(["4", "8", "16", "32"])
ax2.set_xlabel("tile")
ax2.set_ylabel("resident threads per SM (0: does not fit)")
ax2.set_title("tiled kernel: resident threads per SM by tile")
ax2.legend()
ax2.grid(True, alpha=0.3)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Tile size on an H100: counted traffic and the predicted H100 time
#
# Larger tiles load each element fewer times (2N³/T) and keep more threads per block busy. `tm.profile.lesson_table` counts each kernel's memory traffic as Nsight Compute
# counts it on a GPU (global requests, 32-byte sectors per request, shared-memory bank
# conflicts, divergent branches) at the lesson's size, and predicts the H100's time from
# those counts (`docs/profile.md`: what is exact and what is modelled). The chart labels the
# prediction "predicted for H100 from counted traffic". Beside it is the time measured here:
# on a GPU the kernel's own time, on the emulator CPU time, which is **not** the lesson (a CPU
# runs a warp's loads one after another, so caches, not DRAM bursts, decide).

# %%
rows = tm.profile.lesson_table("matmul", [("tiled", {"tile": t}) for t in (8, 16, 32)])
table(rows, ["kernel", "params", "global_load_requests", "load_sectors_per_request",
             "shared_conflicts_per_request", "predicted_ms", "bound", "measured_ms", "measured_on"])

# %%
tm.plot.lesson(rows, title="tile size: predicted for H100 from counted traffic")
plt.tight_layout()
plt.show()
