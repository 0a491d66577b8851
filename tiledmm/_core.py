"""The calls users make: matmul, reduce, vec_add, mat_add, and what they return."""
import math
import statistics
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from . import _backend, _registry
from ._device_array import DeviceArray, as_device_input
from .profiling import counters, ncu

# Defaults per backend: the GPU is timed as the median of several launches after warm-up; the
# emulator runs once (it is there to check kernels, and its timings are CPU timings).
DEFAULT_RUNS = {"cuda": (2, 10), "emu": (0, 1)}
MAX_RUNS = 1_000_000  # warmup and repeat; each timed launch keeps a sample


@dataclass(frozen=True)
class Timing:
    """What was timed, in milliseconds. `kernel_ms` is the median of `samples_ms` (one entry per
    timed launch after `warmup` untimed ones); `total_ms` = h2d + kernel (median) + d2h.
    `clock` says what measured it: CUDA events on the GPU, the host clock on the emulator.
    On the GPU `h2d_ms` includes pinning an input in place (the second call that gets a large
    NumPy array registers its memory, see README "NumPy round trips").
    `l2` says what the cache held at each timed launch: "flushed" (the default on the GPU: a
    buffer twice the L2 size is written before each timed launch, outside the timed span, so
    every launch reads its inputs from memory, not from what the previous launch left in L2),
    "warm" (`warm_l2=True`: nothing flushed) or "n/a on the emulator" (no L2 to flush)."""
    h2d_ms: float
    kernel_ms: float
    kernel_ms_min: float
    samples_ms: Tuple[float, ...]
    d2h_ms: float
    total_ms: float
    h2d_bytes: int
    d2h_bytes: int
    warmup: int
    clock: str
    l2: str

    @property
    def copies(self):
        """The copies the call made, as (direction, bytes): none for device-resident data."""
        return tuple((direction, n) for direction, n in (("h2d", self.h2d_bytes),
                                                         ("d2h", self.d2h_bytes)) if n)

    def __repr__(self):
        copies = ", ".join(f"{d} {n / 2**20:.3g} MiB in {getattr(self, d + '_ms'):.4g} ms"
                           for d, n in self.copies) or "no copies"
        return (f"Timing(kernel {self.kernel_ms:.4g} ms median of {len(self.samples_ms)} "
                f"[min {self.kernel_ms_min:.4g}], L2 {self.l2}, {copies}, {self.clock})")


@dataclass(frozen=True)
class Launch:
    """How the kernel was launched (the first launch, when a call makes several)."""
    grid: Tuple[int, int, int]
    block: Tuple[int, int, int]
    shared_bytes: int           # per block, as the kernel uses it
    registers: Optional[int]    # per thread; None where the backend cannot tell (emu)
    blocks_per_sm: int          # resident blocks per multiprocessor (CUDA occupancy API)
    occupancy: float            # resident threads / max threads per multiprocessor
    launches: int               # kernel launches per call (grid chunks, tree levels, ...)
    # emu: "thread loops" (split at its barriers, tiledmm/toolchain/split/transform.py; registry
    # kernels by setup.py) or "fibers" (one per CUDA thread); path_reason: why fibers where the
    # launch refused a split (frame too large, TILEDMM_EMU_SPLIT=0) or tm.compile's transform
    # kept them; "" on cuda
    path: str = ""
    path_reason: str = ""

    @property
    def threads_per_block(self):
        """block[0] * block[1] * block[2]."""
        return self.block[0] * self.block[1] * self.block[2]


