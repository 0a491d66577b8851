# %% [markdown]
# # 07 · Reductions step by step
#
# A sum has a dependence chain: `sum += A[i]`. A **tree** breaks it: add pairs, then pairs of
# pairs, log₂ n levels. Lecture 001 (CMU 15-418) builds it up on a GPU:
#
# 1. one kernel launch per level — the kernel boundary is the barrier (`per_level`);
# 2. `__syncthreads()` inside one kernel — *wrong* across blocks, since blocks cannot wait for
#    each other (`demo_wrong_block_sync`);
# 3. one block only (`single_block`), or barriers in blocks and launches across them
#    (`multi_pass`), then the block's tree in shared memory (`shared`).
#
# Harris's "Optimizing Parallel Reduction" steps follow (divergence, bank conflicts,
# sequential addressing, first add during load, unrolled last warp, several elements per
# thread), then warp shuffles, 128-bit loads and atomics.

# %%
import math
import numpy as np
import matplotlib.pyplot as plt
import tiledmm as tm
from tiledmm.notebook import have, start, table   # the notebooks' shared set-up
from tiledmm.testing import assert_matmul_close, assert_sum_close

BACKEND, ON_GPU, AVAILABLE = start()   # prints the backend; AVAILABLE: the registered kernels
rng = np.random.default_rng(0)

N_SUM = [1 << 22, 1 << 26] if ON_GPU else [1 << 14, 1 << 16]
STEPS = ["per_level", "single_block", "multi_pass", "shared", "interleaved_divergent",
         "interleaved_bank_conflicts", "sequential", "first_add", "unroll_last_warp",
         "multi_element", "vectorized", "shuffle", "atomic", "atomic_per_element"]
steps = [k for k in STEPS if k in AVAILABLE]
if len(steps) < len(STEPS):
    print("note: not registered in this build, skipped:",
          ", ".join(k for k in STEPS if k not in AVAILABLE))

# %% [markdown]
# ## Correct, and wrong
#
# Every variant is checked against NumPy's float64 sum, with a tolerance that grows with the
# length of the sum. The lecture's Idea 2 is run too, on purpose: its `__syncthreads()` waits
# only for the threads of one block, so as soon as there is more than one block the levels
# race.

# %%
n = N_SUM[0] + 5            # not a power of two
x = (rng.random(n) * 2 - 1).astype(np.float32)
expected = x.astype(np.float64).sum()
for kernel in steps:
    r = tm.reduce(x, kernel=kernel)
    assert_sum_close(float(r.out), x)
    print(f"{kernel:28s} {float(r.out):14.6f}  ({r.launch.launches} launch(es), grid {r.launch.grid[0]})")
print(f"{'numpy float64':28s} {expected:14.6f}")
if have("demo_wrong_block_sync"):
    wrong = tm.reduce(x, kernel="demo_wrong_block_sync")
    err = abs(float(wrong.out) - expected)
    print(f"\ndemo_wrong_block_sync: {float(wrong.out):.6f}, off by {err:.3g}: "
          + ("wrong, as the lecture says" if err > 1e-3 * np.abs(x).sum() else
             "happened to come out right this time; it is still a race"))

# %% [markdown]
# ## Bandwidth per step
#
# A sum reads every element once and does one addition per 4 bytes: it is memory-bound, so
# its figure of merit is GB/s read. On a GPU the first steps lose to launches, divergence and
# bank conflicts; the last ones approach the rate of a plain device-to-device copy.

# %%
df = tm.sweep(steps, N_SUM, family="reduce", progress=False, check=True)
table(df, ["kernel", "params", "n", "ms", "gbps", "launches", "max_rel_error"])

# %%
copy_gbps = None
if ON_GPU:
    try:
        from tiledmm import bench
        copy_gbps = bench.bench_reduce(sizes=[N_SUM[-1]], kernels=["shuffle"], check=False)[0]["copy_gbps"]
    except Exception as exc:   # the reference copy is optional
        print("no copy reference:", exc)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.6), gridspec_kw={"width_ratios": [2, 1]})
tm.plot.reductions(df, ax=ax1, copy_gbps=copy_gbps)
ax1.set_yscale("log")
if have("sequential"):
    bs = tm.sweep("sequential", N_SUM[-1], block="all", progress=False)
    bs_rows = tm.plot.as_rows(bs)
    ax2.plot([r["block"] for r in bs_rows], [r["gbps"] for r in bs_rows], marker="o")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks([r["block"] for r in bs_rows])
    ax2.set_xticklabels([str(r["block"]) for r in bs_rows])
    ax2.set_xlabel("threads per block")
    ax2.set_ylabel("GB/s read")
    ax2.set_title(f"sequential addressing: block size, n = {N_SUM[-1]:,}")
    ax2.grid(True, alpha=0.3)
plt.tight_layout()
plt.show()

# %% [markdown]
# `launches` counts kernel launches per call: the per-level version needs ⌈log₂ n⌉ of them,
# the multi-pass ones one per pass, the shuffle kernel one. On the emulator the differences
# are mostly launch and barrier costs on a CPU; run this notebook on a GPU to see the steps
# the lecture and Harris's slides describe.

# %% [markdown]
# ## The reduction ladder on an H100: counted traffic and the predicted H100 time
#
# Each step removes a cost the counters show: divergent branches, bank conflicts, idle threads, barriers, launches. `tm.profile.lesson_table` counts each kernel's memory traffic as Nsight Compute
# counts it on a GPU (global requests, 32-byte sectors per request, shared-memory bank
# conflicts, divergent branches) at the lesson's size, and predicts the H100's time from
# those counts (`docs/profile.md`: what is exact and what is modelled). The chart labels the
# prediction "predicted for H100 from counted traffic". Beside it is the time measured here:
# on a GPU the kernel's own time, on the emulator CPU time, which is **not** the lesson (a CPU
# runs a warp's loads one after another, so caches, not DRAM bursts, decide).

# %%
rows = tm.profile.lesson_table("reduce", [(k, {"block": 256}) for k in (
    "interleaved_divergent", "interleaved_bank_conflicts", "sequential", "first_add",
    "unroll_last_warp", "shuffle", "per_level", "atomic")])
table(rows, ["kernel", "params", "global_load_requests", "load_sectors_per_request",
             "shared_conflicts_per_request", "divergent_branches", "predicted_ms", "bound", "measured_ms", "measured_on"])

# %%
tm.plot.lesson(rows, title="reductions: predicted for H100 from counted traffic")
plt.tight_layout()
plt.show()
