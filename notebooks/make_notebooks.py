"""Write the classroom notebooks (nbformat v4 JSON, no outputs) from the cells below.

    python notebooks/make_notebooks.py          # rewrites notebooks/0*.ipynb

Edit the cells here, not the .ipynb files, then rerun; execute them with Jupyter, with
`python -m pytest tests/test_notebooks.py` (emu, headless) or with
`python benchmarks/run_notebooks.py` (any backend, no Jupyter needed; saves outputs).
Every number a notebook shows comes from a run or from tm.model/tm.occupancy: none is typed in.
"""
import json
import os
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))

SETUP = '''\
import math
import numpy as np
import matplotlib.pyplot as plt
import tiledmm as tm
from tiledmm.testing import assert_matmul_close, assert_sum_close

BACKEND = tm.get_backend()
ON_GPU = BACKEND == "cuda"
AVAILABLE = {k.name for k in tm.kernels()}


def have(*names):
    """True when every kernel named is registered in this build; else print a note."""
    missing = [n for n in names if n not in AVAILABLE]
    if missing:
        print(f"note: kernel(s) {', '.join(missing)} not registered in this build of tiledmm; "
              "skipping this part")
    return not missing


def table(rows, columns=None):
    """Rows (a DataFrame or a list of dicts) as a DataFrame where pandas is installed."""
    try:
        import pandas as pd
    except ImportError:
        return rows
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    return df[columns] if columns else df


rng = np.random.default_rng(0)
print(f"backend: {BACKEND}: " + ("the GPU, full sizes" if ON_GPU else
      "the CPU emulator, small sizes; its timings are CPU times, not GPU times"))
'''


def md(text):
    return ("markdown", textwrap.dedent(text).strip("\n"))


def code(text):
    return ("code", textwrap.dedent(text).strip("\n"))


NOTEBOOKS = {}

