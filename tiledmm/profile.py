"""Profile mode: what the GPU's memory system would count, counted on the CPU emulator.

    res = tm.matmul(A, B, kernel="tiled", tile=16, backend="emu", profile=True)
    res.profile.global_load_requests, res.profile.global_load_sectors_per_request
    res.profile.predict(device="H100")      # predicted GPU time and the bounding resource

`profile=True` runs the call as usual (its output and CPU timing are the normal ones) and then
runs the same launches once more in `tiledmm._emu_profile`, a build of the emulator whose
kernel objects are compiled with g++'s ThreadSanitizer instrumentation. Its hooks
(emu/profile/emu_profile.cpp) see every load and store the kernel source makes, classify it
as global (device memory) or shared, and count with Nsight Compute's definitions::

    counter                                                   Nsight Compute metric
    global_load_requests / global_store_requests              l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum / _st.sum
    global_load_sectors / global_store_sectors                l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / _st.sum
    shared_load_requests / shared_store_requests              smsp__sass_inst_executed_op_shared_ld.sum / _st.sum
    shared_load_bank_conflicts / shared_store_bank_conflicts  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum / _st.sum
    global_ldgsts_requests / global_ldgsts_sectors            l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum / l1tex__t_sectors_... (cp.async)
    divergent_branches                                        smsp__sass_branch_targets_threads_divergent.sum (branches of the source as GCC compiles it)

A warp instruction is the k-th execution of one access of the kernel code (one program
counter; of one kind: global load, global store, shared load, shared store, cp.async) by each
of its 32 lanes between two barriers, so lanes that skip an access are inactive in it; lanes
are threads 32w..32w+31 of the block in x-major order. The counts follow the kernel source:
where nvcc merges a thread's adjacent accesses into one wider instruction (tiled's four
A_tile[ty][k] reads become one LDS.128), ncu counts fewer shared requests than this. See
docs/profile.md.

Above the validation sizes (matmul beyond 256^3) the profiled run samples blocks and scales
the counts; `Profile.sampled` and `Profile.sample_stride` say so.
"""
import ctypes
import importlib
import math
from dataclasses import dataclass, field, fields
from typing import Dict, Optional

import numpy as np

__all__ = ["Profile", "Prediction", "count", "collect", "available", "row_fields",
           "counted_row_fields", "lesson_table", "LESSON_SIZES",
           "VALIDATION_MATMUL_VOLUME"]

# Matmuls up to this M*N*K are profiled in full; larger ones sample about one block in
# ceil(M*N*K / this) per launch. Reductions and elementwise kernels are always profiled in full
# (data-dependent control flow such as a last-block ticket needs every block).
VALIDATION_MATMUL_VOLUME = 256 ** 3

# Launchers that size their grid by the device's multiprocessor count (the grid-stride
# reductions, fast's choice of tile) see this many in the profiled run: the H100's 132, so the
# counted launches are the ones an H100 runs (the emulator itself reports its worker threads).
GRID_SMS = 132

_lib = None
_mod = None
_names = None


def _load():
    global _lib, _mod, _names
    if _lib is None:
        try:
            _mod = importlib.import_module("tiledmm._emu_profile")
        except ImportError as exc:
            raise RuntimeError(
                "profile=True needs tiledmm._emu_profile, which this build of tiledmm does not "
                "have (built with TILEDMM_NO_PROFILE=1 or TILEDMM_EMU_ASAN=1); rebuild without "
                f"them (import error: {exc})") from None
        _lib, _names = bind(ctypes.CDLL(_mod.__file__))
    return _lib, _mod


def bind(lib):
    """The profiling hooks' C interface of a library that has them (tiledmm._emu_profile, or a
    user kernel's profile build): (lib with argtypes set, counter names in order)."""
    lib.tm_profile_fields.restype = ctypes.c_char_p
    lib.tm_profile_begin.argtypes = [ctypes.c_longlong, ctypes.c_int]
    lib.tm_profile_end.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_int]
    lib.tm_profile_end.restype = ctypes.c_int
    lib.tm_profile_add_range.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    lib.tm_profile_remove_range.argtypes = [ctypes.c_size_t]
    return lib, lib.tm_profile_fields().decode().strip(",").split(",")


