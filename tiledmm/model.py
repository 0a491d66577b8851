"""tm.model: the lectures' traffic and roofline arithmetic, to put predicted beside measured.

Global loads of C = A @ B (A is M x K, B is K x N), counted in elements:

- naive (lecture 000's simple kernel, lecture 001's "strawman"): every thread reads a row of A
  and a column of B, so 2*M*N*K loads; for N x N matrices 2N^3.
- tiled with T x T tiles (lecture 000/003; lecture 001's block tiling with L = T): a block
  loads each element of its A rows once per block-column of C and each element of its B
  columns once per block-row: M*K*ceil(N/T) + K*N*ceil(M/T) = 2N^3/T.
- register-tiled, V x V outputs per thread straight from global memory (lecture 001,
  "Optimization 1"): 2N^3/V, the same formula with V.

Every load is `itemsize` bytes (4 for float32). A multiply-add is 2 floating-point operations,
so the naive kernel does 2 flops per 2 loads = 8 bytes: an arithmetic intensity of 1/4
FLOP/B, and a memory system of B GB/s caps it at B/4 GFLOP/s (lecture 000: 150 GB/s -> 37.5
GFLOP/s). Tiles of T reuse each load T times: (150/4)*16 = 600, (150/4)*32 = 1,200 GFLOP/s.
The roofline (Williams, Waterman and Patterson, 2009) adds the compute ceiling:
bound = min(peak, intensity x bandwidth).

`traffic_bytes(kernel, M, N, K, **params)` is the registry's own model of every registered
matmul kernel (loads plus the M*N stores of C), the C function a call's `res.model_bytes`
comes from (cuda/registry.cu's rows, the formulas in each kernel file), asked through the
extension module: one source, so the two cannot disagree. `fast`'s config 0 picks its tiles
from the device's multiprocessor count, so the model takes `sm_count=`.
"""
import math
import operator

from . import _backend, _registry

import numpy as np

from . import _core
from . import occupancy as _occ
from .profiling.time_model import compute_roof

__all__ = ["flops", "loads_naive", "loads_tiled", "loads_regtile", "loads_blocked",
           "traffic_bytes", "arithmetic_intensity", "lecture_intensity",
           "bandwidth_bound_gflops", "roofline", "ridge_point", "predicted", "compare",
           "compare_table", "block_tile", "device_peaks", "measure_bandwidth"]


