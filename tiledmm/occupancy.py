"""tm.occupancy: how many blocks of a kernel fit on one multiprocessor (SM), and what stops more.

    tm.occupancy("tiled", tile=32)                 # the current device, from a real launch
    tm.occupancy(res)                              # a Result's launch (registers too on cuda)
    tm.occupancy("tiled", tile=32, device="GM204") # a lecture GPU (presets below)
    tm.occupancy(threads_per_block=256, shared_bytes=2048, device="GM107")
    tm.occupancy.max_tile_size("GM204")            # the lecture's worksheet, answered

A block is resident on an SM only when the SM has room for all of it at once: its threads (in
whole warps), a block slot, its shared memory and its registers. The smallest of the four
counts is the number of resident blocks, and the resource that gives it is the *limiting*
one. This is the arithmetic of NVIDIA's occupancy calculator (allocation granularities
included); on the `cuda` backend it agrees with `cudaOccupancyMaxActiveBlocksPerMultiprocessor`,
which is what `res.launch.blocks_per_sm` reports.

Presets: the lectures' GPUs (G80, GM107, GM204: limits from the lectures where they give them,
the rest from the compute-capability tables of the CUDA C Programming Guide, cc 1.0, 5.0 and
5.2) and current ones (T4 cc 7.5, A100 cc 8.0, H100 and H200 cc 9.0, and the hosted
notebooks' and desktops' L4 and RTX 4090 cc 8.9, A10G and RTX 3090 cc 8.6). `peak_gflops` and
`bandwidth_gbs` are the vendors' data-sheet figures of one board of each chip (named in
`board`), for the traffic model's rooflines.
"""
import math
import sys
import types
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import numpy as np

from . import _families, _registry

__all__ = ["occupancy", "Occupancy", "PRESETS", "preset", "preset_for", "device_limits",
           "max_tile_size", "tile_table", "RESOURCES"]

# The four per-SM resources, in the order a tie is reported.
RESOURCES = ("threads", "blocks", "shared_memory", "registers")

_KB = 1024


def _preset(name, cc, board, sms, max_threads_per_block, max_threads_per_sm, max_blocks_per_sm,
            shared_per_sm, shared_per_block, regs_per_sm, regs_per_block, max_regs_per_thread,
            peak_gflops, bandwidth_gbs, reserved_shared=0, shared_unit=256, reg_unit=256,
            reg_granularity="warp", warp_granularity=4, source=""):
    return dict(name=name, compute_capability=cc, board=board, multiprocessors=sms,
                max_threads_per_block=max_threads_per_block,
                max_threads_per_multiprocessor=max_threads_per_sm,
                max_blocks_per_multiprocessor=max_blocks_per_sm,
                shared_mem_per_multiprocessor=shared_per_sm,
                shared_mem_per_block_optin=shared_per_block,
                regs_per_multiprocessor=regs_per_sm, regs_per_block=regs_per_block,
                max_registers_per_thread=max_regs_per_thread, warp_size=32,
                reserved_shared_mem_per_block=reserved_shared,
                shared_alloc_unit=shared_unit, reg_alloc_unit=reg_unit,
                reg_alloc_granularity=reg_granularity, warp_alloc_granularity=warp_granularity,
                peak_gflops=peak_gflops, bandwidth_gbs=bandwidth_gbs, source=source)