# --------------------------------------------------------------------------------------------
NOTEBOOKS["01_first_kernel_and_device_query"] = [
    md("""
    # 01 · A first kernel and the device query

    Lecture 000 (CS133) starts with `vecAdd`: the host allocates device memory, copies `A` and
    `B` in, launches `ceil(n/256)` blocks of 256 threads, copies `C` back and frees everything.
    Each thread computes one element:

    ```cuda
    __global__ void vecAddKernel(float* A, float* B, float* C, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) C[i] = A[i] + B[i];
    }
    ```

    tiledmm does the host part for you, times every step separately, and tells you how it
    launched the kernel. This notebook runs on the GPU when there is one and on tiledmm's CPU
    emulator otherwise (same kernel source; sizes are smaller there and times are CPU times).
    """),
    code(SETUP + '''
N_VEC = [1 << 20, 1 << 22, 1 << 24, 1 << 26] if ON_GPU else [1 << 12, 1 << 14, 1 << 16, 1 << 18]
'''),
    md("""
    ## The device query

    The lecture's device query calls `cudaGetDeviceCount` and `cudaGetDeviceProperties` and
    reads fields such as `maxThreadsPerBlock` and `sharedMemPerBlock`. `tm.device_info()` prints
    the same, plus the peak FP32 rate and memory bandwidth a roofline needs (on the GPU). On the
    emulator the limits are the emulator's, and it says that it has no peaks.
    """),
    code('''
info = tm.device_info()
print(info)
'''),
    code('''
print(f"A block may have up to {info['max_threads_per_block']} threads and "
      f"{info['shared_mem_per_block']:,} bytes of shared memory;")
print(f"one multiprocessor holds up to {info['max_threads_per_multiprocessor']} threads, "
      f"{info['max_blocks_per_multiprocessor']} blocks and "
      f"{info['shared_mem_per_multiprocessor']:,} bytes of shared memory; "
      f"there are {info['multiprocessors']} multiprocessors.")
'''),
    md("""
    ## vecAdd

    `tm.vec_add(a, b)` runs the kernel above. The result unpacks as `(output, timing)` and also
    carries the launch: with 256 threads per block the grid must have `ceil(n/256)` blocks, and
    the `if (i < n)` guard keeps the extra threads of the last block from writing past the end.
    """),
    code('''
n = N_VEC[0] + 3          # not a multiple of the block: the guard matters
a = rng.random(n, dtype=np.float32)
b = rng.random(n, dtype=np.float32)
res = tm.vec_add(a, b)
c, timing = res
assert np.array_equal(c, a + b)
print(res)
print(res.launch)
print("ceil(n / 256) =", math.ceil(n / 256), "blocks; the launch used", res.launch.grid[0])
'''),
    code('''
for block in (128, 256, 512, 1024):
    r = tm.vec_add(a, b, block=block)
    print(f"block={block:5d}: grid {r.launch.grid[0]:7d} blocks = ceil({n}/{block}) = "
          f"{math.ceil(n / block)}; {r.launch.threads_per_block * r.launch.grid[0] - n} idle threads")
'''),
    md("""
    ## Matrix add with 2-D indices

    Lecture 001 (CMU 15-418) adds matrices with a 2-D grid of 2-D blocks:
    `x = blockIdx.x * blockDim.x + threadIdx.x`, `y = blockIdx.y * blockDim.y + threadIdx.y`.
    The lecture's launch uses `X_len / blockSize.x` blocks, which drops the edge when the size is
    not a multiple of the block; tiledmm rounds up and guards, as `vecAdd` does.
    """),
    code('''
rows_, cols_ = (3000, 2000) if ON_GPU else (300, 200)
A2 = rng.random((rows_, cols_), dtype=np.float32)
B2 = rng.random((rows_, cols_), dtype=np.float32)
r = tm.mat_add(A2, B2, block=16)
assert np.array_equal(r.out, A2 + B2)
print(r.launch.grid, "blocks of", r.launch.block, "threads for a", A2.shape, "matrix")
'''),
    md("""
    ## Where the time goes

    A vector add does one floating-point addition per 12 bytes it moves (two 4-byte reads, one
    write): it can only be as fast as memory. And before the kernel can run, the inputs must
    cross from host to device. The plots below split each call into its copy-in, kernel and
    copy-out times, and show the kernel's effective bandwidth as the vector grows.
    """),
    code('''
rows = []
for n_ in N_VEC:
    x = rng.random(n_, dtype=np.float32)
    y = rng.random(n_, dtype=np.float32)
    r = tm.vec_add(x, y)
    t = r.timing
    rows.append(dict(n=n_, h2d_ms=t.h2d_ms, kernel_ms=t.kernel_ms, d2h_ms=t.d2h_ms, gbps=r.gbps))
table(rows)
'''),
    code('''
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
'''),
]

