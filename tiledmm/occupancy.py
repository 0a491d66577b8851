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
`board`), for the traffic model's rooflines. The presets live in tiledmm/profiling/devices.py,
the arithmetic in tiledmm/profiling/occupancy_calculator.py (the time model uses both); this
module reads a kernel's launch and answers the lectures' questions.
"""
import sys
import types

import numpy as np

from . import _families, _registry
from .profiling.devices import (MODEL_KEYS, MODEL_PRESETS, PRESETS, device_limits,  # noqa: F401
                                preset, preset_for)
from .profiling.occupancy_calculator import RESOURCES, Occupancy, compute  # noqa: F401

__all__ = ["occupancy", "Occupancy", "PRESETS", "preset", "preset_for", "device_limits",
           "max_tile_size", "tile_table", "RESOURCES"]


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