PRESETS: Dict[str, dict] = {
    # Lecture 003 ("G80 Shared Memory and Threading"): 16 KB shared memory per SM, 16 SMs,
    # 512 threads per block, 86.4 GB/s, "~340 GFLOPS"; the rest from the cc 1.0 table.
    "G80": _preset("G80", (1, 0), "GeForce 8800 GTX", 16, 512, 768, 8, 16 * _KB, 16 * _KB,
                   8192, 8192, 124, 340.0, 86.4, shared_unit=512, reg_unit=256,
                   reg_granularity="block", warp_granularity=2,
                   source="lecture 003; CUDA C Programming Guide, compute capability 1.0"),
    # Lecture 000 ("Shared Memory and Threading"): 64 KB shared memory per SM, 48 KB per block,
    # 2,048 threads per SM; the rest from the cc 5.0 table.
    "GM107": _preset("GM107", (5, 0), "GeForce GTX 750 Ti", 5, 1024, 2048, 32, 64 * _KB,
                     48 * _KB, 65536, 65536, 255, 1306.0, 86.4,
                     source="lecture 000; CUDA C Programming Guide, compute capability 5.0"),
    # The worksheet's GPU (lecture 000, "Maxwell GM204 used in Lab3"): cc 5.2 table.
    "GM204": _preset("GM204", (5, 2), "GeForce GTX 980", 16, 1024, 2048, 32, 96 * _KB,
                     48 * _KB, 65536, 65536, 255, 4612.0, 224.0,
                     source="CUDA C Programming Guide, compute capability 5.2"),
    "T4": _preset("T4", (7, 5), "Tesla T4", 40, 1024, 1024, 16, 64 * _KB, 64 * _KB, 65536,
                  65536, 255, 8141.0, 320.0,
                  source="CUDA C Programming Guide, compute capability 7.5"),
    "A100": _preset("A100", (8, 0), "A100-SXM4-40GB", 108, 1024, 2048, 32, 164 * _KB,
                    163 * _KB, 65536, 65536, 255, 19500.0, 1555.0, reserved_shared=1 * _KB,
                    shared_unit=128,
                    source="CUDA C Programming Guide, compute capability 8.0"),
    "H100": _preset("H100", (9, 0), "H100 SXM5 80GB", 132, 1024, 2048, 32, 228 * _KB,
                    227 * _KB, 65536, 65536, 255, 66900.0, 3350.0, reserved_shared=1 * _KB,
                    shared_unit=128,
                    source="CUDA C Programming Guide, compute capability 9.0"),
    # The GPU tiledmm's benchmarks run on: the H100's SM (cc 9.0, 132 SMs, by
    # cudaGetDeviceProperties) with 141 GB of HBM3e at 4.8 TB/s (data sheet).
    "H200": _preset("H200", (9, 0), "H200 SXM 141GB", 132, 1024, 2048, 32, 228 * _KB,
                    227 * _KB, 65536, 65536, 255, 66900.0, 4800.0, reserved_shared=1 * _KB,
                    shared_unit=128,
                    source="CUDA C Programming Guide, compute capability 9.0; H200 data sheet"),
    # Hosted notebooks' GPUs (Colab, cloud notebooks) and the common desktop boards:
    # cc 8.6 and 8.9 tables (1,536 threads and 100 KB of shared memory per SM; 16 or 24
    # blocks), FP32 peak and bandwidth from each board's data sheet.
    "L4": _preset("L4", (8, 9), "NVIDIA L4", 58, 1024, 1536, 24, 100 * _KB, 99 * _KB, 65536,
                  65536, 255, 30300.0, 300.0, reserved_shared=1 * _KB, shared_unit=128,
                  source="CUDA C Programming Guide, compute capability 8.9; L4 data sheet"),
    "A10G": _preset("A10G", (8, 6), "NVIDIA A10G", 80, 1024, 1536, 16, 100 * _KB, 99 * _KB,
                    65536, 65536, 255, 31200.0, 600.0, reserved_shared=1 * _KB,
                    shared_unit=128,
                    source="CUDA C Programming Guide, compute capability 8.6; A10G data sheet"),
    "RTX4090": _preset("RTX4090", (8, 9), "GeForce RTX 4090", 128, 1024, 1536, 24, 100 * _KB,
                       99 * _KB, 65536, 65536, 255, 82600.0, 1008.0, reserved_shared=1 * _KB,
                       shared_unit=128,
                       source="CUDA C Programming Guide, compute capability 8.9; RTX 4090 "
                              "data sheet"),
    "RTX3090": _preset("RTX3090", (8, 6), "GeForce RTX 3090", 82, 1024, 1536, 16, 100 * _KB,
                       99 * _KB, 65536, 65536, 255, 35600.0, 936.0, reserved_shared=1 * _KB,
                       shared_unit=128,
                       source="CUDA C Programming Guide, compute capability 8.6; RTX 3090 "
                              "data sheet"),
}