class Result:
    """What a tiledmm call returns. Unpacks as `out, timing = tm.matmul(...)`.

    Attributes: `out` (the output: an ndarray, a 0-d array for reduce, or a DeviceArray with
    output="device"), `timing` (a Timing), `launch` (a Launch), `kernel`, `family`, `params`
    (the kernel's parameters as used, defaults included), `backend`, `flops`, `min_bytes`
    (inputs read once and the output written once) and `model_bytes` (the lecture's
    global-traffic model of this kernel and shape).

    >>> A = np.ones((64, 32), np.float32); B = np.ones((32, 48), np.float32)
    >>> res = tm.matmul(A, B, kernel="tiled", tile=16, backend="emu")
    >>> C, t = res
    >>> C.shape, res.kernel, res.params, res.backend
    ((64, 48), 'tiled', {'tile': 16}, 'emu')
    >>> t.clock, len(t.samples_ms), res.launch.grid, res.launch.block
    ('CPU time (emulator)', 1, (3, 4, 1), (16, 16, 1))
    >>> res.flops == 2 * 64 * 48 * 32
    True
    """

    profile = None  # a tiledmm.profile.Profile when the call was made with profile=True

    def __init__(self, raw, spec, params, backend, flops, min_bytes, warmup):
        self.out = raw["out"]
        self.kernel = spec.name
        self.family = spec.family
        self.params = dict(zip((p.name for p in spec.params), params))
        self.backend = backend
        samples = tuple(raw["samples_ms"])
        kernel_ms = statistics.median(samples) if samples else 0.0
        self.timing = Timing(
            h2d_ms=raw["h2d_ms"], kernel_ms=kernel_ms,
            kernel_ms_min=min(samples) if samples else 0.0, samples_ms=samples,
            d2h_ms=raw["d2h_ms"], total_ms=raw["h2d_ms"] + kernel_ms + raw["d2h_ms"],
            h2d_bytes=raw["h2d_bytes"] if samples else 0, d2h_bytes=raw["d2h_bytes"] if samples else 0,
            warmup=warmup,
            clock="CUDA events" if backend == "cuda" else "CPU time (emulator)", l2=raw["l2"])
        self.launch = Launch(
            grid=raw["grid"], block=raw["block"], shared_bytes=raw["shared_bytes"],
            registers=raw["registers"] or None, blocks_per_sm=raw["blocks_per_sm"],
            occupancy=raw["occupancy"], launches=raw["launches"],
            path=raw.get("path", ""), path_reason=raw.get("path_reason", ""))
        self.flops = flops
        self.min_bytes = min_bytes          # inputs read once + output written once
        self.model_bytes = raw["model_bytes"]  # the lecture's traffic model for this kernel

    @property
    def gflops(self):
        """Floating-point operations per second of the kernel (median), in GFLOP/s."""
        ms = self.timing.kernel_ms
        return self.flops / (ms * 1e6) if ms > 0 else math.nan

    @property
    def tflops(self):
        """gflops / 1000: TFLOP/s."""
        return self.gflops / 1e3

    @property
    def gbps(self):
        """Effective bandwidth: the fewest bytes the call must move over the kernel time."""
        ms = self.timing.kernel_ms
        return self.min_bytes / (ms * 1e6) if ms > 0 else math.nan

    def __iter__(self):
        yield self.out
        yield self.timing

    def __repr__(self):
        params = "".join(f", {k}={v}" for k, v in self.params.items())
        shape = "x".join(map(str, self.out.shape)) or "scalar"
        rate = (f"{self.gflops:.4g} GFLOP/s" if self.family == "matmul"
                else f"{self.gbps:.4g} GB/s")
        return (f"<Result {self.kernel}{params} on {self.backend}: {self.out.dtype}[{shape}], "
                f"kernel {self.timing.kernel_ms:.4g} ms ({rate}), "
                f"total {self.timing.total_ms:.4g} ms, {self.timing.clock}>")


# Per family: (floating-point operations, fewest bytes moved) for a problem M, N, K.
FAMILY_MODELS = {
    "matmul": lambda M, N, K, size: (2.0 * M * N * K, size * (M * K + K * N + M * N)),
    "reduce": lambda M, N, K, size: (float(M), size * (M + 1)),
    "elementwise": lambda M, N, K, size: (float(M * N), size * 3 * M * N),
}


def check_warm_l2(warm_l2):
    """warm_l2 as the C glue's flush_l2 flag (its negation); ValueError unless a bool."""
    if not isinstance(warm_l2, (bool, np.bool_)):
        raise ValueError(f"warm_l2 must be True (keep the L2 cache warm between timed launches) "
                         f"or False (flush it before each, the default), got {warm_l2!r}")
    return not warm_l2


def run_family(family, kernel, inputs, params, backend, warmup, repeat, output=None, profile=False,
         *, warm_l2=False):
    spec = _registry.lookup(kernel, family)
    values = _registry.param_values(spec, params)
    mod, name = _backend.resolve(backend)
    if profile and name != "emu":
        ncu.find_ncu()   # before the run: say at once when Nsight Compute is missing
    device_inputs = [as_device_input(x, name) for x in inputs]
    if output is None:
        output = "device" if any(device_inputs) else "numpy"
    if output not in ("numpy", "device"):
        raise ValueError(f"output must be 'numpy' or 'device', got {output!r}")
    flush_l2 = check_warm_l2(warm_l2)
    default_warmup, default_repeat = DEFAULT_RUNS[name]
    warmup = default_warmup if warmup is None else warmup
    repeat = default_repeat if repeat is None else repeat
    for label, value, least in (("warmup", warmup, 0), ("repeat", repeat, 1)):
        if _registry.as_int(value) is None or not least <= value <= MAX_RUNS:
            raise ValueError(f"{label} must be an integer from {least} to {MAX_RUNS}, "
                             f"got {value!r}")
    try:
        raw = mod.run(kernel,
                      tuple(d.placeholder if d else x for x, d in zip(inputs, device_inputs)),
                      tuple(d.pointer() if d else None for d in device_inputs),
                      values, warmup, repeat, output == "device", flush_l2)
    except RuntimeError as exc:
        # The launch itself refuses (and cleans up after) a GPU-only kernel on the emulator;
        # say which backend runs it instead of the bare CUDA error name.
        if spec.name in _registry.CUDA_ONLY and "NotSupported" in str(exc):
            raise RuntimeError(f"kernel {spec.name!r} runs on the cuda backend only: it is a "
                               f"GPU library, which the {name} backend does not have "
                               "(cudaErrorNotSupported). Use backend='cuda' on a machine "
                               "with a GPU, or compare with numpy.matmul") from None
        if spec.name in _registry.CUDA_ONLY and "NotYetImplemented" in str(exc):
            # An optional rung (cutlass) whose headers the build did not find.
            raise RuntimeError(f"kernel {spec.name!r} was not built into this copy of tiledmm: "
                               "its headers were not found at build time. Set "
                               "TILEDMM_CUTLASS_INCLUDE=/path/to/cutlass/include (or pip install "
                               "nvidia-cutlass and build with --no-build-isolation) and rebuild "
                               "(cudaErrorNotYetImplemented)") from None
        raise
    if output == "device":
        raw["out"] = DeviceArray(raw["out"], raw["out_address"], raw["out_shape"],
                                 raw["out_dtype"], name)
    itemsize = 4 if raw["out_dtype"] == "float32" else 8
    flops, min_bytes = FAMILY_MODELS[family](*raw["problem"], itemsize)
    result = Result(raw, spec, values, name, flops, min_bytes, warmup)
    if profile and result.timing.samples_ms:   # empty problems launch nothing
        if name == "emu":
            result.profile = counters.collect(family, kernel, inputs, device_inputs, values,
                                              result, raw["problem"])
        else:   # Nsight Compute on the GPU (tiledmm.profiling.ncu)
            result.profile = counters.collect_ncu(family, kernel, inputs, result)
    return result