def counted_run(lib, names, ranges, run, stride=1):
    """run() with the hooks of `lib` counting; `ranges`: (address, bytes) of the arguments'
    memory (global memory besides the emulator's own allocations). Returns (run()'s value,
    {counter: value})."""
    for address, nbytes in ranges:
        lib.tm_profile_add_range(address, nbytes)
    lib.tm_profile_begin(stride, GRID_SMS)
    out = (ctypes.c_double * len(names))()
    try:
        value = run()
    finally:
        lib.tm_profile_end(out, len(names))
        for address, _ in ranges:
            lib.tm_profile_remove_range(address)
    return value, dict(zip(names, out))


def available():
    """Whether profile mode was built (tiledmm._emu_profile imports)."""
    try:
        _load()
        return True
    except RuntimeError:
        return False


@dataclass(frozen=True)
class Prediction:
    """A predicted GPU kernel time for the counted traffic (Profile.predict).

    `ms` is the predicted time of the call's launches, `bound` the resource that bounds it
    ("DRAM", "L2", "shared memory", "L1/LSU", "FP32 issue", "atomics", "latency/occupancy"
    or "launch overhead"), `times_ms` each resource's own time, `device` the preset used, and
    `occupancy` the resident blocks per SM the model assumed. `device_chosen_because` says why
    that preset, when predict() was given none."""
    ms: float
    bound: str
    times_ms: Dict[str, float]
    device: str
    occupancy: object
    device_chosen_because: str = ""

    def __repr__(self):
        why = f" ({self.device_chosen_because})" if self.device_chosen_because else ""
        return f"<Prediction {self.ms:.4g} ms on {self.device}{why}, bound by {self.bound}>"


