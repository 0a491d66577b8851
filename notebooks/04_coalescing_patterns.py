# %% [markdown]
# # 04 · Coalescing patterns
#
# DRAM is read in bursts. When the 32 threads of a warp load 32 neighbouring words, the
# hardware combines them into a few wide transactions (**coalescing**); when they load words
# far apart, each needs its own. Lecture 000 names four patterns for a row-major matrix:
#
# | neighbouring threads access | coalesced? |
# |---|---|
# | neighbouring columns of a row | yes |
# | neighbouring rows of a column | no: each thread hits another burst |
# | the same row (same element) | one transaction, broadcast, little useful data |
# | the same column | likewise |
#
# The first cell counts, for one warp's load, how many 32-byte sectors each pattern touches
# (the unit in which current GPUs move data; lecture 002).

# %%
import math
import numpy as np
import matplotlib.pyplot as plt
import tiledmm as tm
from tiledmm.notebook import have, start, table   # the notebooks' shared set-up
from tiledmm.testing import assert_matmul_close, assert_sum_close

BACKEND, ON_GPU, AVAILABLE = start()   # prints the backend; AVAILABLE: the registered kernels
rng = np.random.default_rng(0)

SIZES = [1024, 2048] if ON_GPU else [64, 128]

# %%
WIDTH, WORD, SECTOR = 1024, 4, 32      # a 1024-wide float32 matrix
lanes = np.arange(32)
patterns = {
    "neighbouring columns\n(M[row][c0 + lane])": lanes,
    "neighbouring rows\n(M[r0 + lane][col])": lanes * WIDTH,
    "same element\n(M[row][col])": np.zeros(32, dtype=int),
    "stride 2\n(M[row][2 * lane])": 2 * lanes,
}
sectors = {name: len(np.unique(idx * WORD // SECTOR)) for name, idx in patterns.items()}
useful = {name: len(np.unique(idx)) * WORD / (sectors[name] * SECTOR) for name, idx in patterns.items()}
for name in patterns:
    print(f"{name.replace(chr(10), ' '):45s} {sectors[name]:3d} sectors, "
          f"{useful[name]:.0%} of the bytes moved are used")

# %% [markdown]
# ## The naive kernel's two mappings
#
# In tiledmm's `naive` kernel, neighbouring threads (threadIdx.x) take neighbouring
# **columns** of C: at step k they read the same A[row][k] (a broadcast) and neighbouring
# B[k][col] (coalesced). `naive_uncoalesced` swaps the mapping: neighbouring threads take
# neighbouring **rows**, so their A[row][k] are K elements apart: one sector per thread.
# Both do exactly the same arithmetic and load the same number of elements (same model bytes).

# %%
kernels = [("naive", {}), ("naive_uncoalesced", {})]
if have("colmajor_b"):
    kernels += [("colmajor_b", {"corner": 0}), ("colmajor_b", {"corner": 1})]
results = []
for n in SIZES:
    A = (rng.random((n, n)) * 2 - 1).astype(np.float32)
    B = (rng.random((n, n)) * 2 - 1).astype(np.float32)
    for kernel, params in kernels:
        r = tm.matmul(A, B, kernel=kernel, **params)
        if n == SIZES[0]:
            assert_matmul_close(r.out, A, B)
        results.append(r)
rows = tm.plot.as_rows(results)
table(rows, ["kernel", "params", "M", "ms", "gflops", "model_bytes"])

# %% [markdown]
# ## B in column-major order and corner turning
#
# Lecture 002 takes B stored column-major: element B[k][col] now sits at `col*K + k`, so the
# naive kernel's neighbouring threads (neighbouring columns) read words K apart: uncoalesced
# again. **Corner turning**
# loads the B tile through shared memory with threads mapped along the contiguous direction,
# then reads it from shared memory in the transposed order, where access order does not cost
# DRAM bursts. (`colmajor_b` takes a row-major B and first transposes it into scratch; that
# copy is part of the timed call and of its model bytes.)

# %%
largest = [r for r in rows if r["M"] == SIZES[-1]]
base = next(r for r in largest if r["kernel"] == "naive")
for r in largest:
    print(f"{r['kernel']:18s} {r['params']:18s} {r['gflops'] / base['gflops']:6.2f}x naive's rate")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
names = list(patterns)
ax1.bar(range(len(names)), [sectors[n] for n in names], color="C1")
ax1.set_xticks(range(len(names)))
ax1.set_xticklabels(names, fontsize=8)
ax1.set_ylabel("32-byte sectors per warp load")
ax1.set_title("one warp's load, by access pattern (model)")
tm.plot.ladder(results, ax=ax2, y="gflops", title=f"{SIZES[-1]}^3: the same arithmetic, "
               "different access patterns")
plt.tight_layout()
plt.show()

# %% [markdown]
# On a GPU the uncoalesced mapping and the column-major naive kernel are several times slower
# than their coalesced counterparts, though they load exactly the same elements. On the CPU
# emulator the picture can differ or even reverse: a CPU core runs a block's threads one after
# another, so the "warp" never issues its loads together and caches, not DRAM bursts, decide;
# the sector count above is the GPU's story.

# %% [markdown]
# ## Coalescing on an H100: counted traffic and the predicted H100 time
#
# The same loads, in a different order: a coalesced warp load touches 4 sectors, an uncoalesced one up to 32. `tm.profile.lesson_table` counts each kernel's memory traffic as Nsight Compute
# counts it on a GPU (global requests, 32-byte sectors per request, shared-memory bank
# conflicts, divergent branches) at the lesson's size, and predicts the H100's time from
# those counts (`docs/profile.md`: what is exact and what is modelled). The chart labels the
# prediction "predicted for H100 from counted traffic". Beside it is the time measured here:
# on a GPU the kernel's own time, on the emulator CPU time, which is **not** the lesson (a CPU
# runs a warp's loads one after another, so caches, not DRAM bursts, decide).

# %%
rows = tm.profile.lesson_table("matmul", [("naive", {"block": 32}),
                                        ("naive_uncoalesced", {"block": 32}),
                                        ("colmajor_b", {"corner": 0}),
                                        ("colmajor_b", {"corner": 1})])
table(rows, ["kernel", "params", "global_load_requests", "load_sectors_per_request",
             "predicted_ms", "bound", "measured_ms", "measured_on"])

# %%
tm.plot.lesson(rows, title="coalescing and corner turning: predicted for H100 from counted traffic")
plt.tight_layout()
plt.show()