# --------------------------------------------------------------------------------------------
NOTEBOOKS["02_naive_vs_tiled_and_the_traffic_model"] = [
    md("""
    # 02 · Naive vs tiled matmul, and the traffic model

    **The naive kernel** (lecture 000, "A Simple Matrix Multiplication Kernel") gives each
    thread one element of C: it reads a row of A and a column of B from global memory. Every
    multiply-add (2 flops) needs two 4-byte loads, so it moves 4 bytes per flop, and a memory
    system of 150 GB/s caps it at 150/4 = 37.5 GFLOP/s. Lecture 001 counts the same thing in
    total: N² threads × 2N loads = **2N³** loads.

    **The tiled kernel** loads T×T tiles of A and B into shared memory once per block and lets
    all T² threads reuse them: every loaded element serves T multiply-adds, so global loads fall
    to **2N³/T** and the bound rises T-fold: (150/4)×16 = 600 GFLOP/s with 16×16 tiles,
    (150/4)×32 = 1,200 with 32×32. `tm.model` does this arithmetic.
    """),
    code(SETUP + '''
SIZES = [1024, 2048, 4096] if ON_GPU else [64, 128]
'''),
    code('''
print("lecture 000, 150 GB/s, float32:")
for tile in (1, 16, 32):
    what = "naive" if tile == 1 else f"{tile}x{tile} tiles"
    print(f"  {what:>12}: intensity {tm.model.lecture_intensity(tile):5.2f} FLOP/B -> "
          f"{tm.model.bandwidth_bound_gflops(150, tile=tile):7.1f} GFLOP/s")
g80 = tm.occupancy.PRESETS["G80"]
print(f"lecture 003, G80 at {g80['bandwidth_gbs']} GB/s with 16x16 tiles: "
      f"{tm.model.bandwidth_bound_gflops(g80['bandwidth_gbs'], tile=16):.1f} GFLOP/s "
      "(the slide prints 347.6; (86.4/4) x 16 is this)")
'''),
    md("""
    ## Counting loads, also for rectangular matrices

    Lecture 000 leaves rectangular matrices to the reader. For A (M×K) @ B (K×N) with T×T
    tiles, each block-column of C re-reads A once and each block-row re-reads B once:
    `M·K·⌈N/T⌉ + K·N·⌈M/T⌉` loads, which is 2N³/T for square N a multiple of T. Each kernel in
    tiledmm's registry carries the same model, and every call reports it as `res.model_bytes`
    (loads plus the M·N stores of C); the cell checks that the two agree.
    """),
    code('''
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
'''),
    md("""
    ## Measured beside predicted

    Now run both kernels on square matrices, check them against NumPy, and put each measured
    rate beside its bound. On the GPU the bound uses the device's peak FP32 rate and memory
    bandwidth (`tm.device_info()`); on the emulator there is no published peak, so the memory
    roof is the emulator's own measured `vec_add` bandwidth.
    """),
    code('''
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
'''),
    code('''
rows = tm.plot._rows(results)
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
'''),
    md("""
    **Reading the plots.** Tiling raises the arithmetic intensity roughly T-fold (the points
    move right), and on a GPU the measured rate follows the roof until something other than
    DRAM traffic limits it: shared-memory bandwidth, latency, occupancy (notebook 03). On the
    emulator the "memory" is the CPU's cache hierarchy, the naive kernel's repeated loads mostly
    hit in cache, and each `__syncthreads` is a fiber switch: the emulator shows that the
    kernels are correct and how their traffic differs, not how fast a GPU would run them.
    """),
]