@dataclass(frozen=True)
class Profile:
    """Counters of one profiled call, summed over its launches (see the module docstring).

    Counts are warp-level (requests = warp instructions), except `global_atomics` and
    `shared_atomics` (thread-level operations that took effect) and the `_bytes` fields (bytes
    the lanes asked for). `global_atomic_max_same_address` is the most atomics one address got
    in one launch (summed over launches). When `sampled` is true, about one block in
    `sample_stride` of each launch ran and the counts are scaled by blocks / blocks profiled
    (`blocks_profiled`, `threads_profiled` and `warps_profiled` are not scaled).
    `global_load_sectors_block_merged` is no ncu metric but the time model's L1 estimate: the
    sectors of each k-th global load merged over the warps of a block (what is left when the
    block's warps share what they load at about the same time). `global_load_lines` and
    `global_store_lines` count the distinct 128-byte lines of each request (L1's wavefronts in
    the model). `global_ldgsts_requests` / `_sectors` count cp.async (one per call, as on
    sm_80+), `divergent_branches` the warp-level branches whose lanes go more than one way."""
    launches: int
    blocks: int
    blocks_profiled: int
    threads_profiled: int
    warps_profiled: int
    global_load_requests: float
    global_load_sectors: float
    global_load_bytes: float
    global_load_sectors_block_merged: float
    global_load_lines: float
    global_store_lines: float
    global_store_requests: float
    global_store_sectors: float
    global_store_bytes: float
    shared_load_requests: float
    shared_load_wavefronts: float
    shared_load_bank_conflicts: float
    shared_store_requests: float
    shared_store_wavefronts: float
    shared_store_bank_conflicts: float
    global_atomic_requests: float
    global_atomics: float
    global_atomic_max_same_address: float
    shared_atomic_requests: float
    shared_atomics: float
    barriers: float
    warp_ops: float
    global_ldgsts_requests: float
    global_ldgsts_sectors: float
    divergent_branches: float
    sampled: bool = False
    sample_stride: int = 1
    # What the model needs from the call (not counted): filled by collect().
    kernel: str = ""
    params: Dict[str, object] = field(default_factory=dict)
    family: str = ""
    threads_per_block: int = 0
    shared_bytes: int = 0
    flops: float = 0.0
    min_bytes: float = 0.0
    itemsize: int = 4
    # Who counted: "emu" (this module's profiled run) or "ncu" (Nsight Compute on the GPU,
    # tiledmm._ncu: counters without an ncu metric are NaN there). `hardware` holds what ncu
    # measured beside the counters (gpu_time_ns, dram_bytes, l2_sectors_from_l1, ...).
    source: str = "emu"
    hardware: Dict[str, float] = field(default_factory=dict)

    # ---- derived ----
    @property
    def global_load_sectors_per_request(self):
        """Sectors per global load request: 1 to 4 for coalesced 4-byte loads, up to 32."""
        return _ratio(self.global_load_sectors, self.global_load_requests)

    @property
    def global_store_sectors_per_request(self):
        return _ratio(self.global_store_sectors, self.global_store_requests)

    @property
    def sectors_per_request(self):
        """Global load and store sectors per request together."""
        return _ratio(self.global_load_sectors + self.global_store_sectors,
                      self.global_load_requests + self.global_store_requests)

    @property
    def shared_load_conflicts_per_request(self):
        return _ratio(self.shared_load_bank_conflicts, self.shared_load_requests)

    @property
    def shared_store_conflicts_per_request(self):
        return _ratio(self.shared_store_bank_conflicts, self.shared_store_requests)

    @property
    def global_bytes(self):
        """Bytes moved between L1 and L2 if nothing hit in L1: 32 per sector."""
        return 32.0 * (self.global_load_sectors + self.global_store_sectors)

    def as_dict(self):
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(global_load_sectors_per_request=self.global_load_sectors_per_request,
                 global_store_sectors_per_request=self.global_store_sectors_per_request,
                 shared_load_conflicts_per_request=self.shared_load_conflicts_per_request)
        return d

    def predict(self, device=None):
        """Predicted GPU time of these launches on a device preset (tm.occupancy.PRESETS) from
        the counts. device=None: on a GPU the running GPU's preset (by name and compute
        capability), else the H100's; the Prediction says which and why. See docs/profile.md
        for the model and its limits."""
        if self.source != "emu":
            raise ValueError(
                "predict() models GPU time from the emulator's counts; this profile was "
                f"measured by {self.source} (its kernel time is the call's res.timing). For the "
                "prediction, count on the emulator: tm.profile.count(family, kernel, *inputs, "
                "**params)")
        from ._time_model import predict
        return predict(self, device)

    def __repr__(self):
        head = (f"<Profile {self.kernel}: global ld {_shown(self.global_load_requests)} req "
                f"({_shown(self.global_load_sectors_per_request, '.2f')} sectors/req), st "
                f"{_shown(self.global_store_requests)} req; shared ld "
                f"{_shown(self.shared_load_requests)} "
                f"({_shown(self.shared_load_bank_conflicts)} conflicts), st "
                f"{_shown(self.shared_store_requests)} "
                f"({_shown(self.shared_store_bank_conflicts)})")
        if self.global_atomics:   # nan (a metric ncu did not give) is shown as n/a
            head += f"; atomics {_shown(self.global_atomics)}"
        if self.sampled:
            head += f"; sampled 1 block in ~{self.sample_stride}"
        return head + ">"


def _shown(value, spec=",.0f"):
    """A counter as the repr shows it: "n/a" where the source had no such metric (nan)."""
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else format(value, spec)


def _ratio(a, b):
    return a / b if b else math.nan


def _stride(family, problem):
    if family != "matmul":
        return 1
    M, N, K = problem
    volume = M * N * K
    return max(1, math.ceil(volume / VALIDATION_MATMUL_VOLUME))