# What tm.profile's time model (Profile.predict, docs/profile.md) needs beyond the occupancy
# limits. Clocks, L2 sizes and FP32 issue from the vendors' data sheets; L2 bandwidth and
# latencies are round figures of published microbenchmarks (Chips and Cheese; Luo et al.,
# "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture", 2024); the same-address
# atomic rate and the launch overhead are what tiledmm's atomic_per_element and per_level
# kernels show on the H100 (benchmarks/results/h100_all_families.csv). The call overhead is
# the floor of one event-timed call there (the fastest 2^20 reductions take 8.5-12 us, of
# which DRAM needs 1.3 us and the launch 3 us); warps_to_fill_scheduler is the common rule that
# a scheduler hides its instructions' dependent latency with about four warps to choose from.
MODEL_KEYS = ("clock_ghz", "l2_bytes", "l2_bandwidth_gbs", "l2_latency_ns", "dram_latency_ns",
              "issue_per_clock_per_sm", "memory_parallelism", "same_address_atomics_per_s",
              "launch_overhead_us", "call_overhead_us", "warps_to_fill_scheduler")
_MODEL_FIGURES = {
    "H100": dict(clock_ghz=1.98, l2_bytes=50 * _KB * _KB, l2_bandwidth_gbs=5500.0,
                 l2_latency_ns=140.0, dram_latency_ns=500.0, issue_per_clock_per_sm=4,
                 memory_parallelism=4.0, same_address_atomics_per_s=5.7e8,
                 launch_overhead_us=3.0, call_overhead_us=6.0, warps_to_fill_scheduler=4),
    "A100": dict(clock_ghz=1.41, l2_bytes=40 * _KB * _KB, l2_bandwidth_gbs=4000.0,
                 l2_latency_ns=200.0, dram_latency_ns=550.0, issue_per_clock_per_sm=4,
                 memory_parallelism=4.0, same_address_atomics_per_s=4.5e8,
                 launch_overhead_us=3.0, call_overhead_us=6.0, warps_to_fill_scheduler=4),
}
# The other presets' model figures: clock and L2 size from the data sheets (the H200's L2 as
# cudaGetDeviceProperties gives it, 62,914,560 B), L2 bandwidth and latencies round figures of
# the same microbenchmark sources for Ampere and Ada; the same-address atomic rate and the
# overheads are the H100's, the atomic rate scaled by the clock. Leads, not measurements: only
# the H100's and H200's predictions have been set beside measured times.


def _model(clock_ghz, l2_mib, l2_bandwidth_gbs, l2_latency_ns, dram_latency_ns):
    h100 = _MODEL_FIGURES["H100"]
    return dict(h100, clock_ghz=clock_ghz, l2_bytes=int(l2_mib * _KB * _KB),
                l2_bandwidth_gbs=l2_bandwidth_gbs, l2_latency_ns=l2_latency_ns,
                dram_latency_ns=dram_latency_ns,
                same_address_atomics_per_s=h100["same_address_atomics_per_s"] * clock_ghz
                / h100["clock_ghz"])


_MODEL_FIGURES.update(
    H200=_model(1.98, 60, 5500.0, 140.0, 500.0),
    L4=_model(2.04, 48, 1600.0, 230.0, 600.0),
    A10G=_model(1.71, 6, 2000.0, 200.0, 550.0),
    RTX4090=_model(2.52, 72, 5000.0, 150.0, 550.0),
    RTX3090=_model(1.695, 6, 2500.0, 200.0, 550.0),
)
for _name, _figures in _MODEL_FIGURES.items():
    PRESETS[_name].update(_figures)