# --------------------------------------------------------------------------------------------
NOTEBOOKS["03_tile_size_and_occupancy"] = [
    md("""
    # 03 · Tile size and occupancy: the worksheet answered

    A block of the tiled kernel has T² threads and two T×T tiles in shared memory
    (2·T²·4 bytes in float32). A multiprocessor (SM) keeps a block resident only if it has room
    for all of it at once: threads, a block slot, shared memory and registers. Lecture 000 works
    this out for the Maxwell GM107:

    - T = 16: 2 KB of shared memory per block, so 64 KB would hold 32 blocks, but 2,048 threads
      per SM allow only 8 blocks of 256;
    - T = 32: 8 KB per block, 8 blocks by shared memory, 2 by threads (1,024 each).

    `tm.occupancy` does this arithmetic for the lectures' GPUs (G80, GM107, GM204), for current
    ones (T4, A100, H100) and for the device you run on.
    """),
    code(SETUP + '''
SIZES = [512, 1024, 2048, 4096] if ON_GPU else [64, 128]
COLUMNS = ["tile", "threads_per_block", "shared_bytes", "by_threads", "by_blocks",
           "by_shared_memory", "blocks_per_sm", "active_threads", "limited_by"]
'''),
    code('''
table(tm.occupancy.tile_table("GM107", tiles=(8, 16, 32)), COLUMNS)
'''),
    md("""
    The G80 of lecture 003 is smaller: 16 KB of shared memory, 768 threads and 8 blocks per SM,
    at most 512 threads per block. The slide says 16×16 tiles "can potentially have up to 8
    thread blocks" — that is the shared-memory count alone; 768 threads per SM hold only 3
    blocks of 256. And 32×32 tiles need 1,024 threads per block: the kernel does not launch.
    """),
    code('''
table(tm.occupancy.tile_table("G80", tiles=(8, 16, 32)), COLUMNS)
'''),
    md("""
    ## The worksheet

    > What is the maximum tile size that you may use for the tiled matrix multiplication on the
    > Maxwell GM204 GPU? How much global memory access can such an implementation reduce
    > compared to the basic MM kernel? Please explain why.
    """),
    code('''
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
'''),
    code('''
rows = []
for name in tm.occupancy.PRESETS:
    ans = tm.occupancy.max_tile_size(name)
    rows.append(dict(device=name, board=tm.occupancy.PRESETS[name]["board"], max_tile=ans["tile"],
                     limited_by=ans["limited_by"], next_fails_on=ans["next_fails_on"],
                     blocks_per_sm=ans["blocks_per_sm"], load_reduction=ans["load_reduction"]))
table(rows)
'''),
    md("""
    ## Registers

    The occupancy calculator also counts registers: each thread's registers come out of the
    SM's 64K. The tiled kernel needs few, but a kernel that keeps more in registers (coarsening,
    register tiling) can become register-limited. What if a 16×16 tile's threads needed more?
    """),
    code('''
regs_rows = [tm.occupancy(threads_per_block=256, shared_bytes=2048, registers_per_thread=r,
                          device="GM204").as_dict() for r in (16, 32, 48, 64, 128, 255)]
table(regs_rows, ["registers_per_thread", "by_threads", "by_shared_memory", "by_registers",
                  "blocks_per_sm", "occupancy", "limited_by"])
'''),
    md("""
    ## The device you are on

    `tm.occupancy(res)` reads a real launch: the block shape and shared memory the kernel used,
    and on the GPU the registers the compiler gave it; it agrees with the CUDA occupancy API's
    answer, which the call reports as `res.launch.blocks_per_sm`.
    """),
    code('''
A = (rng.random((SIZES[0], SIZES[0])) * 2 - 1).astype(np.float32)
for tile in (8, 16, 32):
    r = tm.matmul(A, A, kernel="tiled", tile=tile)
    occ = tm.occupancy(r)
    print(occ)
    print(f"    CUDA occupancy API (res.launch.blocks_per_sm): {r.launch.blocks_per_sm}")
'''),
    md("""
    ## The tile-size effect, measured

    Finally, time the tiled kernel for each tile size and matrix size. Bigger tiles cut global
    traffic, but fewer, larger blocks also mean fewer resident blocks per SM and less
    parallelism for small matrices; the plot shows where each effect wins on this backend.
    """),
    code('''
df = tm.sweep("tiled", SIZES, tile="all", progress=False)
table(df, ["M", "tile", "ms", "gflops", "blocks_per_sm", "occupancy"])
'''),
    code('''
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
tm.plot.tile_sizes(df, ax=ax1, y="tflops" if ON_GPU else "gflops")
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
'''),
]