def _profiled_run(kernel, inputs, device_inputs, values, stride):
    """Runs the launches of one call in tiledmm._emu_profile; returns (raw result, counters)."""
    lib, mod = _load()
    ranges = [(d.address, int(getattr(x, "nbytes", 0) or 0))
              for x, d in zip(inputs, device_inputs) if d]
    return counted_run(lib, _names, ranges, lambda: mod.run(
        kernel, tuple(d.placeholder if d else x for x, d in zip(inputs, device_inputs)),
        tuple(d.address if d else None for d in device_inputs), values, 0, 1, False), stride)


def _make_profile(counts, stride, result):
    ints = {"launches", "blocks", "blocks_profiled", "threads_profiled", "warps_profiled"}
    kw = {k: (int(round(v)) if k in ints or stride == 1 else v) for k, v in counts.items()}
    launch = result.launch
    itemsize = 4 if str(getattr(result.out, "dtype", "float32")) == "float32" else 8
    return Profile(**kw, sampled=stride > 1 and kw["blocks_profiled"] < kw["blocks"],
                   sample_stride=stride, kernel=result.kernel, params=dict(result.params),
                   family=result.family, threads_per_block=launch.threads_per_block,
                   shared_bytes=launch.shared_bytes, flops=float(result.flops),
                   min_bytes=float(result.min_bytes), itemsize=itemsize)


def collect(family, kernel, inputs, device_inputs, values, result, problem, sample=None):
    """Runs the call's launches in tiledmm._emu_profile and returns a Profile. `inputs` are as
    _core passes them to the backend; `sample` overrides the sampling stride (1: all blocks)."""
    stride = _stride(family, problem) if sample is None else max(1, int(sample))
    _raw, counts = _profiled_run(result.kernel, inputs, device_inputs, values, stride)
    return _make_profile(counts, stride, result)


def collect_ncu(family, kernel, inputs, result):
    """profile=True on cuda: the call once more under Nsight Compute (tiledmm._ncu), as a
    Profile with source "ncu"."""
    from . import _ncu
    measured = _ncu.profile_calls([{"family": family, "kernel": result.kernel,
                                    "inputs": list(inputs), "params": result.params}])[0]
    return from_ncu(measured, result)