def _dims(M, N, K):
    N = M if N is None else N
    K = M if K is None else K
    for name, v in (("M", M), ("N", N), ("K", K)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    return M, N, K


def _cdiv(a, b):
    return -(-a // b)


def flops(M, N=None, K=None):
    """Floating-point operations of an M x K @ K x N product: 2*M*N*K (one multiply and one add
    per term). One argument means square N x N."""
    M, N, K = _dims(M, N, K)
    return 2 * M * N * K


def loads_blocked(M, N=None, K=None, block_m=1, block_n=1):
    """Global loads (elements) when one unit of work (a thread, or a block sharing through
    shared memory) computes a block_m x block_n piece of C and reads each A and B element it
    needs once: A is read once per column of pieces, B once per row of pieces."""
    M, N, K = _dims(M, N, K)
    if block_m < 1 or block_n < 1:
        raise ValueError("block_m and block_n must be >= 1")
    return M * K * _cdiv(N, block_n) + K * N * _cdiv(M, block_m)


def loads_naive(M, N=None, K=None):
    """2*M*N*K: lecture 001's strawman, 2N^3 for square matrices."""
    return loads_blocked(M, N, K, 1, 1)


def loads_tiled(M, N=None, K=None, tile=16):
    """Shared-memory tiles of tile x tile: 2N^3/T for square N a multiple of T."""
    return loads_blocked(M, N, K, tile, tile)


def loads_regtile(M, N=None, K=None, V=4):
    """Each thread computes V x V outputs from global memory through registers: 2N^3/V."""
    return loads_blocked(M, N, K, V, V)


def _sm_count(sm_count, multiprocessors):
    """sm_count, or its older name multiprocessors; None: the running device's."""
    if sm_count is None:
        sm_count = multiprocessors
    elif multiprocessors is not None and multiprocessors != sm_count:
        raise ValueError(f"sm_count={sm_count} and multiprocessors={multiprocessors} disagree; "
                         "give one (multiprocessors is sm_count's older name)")
    if sm_count is None:
        return None
    try:
        count = None if isinstance(sm_count, bool) else operator.index(sm_count)
    except TypeError:
        count = None
    if count is None or count < 1:
        raise ValueError(f"sm_count must be a positive int (multiprocessors), got {sm_count!r}")
    return count


def _registry_model(kernel, M, N, K, sm_count, backend, params):
    """(elements moved, (bm, bn) or None): the registry's traffic model of a matmul kernel and
    its block tile, from the C functions of its row (csrc/module.c traffic_model), counted in
    elements of the dtype the kernel runs."""
    spec = _registry.lookup(kernel, "matmul")
    values = _registry.param_values(spec, params)
    bits = 32 if "float32" in spec.dtypes else 64
    mod = _backend.resolve(backend)[0]
    try:
        nbytes, tile = mod.traffic_model(kernel, bits, M, N, K, values, sm_count or 0)
    except RuntimeError as exc:   # no device to ask its multiprocessor count
        if sm_count is not None:
            raise
        raise RuntimeError(f"{exc}; or give sm_count= (the multiprocessors to model, e.g. 132 "
                           "for an H100 SXM)") from exc
    return round(nbytes) // (bits // 8), tile


def block_tile(kernel, M=None, N=None, K=None, multiprocessors=None, sm_count=None,
               backend=None, **params):
    """(block_m, block_n): the piece of C one block computes sharing its loads, for a
    registered matmul kernel and its parameters (None for cublas: unknown; cutlass: 128 x 256),
    as the kernel's file reports it (the registry row's block_tile). `fast` with config 0 picks
    by size and sm_count (default: the running device's, as traffic_bytes)."""
    M, N, K = _dims(M or 0, N, K)
    sms = _sm_count(sm_count, multiprocessors)
    return _registry_model(kernel, M, N, K, sms, backend, params)[1]


def traffic_bytes(kernel, M, N=None, K=None, itemsize=4, stores=True, multiprocessors=None,
                  sm_count=None, backend=None, **params):
    """Modelled global-memory bytes of a registered matmul kernel: loads (as the lectures
    count them) plus, with stores=True, the M*N stores of C. cublas and cutlass: the minimum
    (each input read once). colmajor_b includes its timed transpose of B (read + write K*N).

    This is the registry's model, the one a call reports as `res.model_bytes` (asked through
    the extension module of `backend`, default the current one), so for the same problem and
    parameters the two are equal. Parameters left out take the registry's defaults.

    sm_count: the multiprocessors `fast`'s config 0 chooses its tiles for (cuda/matmul_fast.cu,
    choose_fast_config), as the launcher does. Default: the running device's (on `emu`, the
    emulator's worker threads, tm._emu.threads()); give e.g. 132 for an H100 SXM.
    `multiprocessors` is its older name. itemsize: bytes per element (4: float32, 8: float64).

    >>> tm.model.traffic_bytes("tiled", 1024, tile=16)    # 4 * (2 * 1024**3 / 16 + 1024**2)
    541065216
    >>> tm.model.traffic_bytes("naive", 1024) == 4 * (2 * 1024**3 + 1024**2)
    True
    >>> tm.model.traffic_bytes("fast", 1024, config=4)    # 128 x 256 tiles: 4 * 13 * 1024**2
    54525952
    """
    M, N, K = _dims(M, N, K)
    sms = _sm_count(sm_count, multiprocessors)
    if isinstance(itemsize, bool) or not isinstance(itemsize, int) or itemsize < 1:
        raise ValueError(f"itemsize must be a positive int (bytes per element), got {itemsize!r}")
    elements = _registry_model(kernel, M, N, K, sms, backend, params)[0]
    return itemsize * (elements - (0 if stores else M * N))


def arithmetic_intensity(kernel, M, N=None, K=None, itemsize=4, **params):
    """FLOP per byte of modelled global traffic of a registered matmul kernel (params as
    traffic_bytes takes them, sm_count= included)."""
    M, N, K = _dims(M, N, K)
    return flops(M, N, K) / traffic_bytes(kernel, M, N, K, itemsize=itemsize, **params)


def lecture_intensity(tile=1, itemsize=4):
    """The lectures' per-operand view: 2 flops per 2 loads, each load reused `tile` times:
    tile / itemsize FLOP/B (naive float32: 0.25; 16 x 16 tiles: 4)."""
    return tile / itemsize


def bandwidth_bound_gflops(bandwidth_gbs=150.0, tile=1, itemsize=4):
    """The lectures' bound: (bandwidth / itemsize) * tile GFLOP/s.
    150 GB/s: 37.5 naive, 600 with 16 x 16 tiles, 1,200 with 32 x 32 (float32).

    >>> tm.model.bandwidth_bound_gflops(150), tm.model.bandwidth_bound_gflops(150, tile=32)
    (37.5, 1200.0)
    """
    return bandwidth_gbs / itemsize * tile


def roofline(intensity, peak_gflops=None, bandwidth_gbs=150.0):
    """min(peak, intensity x bandwidth) in GFLOP/s; without a peak, the memory bound alone."""
    memory = intensity * bandwidth_gbs
    return memory if peak_gflops is None else min(peak_gflops, memory)


def ridge_point(peak_gflops, bandwidth_gbs):
    """The intensity (FLOP/B) at which a kernel stops being memory-bound."""
    return peak_gflops / bandwidth_gbs


def device_peaks(device=None, backend=None, kernel=None, params=None):
    """(peak GFLOP/s, bandwidth GB/s) of a preset name, a dict, or the current device
    (None where unknown, as on the emulator). With a matmul `kernel` (and its `params`), the
    peak of the pipe its multiply-adds run on: the FP32 peak, or for the tensor-core rungs the
    dense tensor-core peak of their inputs (wmma precision=1 FP16, precision=0 TF32) and a
    third of TF32's for tf32x3 (three products per multiply-add).

    >>> tm.model.device_peaks("H100", kernel="wmma", params={"precision": 1})[0]   # FP32: 66,900
    989500.0
    """
    if isinstance(device, (tuple, list)):
        return tuple(device)
    lim = _occ.device_limits(device, backend)
    peak = (lim.get("peak_gflops") if kernel is None
            else compute_roof(kernel, params or {}, lim)[1])
    return peak, lim.get("bandwidth_gbs")


def measure_bandwidth(n=1 << 22, backend=None, repeat=None):
    """A measured bandwidth (GB/s) of the backend: vec_add's bytes (2 reads + 1 write per
    element) over its kernel time. On the emulator this is the only honest memory roof."""
    x = np.ones(n, dtype=np.float32)
    res = _core.vec_add(x, x, backend=backend, repeat=repeat)
    return res.gbps


def predicted(kernel, M, N=None, K=None, device=None, bandwidth_gbs=None, peak_gflops=None,
              itemsize=4, backend=None, **params):
    """The model's view of one matmul before running it: flops, traffic bytes, intensity and
    the roofline bound for a device (preset name, dict, None for the current one) or an
    explicit bandwidth/peak (the lecture's 150 GB/s with no peak: bandwidth_gbs=150). The
    device's peak is the kernel's pipe's (device_peaks): the tensor-core rungs' roofs are the
    tensor cores', not FP32's.

    >>> row = tm.model.predicted("tiled", 4096, bandwidth_gbs=150, tile=16)
    >>> row["bytes"] == tm.model.traffic_bytes("tiled", 4096, tile=16), row["bound_by"]
    (True, 'memory')
    """
    M, N, K = _dims(M, N, K)
    if bandwidth_gbs is None or (peak_gflops is None and device is not None):
        peak, bw = device_peaks(device, backend, kernel, params)
        bandwidth_gbs = bw if bandwidth_gbs is None else bandwidth_gbs
        peak_gflops = peak if peak_gflops is None else peak_gflops
    sms = None
    if kernel == "fast" and params.get("config", 0) == 0:
        try:
            sms = _occ.device_limits(device, backend)["multiprocessors"]
        except Exception:
            sms = None
    nbytes = traffic_bytes(kernel, M, N, K, itemsize=itemsize, sm_count=sms, backend=backend,
                           **params)
    f = flops(M, N, K)
    ai = f / nbytes if nbytes else math.inf
    row = dict(kernel=kernel, params=dict(params), M=M, N=N, K=K, flops=f, bytes=nbytes,
               intensity=ai, bandwidth_gbs=bandwidth_gbs, peak_gflops=peak_gflops)
    if bandwidth_gbs:
        memory = ai * bandwidth_gbs
        row["bound_gflops"] = roofline(ai, peak_gflops, bandwidth_gbs)
        row["bound_by"] = "memory" if peak_gflops is None or memory < peak_gflops else "compute"
    else:
        row["bound_gflops"] = None
        row["bound_by"] = None
    return row


def compare(result, device=None, bandwidth_gbs=None, peak_gflops=None):
    """Predicted beside measured for one Result: the registry's modelled bytes, intensity, the
    roofline bound for the device (default: the one it ran on; give bandwidth_gbs on the
    emulator, e.g. measure_bandwidth()), the measured GFLOP/s, the fraction of the bound, and
    the traffic the model implies per second (model_bytes over the kernel time). A call made
    with profile=True adds the counted traffic beside the model (see _counted)."""
    if bandwidth_gbs is None or (peak_gflops is None and device is not None):
        peak, bw = device_peaks(device, result.backend if device is None else None,
                                result.kernel, result.params)
        bandwidth_gbs = bw if bandwidth_gbs is None else bandwidth_gbs
        peak_gflops = peak if peak_gflops is None else peak_gflops
    ai = result.flops / result.model_bytes if result.model_bytes else math.inf
    bound = roofline(ai, peak_gflops, bandwidth_gbs) if bandwidth_gbs else None
    ms = result.timing.kernel_ms
    row = dict(kernel=result.kernel, params=" ".join(f"{k}={v}" for k, v in result.params.items()),
               backend=result.backend, flops=result.flops, model_bytes=result.model_bytes,
               intensity=ai, bound_gflops=bound, measured_gflops=result.gflops,
               fraction_of_bound=(result.gflops / bound if bound else None),
               model_gbps=(result.model_bytes / (ms * 1e6) if ms > 0 else math.nan))
    if result.profile is not None:
        row.update(_counted(result))
    return row


def _counted(result):
    """The traffic a profiled call counted (profile=True), beside the lecture's model_bytes:
    the bytes its lanes asked for (the lecture's count of loads and stores, as the hardware
    sees them), the bytes of the 32-byte sectors those requests touched (what moves between
    L1 and L2 when nothing hits in L1), and the compulsory bytes (inputs once, output once).
    From the emulator also the predicted H100 time; from Nsight Compute (source "ncu") the
    DRAM bytes it measured."""
    p = result.profile
    row = dict(counted_by=p.source, compulsory_bytes=result.min_bytes,
               counted_requested_bytes=p.global_load_bytes + p.global_store_bytes,
               counted_sector_bytes=p.global_bytes)
    if p.source == "emu":
        pred = p.predict("H100")
        row.update(predicted_h100_ms=pred.ms, predicted_bound=pred.bound)
    else:
        row.update(measured_dram_bytes=p.hardware.get("dram_bytes", math.nan))
    return row


def compare_table(results, device=None, bandwidth_gbs=None, peak_gflops=None):
    """compare() for several Results: a pandas DataFrame where pandas is installed, else a
    list of dicts."""
    rows = [compare(r, device, bandwidth_gbs, peak_gflops) for r in results]
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame(rows)