# --------------------------------------------------------------------------------------------
NOTEBOOKS["04_coalescing_patterns"] = [
    md("""
    # 04 · Coalescing patterns

    DRAM is read in bursts. When the 32 threads of a warp load 32 neighbouring words, the
    hardware combines them into a few wide transactions (**coalescing**); when they load words
    far apart, each needs its own. Lecture 000 names four patterns for a row-major matrix:

    | neighbouring threads access | coalesced? |
    |---|---|
    | neighbouring columns of a row | yes |
    | neighbouring rows of a column | no: each thread hits another burst |
    | the same row (same element) | one transaction, broadcast, little useful data |
    | the same column | likewise |

    The first cell counts, for one warp's load, how many 32-byte sectors each pattern touches
    (the unit in which current GPUs move data; lecture 002).
    """),
    code(SETUP + '''
SIZES = [1024, 2048] if ON_GPU else [64, 128]
'''),
    code('''
WIDTH, WORD, SECTOR = 1024, 4, 32      # a 1024-wide float32 matrix
lanes = np.arange(32)
patterns = {
    "neighbouring columns\\n(M[row][c0 + lane])": lanes,
    "neighbouring rows\\n(M[r0 + lane][col])": lanes * WIDTH,
    "same element\\n(M[row][col])": np.zeros(32, dtype=int),
    "stride 2\\n(M[row][2 * lane])": 2 * lanes,
}
sectors = {name: len(np.unique(idx * WORD // SECTOR)) for name, idx in patterns.items()}
useful = {name: len(np.unique(idx)) * WORD / (sectors[name] * SECTOR) for name, idx in patterns.items()}
for name in patterns:
    print(f"{name.replace(chr(10), ' '):45s} {sectors[name]:3d} sectors, "
          f"{useful[name]:.0%} of the bytes moved are used")
'''),
    md("""
    ## The naive kernel's two mappings

    In tiledmm's `naive` kernel, neighbouring threads (threadIdx.x) take neighbouring
    **columns** of C: at step k they read the same A[row][k] (a broadcast) and neighbouring
    B[k][col] (coalesced). `naive_uncoalesced` swaps the mapping: neighbouring threads take
    neighbouring **rows**, so their A[row][k] are K elements apart: one sector per thread.
    Both do exactly the same arithmetic and load the same number of elements (same model bytes).
    """),
    code('''
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
rows = tm.plot._rows(results)
table(rows, ["kernel", "params", "M", "ms", "gflops", "model_bytes"])
'''),
    md("""
    ## B in column-major order and corner turning

    Lecture 002 takes B stored column-major: element B[k][col] now sits at `col*K + k`, so the
    naive kernel's neighbouring threads (neighbouring columns) read words K apart: uncoalesced
    again. **Corner turning**
    loads the B tile through shared memory with threads mapped along the contiguous direction,
    then reads it from shared memory in the transposed order, where access order does not cost
    DRAM bursts. (`colmajor_b` takes a row-major B and first transposes it into scratch; that
    copy is part of the timed call and of its model bytes.)
    """),
    code('''
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
'''),
    md("""
    On a GPU the uncoalesced mapping and the column-major naive kernel are several times slower
    than their coalesced counterparts, though they load exactly the same elements. On the CPU
    emulator the picture can differ or even reverse: a CPU core runs a block's threads one after
    another, so the "warp" never issues its loads together and caches, not DRAM bursts, decide;
    the sector count above is the GPU's story.
    """),
]

# --------------------------------------------------------------------------------------------
NOTEBOOKS["05_thread_coarsening"] = [
    md("""
    # 05 · Thread coarsening

    Lecture 002: parallelism has a price (launching threads, redundant loads). In the tiled
    kernel, the blocks along a row of C all load the same tiles of A. If the hardware would run
    those blocks one after another anyway, that redundancy buys nothing. **Coarsening** gives
    one block `COARSE_FACTOR` adjacent output tiles: it loads each A tile once and reuses it
    for all of them, so A's traffic falls by the factor:

    `loads = M·K·⌈N/(T·C)⌉ + K·N·⌈M/T⌉`

    The lecture's `matMulCoarse` listing has two bugs that tiledmm's `coarse` kernel fixes:
    its column index `colStart + c*TILE_WIDTH` forgets `+ tx` (every thread of a row would
    write the same column), and it has no bounds checks (sizes must be multiples of the tile).
    """),
    code(SETUP + '''
SIZES = [1024, 2048, 4096] if ON_GPU else [64, 128]
'''),
    code('''
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
'''),
    md("""
    Coarsening also cuts the number of blocks C-fold. That is the risk the lecture names: with
    too few blocks the GPU's multiprocessors sit idle. The number of "waves" — blocks in the
    grid over blocks the whole GPU holds at once — tells when that happens: below one wave part
    of the GPU is idle.
    """),
    code('''
if have("coarse"):
    df = tm.sweep("coarse", SIZES, coarsen="all", tile=[16, 32], progress=False, check=True)
    sms = tm.device_info()["multiprocessors"]
    df_rows = tm.plot._rows(df)
    for r in df_rows:
        blocks = r["grid"][0] * r["grid"][1] * r["grid"][2]
        r["waves"] = blocks / max(1, sms * r["blocks_per_sm"])
    display_cols = ["M", "tile", "coarsen", "ms", "gflops", "shared_bytes", "blocks_per_sm",
                    "waves", "max_rel_error"]
    print(table(df_rows, display_cols))
'''),
    code('''
if have("coarse"):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, tile in zip(axes, (16, 32)):
        sub = [r for r in df_rows if r["tile"] == tile]
        tm.plot.tile_sizes(sub, ax=ax, kernel="coarse", x="coarsen",
                           y="tflops" if ON_GPU else "gflops",
                           title=f"coarse, tile {tile}: rate against coarsening factor")
        ax.set_xlabel("coarsening factor (output tiles per block)")
    plt.tight_layout()
    plt.show()
    best = max(df_rows, key=lambda r: r["gflops"] if r["M"] == SIZES[-1] else -1)
    print(f"fastest at {SIZES[-1]}^3: tile {best['tile']}, coarsen {best['coarsen']}")
'''),
    md("""
    Coarsening helps while it saves traffic and the grid still fills the machine; past that,
    fewer blocks (and more shared memory and registers per block) cost more than the saved
    loads. Where the best factor lies depends on the size and the GPU, which is why the lecture
    says to measure rather than guess.
    """),
]