MODEL_PRESETS = tuple(_MODEL_FIGURES)


def _key(name):
    return str(name).lower().replace(" ", "").replace("-", "").replace("_", "")


def preset(name):
    """The limits of a named GPU (case, spaces and dashes ignored: "RTX 4090" is RTX4090): one
    of PRESETS' keys."""
    for key, value in PRESETS.items():
        if _key(key) == _key(name):
            return dict(value)
    raise ValueError(f"unknown device preset {name!r}; choose one of {', '.join(PRESETS)} "
                     "(or None for the current device, or a dict of limits)")


def preset_for(device_name, compute_capability):
    """The preset of a real GPU, matched by its name (cudaGetDeviceProperties' "NVIDIA H200",
    "NVIDIA GeForce RTX 4090", ...) and its compute capability, or None. Longer preset names
    are tried first, so that "A100" is not taken for an "A10"."""
    name = _key(device_name)
    for key in sorted(PRESETS, key=len, reverse=True):
        if _key(key) in name and tuple(PRESETS[key]["compute_capability"]) == \
                tuple(compute_capability):
            return key
    return None


def device_limits(device=None, backend=None):
    """Per-SM limits as a dict: a preset's (device='GM204'), a dict given as is (missing keys
    taken from H100), or the current device's from tm.device_info() (device=None)."""
    if isinstance(device, dict):
        limits = dict(PRESETS["H100"], name="custom", peak_gflops=None, bandwidth_gbs=None)
        limits.update(device)
        return limits
    if device is not None:
        return preset(device)
    from ._device import device_info
    info = device_info(backend=backend)
    cc = tuple(info["compute_capability"])
    emu = info["backend"] == "emu"
    # cc 8.0 and newer reserve 1 KB of shared memory per block for the system; the emulator's
    # occupancy API counts the same (it emulates an H100-sized SM).
    reserved = 1 * _KB if emu or cc >= (8, 0) else 0
    limits = dict(
        name=info["name"], compute_capability=cc, board=info["name"],
        multiprocessors=info["multiprocessors"],
        max_threads_per_block=info["max_threads_per_block"],
        max_threads_per_multiprocessor=info["max_threads_per_multiprocessor"],
        max_blocks_per_multiprocessor=info["max_blocks_per_multiprocessor"],
        shared_mem_per_multiprocessor=info["shared_mem_per_multiprocessor"],
        shared_mem_per_block_optin=max(info["shared_mem_per_block_optin"],
                                       info["shared_mem_per_block"]),
        regs_per_multiprocessor=info["regs_per_multiprocessor"],
        regs_per_block=info["regs_per_block"], max_registers_per_thread=255,
        warp_size=info["warp_size"], reserved_shared_mem_per_block=reserved,
        # The emulator allocates exactly; real GPUs round up (128 B shared from cc 8.0 on).
        shared_alloc_unit=1 if emu else (128 if cc >= (8, 0) else 256),
        reg_alloc_unit=256, reg_alloc_granularity="warp", warp_alloc_granularity=4,
        peak_gflops=(info["peak_fp32_tflops"] * 1e3 if info.get("peak_fp32_tflops") else None),
        bandwidth_gbs=info.get("peak_bandwidth_gbs"), source=f"tm.device_info() ({info['backend']})")
    return limits


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM and why. `limits` gives the block count each resource alone
    would allow (None: no limit from it, e.g. registers unknown on the emulator)."""
    device: str
    threads_per_block: int
    shared_bytes: int
    registers_per_thread: Optional[int]
    blocks_per_sm: int
    limited_by: str
    limits: Dict[str, Optional[int]] = field(repr=False)
    active_threads: int = 0
    max_threads_per_sm: int = 0
    kernel: Optional[str] = None
    params: Dict[str, int] = field(default_factory=dict, repr=False)
    reason: str = ""

    @property
    def occupancy(self):
        """Resident threads (in whole warps) over the SM's maximum."""
        return self.active_threads / self.max_threads_per_sm if self.max_threads_per_sm else 0.0

    @property
    def active_warps(self):
        return self.active_threads // 32

    @property
    def tied(self):
        """Every per-SM resource that allows exactly blocks_per_sm blocks."""
        return tuple(r for r in RESOURCES if self.limits.get(r) == self.blocks_per_sm)

    def as_dict(self):
        row = dict(device=self.device, kernel=self.kernel, **self.params,
                   threads_per_block=self.threads_per_block, shared_bytes=self.shared_bytes,
                   registers_per_thread=self.registers_per_thread,
                   blocks_per_sm=self.blocks_per_sm, occupancy=self.occupancy,
                   limited_by=self.limited_by)
        for r in RESOURCES:
            row[f"by_{r}"] = self.limits.get(r)
        return row

    def __str__(self):
        what = self.kernel or "block"
        if self.params:
            what += " " + " ".join(f"{k}={v}" for k, v in self.params.items())
        head = (f"{what} on {self.device}: {self.threads_per_block} threads, "
                f"{self.shared_bytes:,} B shared")
        if self.registers_per_thread:
            head += f", {self.registers_per_thread} registers/thread"
        if self.blocks_per_sm == 0:
            return f"{head} -> does not fit: {self.reason}"
        per = ", ".join(f"{r.replace('_', ' ')} {'-' if v is None else v}"
                        for r, v in self.limits.items())
        return (f"{head} -> {self.blocks_per_sm} blocks/SM ({self.active_threads} threads, "
                f"occupancy {self.occupancy:.0%}), limited by {self.limited_by.replace('_', ' ')}"
                f" [blocks allowed by {per}]")