def matmul(A, B, kernel="tiled", *, backend=None, warmup=None, repeat=None, output=None,
           profile=False, warm_l2=False, **params):
    """C = A @ B with one of the course's matmul kernels, timed.

    A is M x K, B is K x N (NumPy arrays or array-likes of float32/float64; any layout).
    `kernel` names a registered matmul kernel (see `tiledmm.kernels('matmul')`); its
    parameters (e.g. `tile=16`) come as keywords. Returns a Result: `C, t = tm.matmul(A, B)`.
    Inputs may also be device arrays (`tm.to_device`, CuPy, PyTorch CUDA tensors): they are
    read in place. `output="device"` (the default when an input is on the device) leaves the
    result on the device as a `tm.DeviceArray`; `output="numpy"` copies it back.
    `profile=True` also counts the kernel's global and shared memory traffic with Nsight
    Compute's definitions: `res.profile` (a tiledmm.profile.Profile; the same keyword works on
    reduce, vec_add and mat_add). On emu the emulator counts it and `res.profile.predict("H100")`
    models GPU time; on cuda Nsight Compute (ncu) measures it in a second, profiled run.
    On the GPU the L2 cache is flushed before each timed launch, so a small problem is timed
    from memory as a first touch would be; `warm_l2=True` keeps it warm (a small problem then
    times out of L2). `res.timing.l2` says which (also on reduce, vec_add and mat_add).

    >>> import numpy as np, tiledmm as tm
    >>> A = np.arange(6, dtype=np.float32).reshape(2, 3); B = np.ones((3, 2), np.float32)
    >>> tm.matmul(A, B, kernel="tiled", tile=8, backend="emu").out
    array([[ 3.,  3.],
           [12., 12.]], dtype=float32)
    """
    return run_family("matmul", kernel, (A, B), params, backend, warmup, repeat, output, profile,
                warm_l2=warm_l2)


def reduce(x, kernel="shuffle", *, backend=None, warmup=None, repeat=None, output=None,
           profile=False, warm_l2=False, **params):
    """The sum of all elements of x (float32 or float64, any shape, flattened) with one of the
    course's reduction kernels. `res.out` is a 0-d array: `float(res.out)` is the sum. The
    sum of an empty array is 0, as in NumPy.

    >>> x = np.arange(1000, dtype=np.float32)
    >>> res = tm.reduce(x, kernel="shuffle", block=256, backend="emu")
    >>> float(res.out), res.out.shape
    (499500.0, ())
    """
    result = run_family("reduce", kernel, (x,), params, backend, warmup, repeat, output, profile,
                warm_l2=warm_l2)
    result.out = result.out.reshape(())
    return result


def vec_add(a, b, kernel="vec_add", *, backend=None, warmup=None, repeat=None, output=None,
            profile=False, warm_l2=False, **params):
    """c = a + b elementwise, one thread per element (the lectures' first kernel).

    >>> a = np.arange(5, dtype=np.float32)
    >>> tm.vec_add(a, a, block=128, backend="emu").out
    array([0., 2., 4., 6., 8.], dtype=float32)
    """
    return run_family("elementwise", kernel, (a, b), params, backend, warmup, repeat, output, profile,
                warm_l2=warm_l2)


def mat_add(a, b, kernel="mat_add", *, backend=None, warmup=None, repeat=None, output=None,
            profile=False, warm_l2=False, **params):
    """C = A + B for matrices, with 2-D thread indices (CMU 15-418 lecture 001).

    >>> A = np.arange(6, dtype=np.float64).reshape(2, 3)
    >>> tm.mat_add(A, A, block=16, backend="emu").out
    array([[ 0.,  2.,  4.],
           [ 6.,  8., 10.]])
    """
    return run_family("elementwise", kernel, (a, b), params, backend, warmup, repeat, output, profile,
                warm_l2=warm_l2)