# --------------------------------------------------------------------------------------------
NOTEBOOKS["06_register_tiling_to_fast_vs_cublas"] = [
    md("""
    # 06 · From register tiling to a fast kernel, against cuBLAS

    Lecture 001 (CMU 15-418) takes the traffic argument one level further. If each **thread**
    computes a V×V piece of C, it loads V values of A and V of B per k and does V² multiply-adds:
    total global traffic **2N³/V** ("thread-level register tiling"). Combining it with **block
    tiling** — a block computes an L×L piece through shared memory — gives 2N³/L global loads
    and 2N³/V shared-memory loads.

    tiledmm's ladder:
    - `tiled` (T = 32): shared-memory tiles, one output per thread;
    - `regtile dims=1`: 64×64 block tiles, each thread a column of 8 outputs;
    - `regtile dims=2`: 128×128 block tiles, each thread an 8×8 block of outputs;
    - `fast`: register + warp tiling, 128-bit loads, a transposed A tile, double buffering;
    - `cublas`: NVIDIA's library, the reference (GPU only).
    """),
    code(SETUP + '''
SIZES = [1024, 2048, 4096] if ON_GPU else [128]
LADDER = [("naive", {}), ("tiled", {"tile": 32}), ("coarse", {}), ("regtile", {"dims": 1}),
          ("regtile", {"dims": 2}), ("fast", {}), ("cublas", {})]
present = [(k, p) for k, p in LADDER if k in AVAILABLE and (k != "cublas" or ON_GPU)]
absent = [k for k, _ in LADDER if k not in AVAILABLE]
if absent:
    print("note: not registered in this build, skipped:", ", ".join(sorted(set(absent))))
if "cublas" in AVAILABLE and not ON_GPU:
    print("note: cublas runs only on the GPU; the ladder below has no reference on the emulator")
'''),
    code('''
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
'''),
    code('''
results = []
for n in SIZES:
    A = (rng.random((n, n)) * 2 - 1).astype(np.float32)
    B = (rng.random((n, n)) * 2 - 1).astype(np.float32)
    for kernel, params in present:
        r = tm.matmul(A, B, kernel=kernel, **params)
        if n == SIZES[0]:
            assert_matmul_close(r.out, A, B)
        results.append(r)
rows = tm.plot._rows(results)
ref = {r["M"]: r for r in rows if r["kernel"] == "cublas"}
for r in rows:
    r["pct_cublas"] = 100 * r["gflops"] / ref[r["M"]]["gflops"] if r["M"] in ref else None
table(rows, ["kernel", "params", "M", "ms", "tflops", "pct_cublas", "intensity"])
'''),
    code('''
if ON_GPU:
    PEAK, BW = tm.model.device_peaks()
else:
    PEAK, BW = None, tm.model.measure_bandwidth(1 << 20)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
tm.plot.ladder(results, ax=ax1, y="tflops" if ON_GPU else "gflops")
tm.plot.roofline(results, peak_gflops=PEAK, bandwidth_gbs=BW, ax=ax2)
plt.tight_layout()
plt.show()
if ON_GPU and len(SIZES) > 1:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label in dict.fromkeys(tm.plot._label(r) for r in rows):
        pts = [(r["M"], r["tflops"]) for r in rows if tm.plot._label(r) == label]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale("log", base=2); ax.set_xlabel("N"); ax.set_ylabel("TFLOP/s")
    ax.set_title("the ladder across sizes"); ax.legend(fontsize=8); ax.grid(True, alpha=0.3)
    plt.show()
'''),
    md("""
    Each rung raises the intensity (points move right on the roofline) and, on a GPU, the rate.
    Past register tiling the remaining gap to cuBLAS is not DRAM traffic but instruction
    efficiency: wide loads, bank-conflict-free shared reads, enough independent work per thread
    to hide latency, and overlapping the next tile's loads with this tile's math. On the
    emulator only the correctness and the traffic model carry over; the rates are CPU rates.
    """),
]

