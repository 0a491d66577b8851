"""Profile mode's counters: what the GPU's memory system would count, counted on the CPU emulator.

The floor below tiledmm._core: binding the hooks of `tiledmm._emu_profile` (the emulator built
with ThreadSanitizer's instrumentation, emu/profile/emu_profile.cpp), a counted run, Profile,
collect (emu) and from_ncu (cuda). tiledmm.profile (count, row fields, lesson_table) is the
public face above, and its docstring says what each counter is, which Nsight Compute metric it
equals and how a warp instruction is formed.
"""
import ctypes
import importlib
import math
from dataclasses import dataclass, field, fields
from typing import Dict

from . import ncu
from .time_model import predict as _predict

__all__ = ["Profile", "bind", "counted_run", "available", "collect", "collect_ncu", "from_ncu",
           "make_profile", "profiled_run", "sampling_stride", "GRID_SMS", "VALIDATION_MATMUL_VOLUME"]

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
    # tiledmm.profiling.ncu: counters without an ncu metric are NaN there). `hardware` holds what ncu
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
        return _predict(self, device)

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


def sampling_stride(family, problem):
    if family != "matmul":
        return 1
    M, N, K = problem
    volume = M * N * K
    return max(1, math.ceil(volume / VALIDATION_MATMUL_VOLUME))


def profiled_run(kernel, inputs, device_inputs, values, stride):
    """Runs the launches of one call in tiledmm._emu_profile; returns (raw result, counters)."""
    lib, mod = _load()
    ranges = [(d.address, int(getattr(x, "nbytes", 0) or 0))
              for x, d in zip(inputs, device_inputs) if d]
    return counted_run(lib, _names, ranges, lambda: mod.run(
        kernel, tuple(d.placeholder if d else x for x, d in zip(inputs, device_inputs)),
        tuple(d.address if d else None for d in device_inputs), values, 0, 1, False), stride)


def make_profile(counts, stride, result):
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
    stride = sampling_stride(family, problem) if sample is None else max(1, int(sample))
    _raw, counts = profiled_run(result.kernel, inputs, device_inputs, values, stride)
    return make_profile(counts, stride, result)


def collect_ncu(family, kernel, inputs, result):
    """profile=True on cuda: the call once more under Nsight Compute (tiledmm.profiling.ncu), as a
    Profile with source "ncu"."""
    measured = ncu.profile_calls([{"family": family, "kernel": result.kernel,
                                    "inputs": list(inputs), "params": result.params}])[0]
    return from_ncu(measured, result)


def from_ncu(measured, result):
    """A Profile from tiledmm.profiling.ncu's sums for one call (fields without an ncu metric: NaN)."""
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
    return tuple(ncu.EXTRA_METRICS)