def _round_up(x, unit):
    return -(-x // unit) * unit if unit > 1 else x


def compute(threads_per_block, shared_bytes=0, registers_per_thread=None, device=None,
            backend=None, kernel=None, params=None):
    """Occupancy of a block shape on a device (see the module docstring)."""
    lim = device_limits(device, backend)
    threads = int(threads_per_block)
    shared = int(shared_bytes or 0)
    regs = int(registers_per_thread) if registers_per_thread else None
    if threads < 1:
        raise ValueError(f"threads_per_block must be >= 1, got {threads_per_block!r}")
    warp = lim["warp_size"]
    warps = -(-threads // warp)
    common = dict(device=lim["name"], threads_per_block=threads, shared_bytes=shared,
                  registers_per_thread=regs, max_threads_per_sm=lim["max_threads_per_multiprocessor"],
                  kernel=kernel, params=dict(params or {}))

    def none_fit(resource, reason):
        return Occupancy(blocks_per_sm=0, limited_by=resource, reason=reason,
                         limits={r: (0 if r == resource.split("_per_")[0] else None)
                                 for r in RESOURCES}, **common)

    if threads > lim["max_threads_per_block"]:
        return none_fit("threads_per_block",
                        f"{threads} threads per block > the limit of {lim['max_threads_per_block']}")
    if shared > lim["shared_mem_per_block_optin"]:
        return none_fit("shared_memory_per_block",
                        f"{shared:,} B shared per block > the limit of "
                        f"{lim['shared_mem_per_block_optin']:,} B")
    if regs and regs > lim["max_registers_per_thread"]:
        return none_fit("registers_per_thread",
                        f"{regs} registers per thread > the limit of "
                        f"{lim['max_registers_per_thread']}")

    limits = {}
    limits["threads"] = lim["max_threads_per_multiprocessor"] // (warps * warp)
    limits["blocks"] = lim["max_blocks_per_multiprocessor"]
    if shared > 0:
        per_block = _round_up(shared + lim["reserved_shared_mem_per_block"], lim["shared_alloc_unit"])
        limits["shared_memory"] = lim["shared_mem_per_multiprocessor"] // per_block
    else:
        limits["shared_memory"] = None
    if regs:
        if lim["reg_alloc_granularity"] == "block":   # cc 1.x: registers allocated per block
            per_block = _round_up(_round_up(warps, lim["warp_alloc_granularity"]) * warp * regs,
                                  lim["reg_alloc_unit"])
            limits["registers"] = (lim["regs_per_multiprocessor"] // per_block
                                   if per_block <= lim["regs_per_block"] else 0)
        else:                                         # cc >= 2: per warp
            per_warp = _round_up(regs * warp, lim["reg_alloc_unit"])
            if per_warp * warps > lim["regs_per_block"]:
                limits["registers"] = 0
            else:
                warps_by_regs = lim["regs_per_block"] // per_warp
                warps_by_regs -= warps_by_regs % lim["warp_alloc_granularity"]
                limits["registers"] = ((warps_by_regs // warps)
                                       * (lim["regs_per_multiprocessor"] // lim["regs_per_block"]))
    else:
        limits["registers"] = None
    blocks = min(v for v in limits.values() if v is not None)
    limited_by = next(r for r in RESOURCES if limits[r] == blocks)
    reason = ""
    if blocks == 0:
        reason = f"the block's {limited_by.replace('_', ' ')} exceed one SM's"
    return Occupancy(blocks_per_sm=blocks, limited_by=limited_by, limits=limits, reason=reason,
                     active_threads=blocks * warps * warp, **common)


# Per registry family, the problem size _launch_facts runs when the caller gives none, as a
# number of elements (matmul: the edge n of an n x n x n product; elementwise: a 256 x 256
# problem, or size x size).
_LAUNCH_FACTS_ELEMENTS = {"matmul": lambda size: size or 64,
                          "reduce": lambda size: size or 1 << 14,
                          "elementwise": lambda size: (size or 256) ** 2}


def _launch_facts(kernel, params, size, dtype, backend):
    """Run `kernel` once on a small problem to read its launch (block, shared bytes,
    registers). Launch shapes do not depend on the size for most kernels; `size` matters
    for kernels that choose a configuration by size (fast config=0)."""
    row = _families.family_of(kernel)   # ValueError naming the kernels for an unknown one
    rng = np.random.default_rng(0)
    problem = row.elements_size(_LAUNCH_FACTS_ELEMENTS[_registry.specs()[kernel].family](size))
    inputs = row.inputs(problem, lambda shape: rng.random(shape).astype(dtype))
    return row.call(*inputs, kernel=kernel, backend=backend, warmup=0, repeat=1, **params)


def occupancy(kernel=None, *, device=None, threads_per_block=None, shared_bytes=None,
              registers_per_thread=None, size=None, dtype=np.float32, backend=None, **params):
    """Resident blocks per SM of a kernel's blocks, and the limiting resource.

    Args:
        kernel: a registered kernel name (its launch is read from one small run on `backend`,
            with `params` such as tile=32), a Result (its launch is used as is), or None
            (give threads_per_block, shared_bytes and optionally registers_per_thread).
        device: None for the current device (tm.device_info()), a preset name ('G80', 'GM107',
            'GM204', 'T4', 'A100', 'H100', 'H200', 'L4', 'A10G', 'RTX4090', 'RTX3090') or a
            dict of limits.
        threads_per_block: with shared_bytes and registers_per_thread, overrides what the
            launch says (registers are unknown on the emulator: give them to see their effect).

    >>> occ = tm.occupancy(threads_per_block=256, shared_bytes=2048, device="GM204")
    >>> occ.blocks_per_sm, occ.limited_by
    (8, 'threads')
    >>> tm.occupancy("tiled", tile=32, device="G80", backend="emu").limited_by
    'threads_per_block'
    >>> tm.occupancy.max_tile_size("GM204")["tile"]
    32

    Returns an Occupancy: blocks_per_sm, limited_by ('threads', 'blocks', 'shared_memory',
    'registers'; or 'threads_per_block', 'shared_memory_per_block', 'registers_per_thread'
    when one block alone does not fit), limits (blocks each resource allows), occupancy.
    """
    facts_threads = facts_shared = facts_regs = None
    name = None
    run_params = dict(params)
    if kernel is not None and not isinstance(kernel, str):   # a Result
        res = kernel
        name, run_params = res.kernel, dict(res.params)
        facts_threads = res.launch.threads_per_block
        facts_shared, facts_regs = res.launch.shared_bytes, res.launch.registers
    elif kernel is not None:
        if threads_per_block is None or shared_bytes is None:
            res = _launch_facts(kernel, params, size, dtype, backend)
            run_params = dict(res.params)
            facts_threads = res.launch.threads_per_block
            facts_shared, facts_regs = res.launch.shared_bytes, res.launch.registers
        name = kernel
    threads = threads_per_block if threads_per_block is not None else facts_threads
    if threads is None:
        raise ValueError("give a kernel (name or Result) or threads_per_block")
    shared = shared_bytes if shared_bytes is not None else (facts_shared or 0)
    regs = registers_per_thread if registers_per_thread is not None else facts_regs
    return compute(threads, shared, regs, device=device, backend=backend, kernel=name,
                   params=run_params)


def tiled_block(tile, itemsize=4):
    """(threads per block, shared bytes) of the lectures' tiled kernel with TILE x TILE tiles:
    TILE^2 threads and two TILE x TILE tiles in shared memory."""
    return tile * tile, 2 * tile * tile * itemsize


def tile_table(device, tiles=(4, 8, 16, 32, 64), itemsize=4, registers_per_thread=None):
    """One row per tile size of the tiled kernel on `device`: threads, shared bytes, resident
    blocks, threads per SM, limiting resource, and the factor global loads fall by (= TILE)."""
    rows = []
    for t in tiles:
        threads, shared = tiled_block(t, itemsize)
        occ = compute(threads, shared, registers_per_thread, device=device,
                      kernel="tiled", params={"tile": t})
        row = occ.as_dict()
        row["active_threads"] = occ.active_threads
        row["load_reduction"] = t
        rows.append(row)
    return rows


def max_tile_size(device="GM204", itemsize=4, registers_per_thread=None, powers_of_two=True,
                  limit=256):
    """The worksheet: the largest TILE for which the tiled kernel (TILE^2 threads, 2 TILE^2
    elements of shared memory per block) still has a resident block on `device`, what stops
    the next size, and the factor by which global loads fall against the naive kernel (TILE).
    Tiles are powers of two by default (full warps, shifts for indices); powers_of_two=False
    tries every integer.

    Returns a dict: tile, threads_per_block, shared_bytes, blocks_per_sm, limited_by (for that
    tile), next_tile and next_fails_on / next_reason (why the next size does not fit),
    load_reduction, and the Occupancy."""
    candidates = ([1 << i for i in range(limit.bit_length()) if 1 << i <= limit]
                  if powers_of_two else list(range(1, limit + 1)))
    best = None
    for t in candidates:
        threads, shared = tiled_block(t, itemsize)
        occ = compute(threads, shared, registers_per_thread, device=device,
                      kernel="tiled", params={"tile": t})
        if occ.blocks_per_sm == 0:
            if best is None:
                raise ValueError(f"not even a {t}x{t} tile fits on {device}")
            t0, o0 = best
            return dict(device=o0.device, tile=t0, threads_per_block=t0 * t0,
                        shared_bytes=2 * t0 * t0 * itemsize, blocks_per_sm=o0.blocks_per_sm,
                        limited_by=o0.limited_by, next_tile=t, next_fails_on=occ.limited_by,
                        next_reason=occ.reason, load_reduction=t0, occupancy=o0)
        best = (t, occ)
    raise ValueError(f"tiles up to {limit} all fit on {device}")


class _CallableModule(types.ModuleType):
    """`tm.occupancy(...)` calls `occupancy`; `tm.occupancy.max_tile_size` etc. still work."""

    def __call__(self, *args, **kwargs):
        return occupancy(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