# --------------------------------------------------------------------------------------------
NOTEBOOKS["07_reductions_step_by_step"] = [
    md("""
    # 07 · Reductions step by step

    A sum has a dependence chain: `sum += A[i]`. A **tree** breaks it: add pairs, then pairs of
    pairs, log₂ n levels. Lecture 001 (CMU 15-418) builds it up on a GPU:

    1. one kernel launch per level — the kernel boundary is the barrier (`per_level`);
    2. `__syncthreads()` inside one kernel — *wrong* across blocks, since blocks cannot wait for
       each other (`demo_wrong_block_sync`);
    3. one block only (`single_block`), or barriers in blocks and launches across them
       (`multi_pass`), then the block's tree in shared memory (`shared`).

    Harris's "Optimizing Parallel Reduction" steps follow (divergence, bank conflicts,
    sequential addressing, first add during load, unrolled last warp, several elements per
    thread), then warp shuffles, 128-bit loads and atomics.
    """),
    code(SETUP + '''
N_SUM = [1 << 22, 1 << 26] if ON_GPU else [1 << 14, 1 << 16]
STEPS = ["per_level", "single_block", "multi_pass", "shared", "interleaved_divergent",
         "interleaved_bank_conflicts", "sequential", "first_add", "unroll_last_warp",
         "multi_element", "vectorized", "shuffle", "atomic", "atomic_per_element"]
steps = [k for k in STEPS if k in AVAILABLE]
if len(steps) < len(STEPS):
    print("note: not registered in this build, skipped:",
          ", ".join(k for k in STEPS if k not in AVAILABLE))
'''),
    md("""
    ## Correct, and wrong

    Every variant is checked against NumPy's float64 sum, with a tolerance that grows with the
    length of the sum. The lecture's Idea 2 is run too, on purpose: its `__syncthreads()` waits
    only for the threads of one block, so as soon as there is more than one block the levels
    race.
    """),
    code('''
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
    print(f"\\ndemo_wrong_block_sync: {float(wrong.out):.6f}, off by {err:.3g}: "
          + ("wrong, as the lecture says" if err > 1e-3 * np.abs(x).sum() else
             "happened to come out right this time; it is still a race"))
'''),
    md("""
    ## Bandwidth per step

    A sum reads every element once and does one addition per 4 bytes: it is memory-bound, so
    its figure of merit is GB/s read. On a GPU the first steps lose to launches, divergence and
    bank conflicts; the last ones approach the rate of a plain device-to-device copy.
    """),
    code('''
df = tm.sweep(steps, N_SUM, family="reduce", progress=False, check=True)
table(df, ["kernel", "params", "n", "ms", "gbps", "launches", "max_rel_error"])
'''),
    code('''
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
    bs_rows = tm.plot._rows(bs)
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
'''),
    md("""
    `launches` counts kernel launches per call: the per-level version needs ⌈log₂ n⌉ of them,
    the multi-pass ones one per pass, the shuffle kernel one. On the emulator the differences
    are mostly launch and barrier costs on a CPU; run this notebook on a GPU to see the steps
    the lecture and Harris's slides describe.
    """),
]