def from_ncu(measured, result):
    """A Profile from tiledmm._ncu's sums for one call (fields without an ncu metric: NaN)."""
    launch = result.launch
    blocks = int(measured["blocks"])
    warps_per_block = -(-launch.threads_per_block // 32)
    counted = {f.name: measured.get(f.name, math.nan) for f in fields(Profile)
               if f.name in _names_before_sampled()}
    counted.update(launches=int(measured["launches"]), blocks=blocks, blocks_profiled=blocks,
                   threads_profiled=blocks * launch.threads_per_block,
                   warps_profiled=blocks * warps_per_block)
    itemsize = 4 if str(getattr(result.out, "dtype", "float32")) == "float32" else 8
    hardware = {k: measured[k] for k in _ncu_extra_names() if k in measured}
    return Profile(**counted, kernel=result.kernel, params=dict(result.params),
                   family=result.family, threads_per_block=launch.threads_per_block,
                   shared_bytes=launch.shared_bytes, flops=float(result.flops),
                   min_bytes=float(result.min_bytes), itemsize=itemsize, source="ncu",
                   hardware=hardware)


def _names_before_sampled():
    names = [f.name for f in fields(Profile)]
    return names[:names.index("sampled")]


def _ncu_extra_names():
    from ._ncu import EXTRA_METRICS
    return tuple(EXTRA_METRICS)


def count(family, kernel, *inputs, sample=None, **params):
    """Only the profiled run: the counters of `kernel` (of `family`: "matmul", "reduce",
    "elementwise") on NumPy `inputs`, without the normal timed run and without its output
    (with sampling, the profiled run computes only some blocks). Faster than
    tm.matmul(..., profile=True) when only the counts matter (notebooks, sweeps of sizes).

    >>> A = np.ones((64, 64), np.float32)
    >>> p = tm.profile.count("matmul", "tiled", A, A, tile=16)
    >>> p.global_load_requests, p.global_load_sectors_per_request
    (1024, 4.0)
    """
    from . import _core, _registry
    spec = _registry.lookup(kernel, family)
    values = _registry.param_values(spec, params)
    if family == "matmul":
        problem = (inputs[0].shape[0], inputs[1].shape[1], inputs[0].shape[1])
    else:
        problem = (int(np.size(inputs[0])), 1, 1)
    stride = _stride(family, problem) if sample is None else max(1, int(sample))
    raw, counts = _profiled_run(spec.name, inputs, [None] * len(inputs), values, stride)
    itemsize = 4 if raw["out_dtype"] == "float32" else 8
    flops, min_bytes = _core._FAMILY_MODELS[family](*raw["problem"], itemsize)
    result = _core.Result(raw, spec, values, "emu", flops, min_bytes, 0)
    return _make_profile(counts, stride, result)


def counted_row_fields(res, inputs, params, device="H100"):
    """row_fields for a Result of a sweep or bench row: its own profile on emu; on a GPU the
    emulator's count of the same call, so the row holds the prediction beside the measured
    time. None for kernels without a source to count (cuBLAS)."""
    from . import _registry
    if res.kernel in _registry.CUDA_ONLY:
        return None
    counted = res.profile if res.backend == "emu" else None
    if counted is None:
        counted = count(res.family, res.kernel, *inputs, **params)
    return row_fields(counted, device)


def row_fields(p, device="H100"):
    """The counters, sectors and conflicts per request and the predicted time on `device` as a
    flat dict: the columns tm.sweep(..., profile=True) and bench --profile add to a row."""
    d = {f.name: getattr(p, f.name) for f in fields(p)
         if f.name not in ("kernel", "params", "family", "threads_per_block", "shared_bytes",
                           "flops", "min_bytes", "itemsize")}
    d.update(global_load_sectors_per_request=p.global_load_sectors_per_request,
             global_store_sectors_per_request=p.global_store_sectors_per_request,
             shared_load_conflicts_per_request=p.shared_load_conflicts_per_request,
             shared_store_conflicts_per_request=p.shared_store_conflicts_per_request)
    pred = p.predict(device)
    d.update(predicted_ms=pred.ms, predicted_bound=pred.bound, predicted_device=pred.device)
    return d


# The sizes lesson_table counts at: the lesson pairs' sizes, where the grids fill an H100 (at
# 256^3 the larger tiles leave most SMs idle, as they do on the GPU; below 2^24 a reduction is
# mostly the call's fixed overhead). Counting takes about a second per matmul on one core
# (sampled) and 2-5 s per reduction (in full).
LESSON_SIZES = {"matmul": 1024, "reduce": 1 << 24, "elementwise": 1 << 24}
# The lectures' performance lessons as (family, slower kernel, faster kernel) on the H100: what
# the time model must order right (tests/test_profile.py, benchmarks/predicted_vs_measured.py).
LESSON_PAIRS = [
    ("matmul", ("naive", dict(block=16)), ("tiled", dict(tile=16))),
    ("matmul", ("tiled", dict(tile=8)), ("tiled", dict(tile=16))),
    ("matmul", ("tiled", dict(tile=16)), ("tiled", dict(tile=32))),
    ("matmul", ("naive_uncoalesced", dict(block=32)), ("naive", dict(block=32))),
    ("matmul", ("colmajor_b", dict(corner=0)), ("colmajor_b", dict(corner=1))),
    ("matmul", ("tiled", dict(tile=32)), ("coarse", dict(coarsen=4))),
    ("matmul", ("regtile", dict(dims=1)), ("regtile", dict(dims=2))),
    ("matmul", ("regtile", dict(dims=2)), ("fast", dict(config=0))),
    ("reduce", ("interleaved_divergent", dict(block=256)),
     ("interleaved_bank_conflicts", dict(block=256))),
    ("reduce", ("interleaved_bank_conflicts", dict(block=256)), ("sequential", dict(block=256))),
    ("reduce", ("sequential", dict(block=256)), ("first_add", dict(block=256))),
    ("reduce", ("first_add", dict(block=256)), ("unroll_last_warp", dict(block=256))),
    ("reduce", ("unroll_last_warp", dict(block=256)), ("shuffle", dict(block=256))),
    ("reduce", ("per_level", dict(block=256)), ("shuffle", dict(block=256))),
    ("reduce", ("atomic_per_element", dict(block=256)), ("atomic", dict(block=256))),
]


def lesson_table(family, cases, size=None, device="H100", measure_size=None, backend=None,
                 seed=0):
    """One row per (kernel, params) of `cases`: the counted traffic and the time predicted for
    `device` from it, beside a measured time. What the notebooks show on every machine:

    - counted on the emulator at `size` (default LESSON_SIZES: 1024^3, 2^24): global load
      requests, sectors per request, L1<->L2 bytes (32 x sectors), shared conflicts per request,
      divergent branches, then `predicted_ms` and `bound`;
    - `measured_ms` on this backend at `measure_size` (default: `size` on cuda, where it is the
      lesson's size; 256^3 or 2^20 on emu, where it is CPU time: `measured_on` says which).

    >>> rows = tm.profile.lesson_table("matmul", [("naive", {"block": 16}), ("tiled", {"tile": 16})],
    ...                                size=256, measure_size=64, backend="emu")
    >>> [r["kernel"] for r in rows], rows[0]["load_sectors_per_request"]
    (['naive', 'tiled'], 2.0)
    >>> rows[0]["predicted_ms"] > rows[1]["predicted_ms"]
    True
    """
    from . import _backend, _core
    name = backend or _backend.get_backend()
    size = size or LESSON_SIZES[family]
    if measure_size is None:
        measure_size = size if name == "cuda" else min(size, 256 if family == "matmul" else 1 << 20)
    rng = np.random.default_rng(seed)

    def inputs(n, kernel):
        if family == "matmul":
            return [rng.standard_normal((n, n), dtype=np.float32) for _ in range(2)]
        if family == "reduce":
            return [rng.standard_normal(n, dtype=np.float32)]
        side = int(round(math.sqrt(n)))
        shape = (side, side) if kernel == "mat_add" else (n,)
        return [rng.standard_normal(shape, dtype=np.float32) for _ in range(2)]

    shape = f"{size}³" if family == "matmul" else f"n = {size:,}"
    measured_shape = f"{measure_size}³" if family == "matmul" else f"n = {measure_size:,}"
    rows = []
    for kernel, params in cases:
        p = count(family, kernel, *inputs(size, kernel), **params)
        pred = p.predict(device)
        res = _core._run(family, kernel, tuple(inputs(measure_size, kernel)), params, name,
                         None, None)
        rows.append(dict(
            kernel=kernel, params=" ".join(f"{k}={v}" for k, v in params.items()),
            counted_at=shape, global_load_requests=p.global_load_requests,
            load_sectors_per_request=p.global_load_sectors_per_request,
            l1_l2_bytes=p.global_bytes,
            shared_conflicts_per_request=p.shared_load_conflicts_per_request,
            divergent_branches=p.divergent_branches,
            predicted_ms=pred.ms, bound=pred.bound, device=pred.device,
            measured_ms=res.timing.kernel_ms,
            measured_on=(f"{_backend_label(name)} at {measured_shape}")))
    return rows


def _backend_label(name):
    if name == "cuda":
        from ._device import device_info
        return device_info("cuda")["name"]
    return "CPU time (emulator)"