NOTEBOOKS["08_write_your_own_kernel"] = [
    md("""
    # 08 · Write your own kernel

    The lectures end with "extend the code to handle rectangular matrices yourself". Here you do
    it: `tm.compile` takes CUDA C source text (the dialect of tiledmm's own kernels), compiles it
    (NVRTC on the GPU, the C++ compiler against the emulator on a laptop) and returns a kernel
    you launch on NumPy arrays with an explicit grid and block. It returns the same `Result` as
    `tm.matmul`: outputs, timing, launch facts. `tm.check_matmul` grades it on awkward shapes.
    """),
    code(SETUP),
    md("""
    ## The lecture's tiled kernel

    Square `Width x Width` matrices, `Width` a multiple of the tile: every thread loads one
    element of each tile, the block multiplies the tiles from shared memory.
    """),
    code('''
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
    '''),
    md("""
    ## Grading it on awkward shapes

    `tm.check_matmul(kernel, launch, ...)` runs the kernel over 1x1, non-multiples of the tile,
    tall, wide and empty problems and compares with NumPy. `launch(M, N, K)` gives the grid and
    block; `args` maps (A, B, C, M, N, K) to this kernel's parameters (it only has `Width`). On
    the emulator, `check=True` bounds-checks every pointer access and names the thread and
    block of the first one outside its array.
    """),
    code("""
    def launch(M, N, K):
        return ((N + 15) // 16, (M + 15) // 16), (16, 16)

    report = tm.check_matmul(square, launch, args=lambda A, B, C, M, N, K: (A, B, C, N),
                             check=not ON_GPU)
    print(f"{len(report.failures)} of {len(report.rows)} shapes fail")
    report
    """),
    md("""
    ## The rectangular kernel

    Three changes: `A` is `M x K` and `B` is `K x N`, so each index uses its own width; the tile
    loop runs `ceil(K / TILE)` times; threads load `0` for elements outside the matrices (the
    tile's products then add nothing) and write `C` only inside it. The barriers stay outside
    every `if`: all threads of a block must reach them.
    """),
    code('''
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
    '''),
    md("""
    ## Timed beside tiledmm's `tiled` and cuBLAS

    The same events time your kernel and the built-in ones (on the emulator these are CPU
    times: compare kernels with each other, not with a GPU).
    """),
    code("""
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
    """),
    md("""
    ## Your turn

    - Make `TILE` a compile-time option: `tm.compile(RECT.replace("#define TILE 16", ""),
      defines={"TILE": 32})` and launch 32 x 32 blocks. Which is faster here, and why
      (notebook 03)?
    - Move a `__syncthreads()` inside `if (row < M && col < N)`: the emulator reports the
      barrier that not every thread reaches, with the block and the line.
    - Write a reduction and grade it with `tm.check_reduce(kernel, lambda n: (grid, block,
      shared_bytes))`.
    """),
]

def notebook(cells):
    out = []
    for kind, text in cells:
        cell = {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True)}
        if kind == "code":
            cell["execution_count"] = None
            cell["outputs"] = []
        out.append(cell)
    return {
        "cells": out,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def build(name):
    """The notebook `name` (a key of NOTEBOOKS) as a dict, cells numbered."""
    nb = notebook(NOTEBOOKS[name])
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"{name[:2]}-{i:02d}"
    return nb


def main():
    for name in NOTEBOOKS:
        nb = build(name)
        path = os.path.join(HERE, name + ".ipynb")
        with open(path, "w") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print("wrote", os.path.relpath(path))


if __name__ == "__main__":
    main()
