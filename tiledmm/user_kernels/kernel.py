"""Kernels the user writes: compile CUDA C source text at run time and launch it on NumPy arrays
or device arrays, timed like tiledmm's own kernels.

    kernel = tm.compile(r'''
    __global__ void scale(const float *x, float *y, float a, int n)
    {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }''')
    x = np.arange(1000, dtype=np.float32); y = np.empty_like(x)
    res = kernel(grid=(4,), block=(256,), x, y, 2.0, x.size)   # or kernel((4,), (256,), ...)
    res.out is y; res.timing.kernel_ms; res.launch.grid

The source is CUDA C++ as nvcc takes it: `extern __shared__` dynamic shared memory (or
`TM_DYNAMIC_SHARED(type, name)`), `#include <cuda_runtime.h>`, `tm_ceil_div`; parameters may be
pointers, scalars (`bool` too), array parameters (`float A[N][N]`, `float A[][N]`,
`float (*A)[N]`: a C-contiguous 2-D array whose rows have N elements), `float **` (a 2-D array;
the table of row pointers is built where the kernel runs) and vector pointers (`float4 *` from
a float32 array whose length is a multiple of 4); a template kernel is named with its arguments
(`name="mm<16>"`). The compiler's warnings are issued as `tm.CompileWarning` at the source's
line numbers. On `cuda` it is compiled by NVRTC (loaded at first use from the CUDA toolkit or the
`nvidia-cuda-nvrtc` wheel) for the device's architecture; on `emu` by the system C++ compiler
($CXX or g++) against the emulator's headers. Compiled code is cached in memory and on disk
(TILEDMM_CACHE_DIR, default ~/.cache/tiledmm) by source, options, backend and architecture.

Arguments follow the kernel's signature. A pointer parameter takes a NumPy array of the matching
dtype (`const float *` / `float *` → float32, `double *` → float64, `int *` → int32, ...) or a
device array (tm.to_device, CuPy, PyTorch): NumPy arrays are copied to the device before the
launch and, for non-const pointers (the outputs), copied back into the same array afterwards.
A scalar parameter (`int`, `unsigned`, `long long`, `size_t`, `float`, `double`) takes a Python
number. The result is a `Result` like `tm.matmul`'s: `res.out` is the output array (or a tuple of
them when the kernel has several non-const pointers), `res.timing`, `res.launch`.

Errors: `CompileError` (a ValueError) carries the compiler's diagnostics with the line numbers of
the user's source; wrong argument counts or types raise TypeError, bad values ValueError; a launch
that fails (a barrier not all threads reach, check mode's out-of-bounds access, an access outside
an argument's buffer, abort() or a failed assert, an illegal address on the GPU, a timeout)
raises `KernelError` (a RuntimeError) with the report: the kind of fault, the thread and the
block, and for an access next to an argument's buffer the argument and the index.

Isolation (the default, `isolate=True`): the kernel runs in tiledmm's worker process
(tiledmm/confine/isolation.py), so that nothing it does can kill, hang or corrupt the caller: a fault is
a KernelError and the next call works; Ctrl-C stops a running kernel (KeyboardInterrupt), and
`timeout=` seconds (default 60, $TILEDMM_KERNEL_TIMEOUT; None for no limit) end a runaway one.
The worker is confined (tiledmm/confine/sandbox.py): it reads only what it loads, writes one scratch
folder, starts no program or process, opens no network socket and reaches no other process; its
replies are JSON checked against a fixed schema. The source is parsed and compiled only in a
confined compile child. `isolate=False` runs the kernel in the caller's process, UNCONFINED:
faster to launch, with none of these promises, for trusted code only.

Check mode (`check=True`, emulator only), per launch (threads may check one kernel at once):
pointer, array (`float A[][N]`), `float **` and vector pointer parameters are bounds-checked: the
first access outside the array passed is reported as a read or a write with the indices as
written (`A[3][40]`), the thread and the block, and is not performed. Two accesses of one global
element, one a write, with nothing ordering them (two blocks, or two threads of a block with no
`__syncthreads()` between) are a race; atomics and a thread's own read then write are not, nor,
after a `__threadfence()`, reads of what another block wrote. `__shared__` arrays and scalars of number
types and dynamic shared memory are race-checked within each barrier interval (a read of what
another thread wrote, a write over another thread's read or different write), and a read of an
element no thread of the block wrote, or an index outside the extent, is reported; lanes of a
warp are ordered by `__syncwarp()`. Not tracked: atomics on shared memory, races on vector
pointers' elements, a one-row `float **`'s row length, and raw pointers made from a parameter or
shared array (`float *q = s`); `reinterpret_cast`/`const_cast` of a parameter stay checked. A
launch stopped by its timeout reports the timeout and the first problem check mode had found. Barriers that not all threads of a block reach are reported on the emulator in every mode, with the call sites.
"""

import os
import struct
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from .. import _backend
from .._core import DEFAULT_RUNS, MAX_RUNS, Result, check_warm_l2
from .._device_array import DeviceArray, as_device_input, to_device
from .._row_tables import row_table
from ..profiling.counters import make_profile
from ..toolchain import cache as kernel_cache
from ..toolchain.compile_emu import CompileTimeout, compile_emu, kernel_signature_confined, split_wanted
from ..toolchain.compile_nvrtc import NVRTC_SECONDS, compile_cuda, load_cuda
from ..confine.isolation import Segment, default_timeout, worker
from ..errors import CompileError, CompileWarning, KernelError
from ..toolchain.diagnostics import emit_warnings, parse_warnings
from .launch import counted_launch, image_memfd, load_emu

__all__ = ["compile", "Kernel", "CompileError", "CompileWarning", "KernelError", "cache_dir",
           "clear_cache", "cache_info"]

cache_dir = kernel_cache.cache_dir
cache_info = kernel_cache.cache_info
_LOCK = threading.Lock()
_ARTIFACTS = {}     # (backend, source, name, options, check) -> compiled artifact
_IN_PROCESS = {}    # artifact key -> kernel loaded in this process (isolate=False)
_SIGNATURES = {}    # (backend, source, name asked, options, check) -> (name, params, artifact)
MAX_SHARED_BYTES = 2**31 - 1


def clear_cache(disk=False):
    """Forget compiled kernels kept in memory (and on disk with disk=True). A compile in progress
    elsewhere is not disturbed."""
    with _LOCK:
        _ARTIFACTS.clear()
        _SIGNATURES.clear()
    if disk:
        kernel_cache.clear_disk()


def _dim3(value, what):
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(value)
    except TypeError:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and
                                          not isinstance(d, bool) for d in dims):
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    if any(d < 0 for d in dims):
        raise ValueError(f"{what} must not be negative, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


_INT_RANGES = {"i": (-2**31, 2**31 - 1), "I": (0, 2**32 - 1), "q": (-2**63, 2**63 - 1),
               "Q": (0, 2**64 - 1), "b": (-2**7, 2**7 - 1), "B": (0, 2**8 - 1),
               "h": (-2**15, 2**15 - 1), "H": (0, 2**16 - 1)}


class KernelResult(Result):
    """The Result of a user kernel's launch: `out` is the output array (non-const pointer
    argument), a tuple of them, or None; `timing` and `launch` as for tiledmm's kernels."""

    def __repr__(self):
        outs = self.out if isinstance(self.out, tuple) else (self.out,)
        shapes = ", ".join(f"{o.dtype}[{'x'.join(map(str, o.shape)) or 'scalar'}]"
                           for o in outs if o is not None) or "no outputs"
        rate = f", {self.gflops:.4g} GFLOP/s" if self.flops else ""
        return (f"<Result {self.kernel} (user kernel) on {self.backend}: {shapes}, "
                f"kernel {self.timing.kernel_ms:.4g} ms{rate}, grid {self.launch.grid}, "
                f"block {self.launch.block}, {self.timing.clock}>")


class Kernel:
    """A compiled user kernel. Call it as `kernel(grid, block, *args, shared_bytes=0, ...)`."""

    def __init__(self, source, name=None, options=(), defines=None, backend=None, check=False,
                 isolate=True, compile_seconds=None):
        if not isinstance(source, str):
            raise TypeError(f"source must be a string of CUDA C, got {type(source).__name__}")
        if isinstance(options, str):
            options = (options,)
        options = [str(o) for o in options]
        for k, v in (defines or {}).items():
            options.append(f"-D{k}" if v is None else f"-D{k}={v}")
        self.source, self.options = source, tuple(options)
        self.check = bool(check)
        self.isolate = bool(isolate)
        # NVRTC's time limit (the grader's --compile-timeout); g++'s is the compile child's
        self.compile_seconds = float(compile_seconds or NVRTC_SECONDS)
        self._backend = backend
        backend_name = _backend.resolve(backend)[1]
        # the source is read (libclang) and compiled only in a confined child (_compile_emu)
        self.name, params, artifact = _signature_and_artifact(source, name, self.options,
                                                              backend_name, self.check)
        self.params = tuple(params)
        if artifact is None:
            artifact = self._compiled(backend_name, self.check)   # errors now, not at launch
        emit_warnings(getattr(artifact, "warnings", None) or [], self.name, backend_name)

    @property
    def signature(self):
        """The kernel's C signature as parsed: name(type param, ...)."""
        return f"{self.name}({', '.join(p.decl() for p in self.params)})"

    def __repr__(self):
        return f"<tiledmm Kernel {self.signature}>"

    def _compiled(self, backend, check, profile=False):
        """The compiled artifact for this backend and mode (memory, else disk cache, else the
        compiler). profile: the emulator's profile build (counting, docs/profile.md)."""
        if backend == "cuda" and check:
            raise ValueError("check mode runs on the emulator: call with backend='emu' "
                             "(on the GPU, use compute-sanitizer)")
        key = _artifact_key(backend, self.source, self.name, self.options, check, profile)
        with _LOCK:
            artifact = _ARTIFACTS.get(key)
        if artifact is not None:
            kernel_cache.count("memory_hits")
            return artifact
        if backend == "emu":
            artifact = compile_emu(self.source, self.name, list(self.options), check, profile)[2]
        elif self.isolate:   # NVRTC runs in the worker, with a time limit; the caller's timeout
            # ends a worker whose NVRTC never asks its flow callback (compile_nvrtc's docstring)
            reply = worker("cuda").call(
                {"op": "compile_cuda", "source": self.source, "name": self.name,
                 "options": list(self.options), "seconds": self.compile_seconds},
                timeout=self.compile_seconds + 60, what=f"compiling kernel '{self.name}'")
            a = _reply_value(reply, "artifact")   # checked by _isolation.check_reply
            artifact = SimpleNamespace(backend="cuda", **a,
                                       warnings=parse_warnings(a["log"], "cuda"))
        else:
            artifact = compile_cuda(self.source, self.name, list(self.options),
                                    self.compile_seconds)
        kernel_cache.count(artifact.origin)   # counted here: NVRTC may have run in the worker
        with _LOCK:
            _ARTIFACTS[key] = artifact
        return artifact

    def _arguments(self, args, backend):
        """Each argument checked against its parameter: ('s', bytes) for a scalar, ('p', param,
        array) for a NumPy array (C-contiguous), ('d', param, DeviceInput) for a device array."""
        if len(args) != len(self.params):
            raise TypeError(f"kernel {self.signature} takes {len(self.params)} arguments after "
                            f"grid and block, got {len(args)}")
        checked = []
        for p, value in zip(self.params, args):
            what = f"argument '{p.name}' ({p.type_text()})"
            if not p.takes_array:
                checked.append(("s", _scalar_bytes(p, value, what)))
                continue
            dev = as_device_input(value, backend) if not isinstance(value, np.ndarray) else None
            if dev is not None:
                if np.dtype(dev.placeholder.dtype) != p.dtype:
                    raise TypeError(f"{what} needs {p.dtype} data, got a device array of "
                                    f"{dev.placeholder.dtype}")
                _check_shape(p, dev.placeholder.shape, what)
                checked.append(("d", p, dev))
                continue
            if not isinstance(value, np.ndarray):
                raise TypeError(f"{what} needs {p.wants()} (a NumPy array or a device array), "
                                f"got {type(value).__name__}")
            if value.dtype != p.dtype:
                raise TypeError(f"{what} needs a {p.dtype} array, got {value.dtype} "
                                f"(convert with .astype(np.{p.dtype}))")
            _check_shape(p, value.shape, what)
            if p.is_output and not value.flags.writeable:
                raise ValueError(f"{what} is an output (non-const pointer): the array must "
                                 "be writeable")
            checked.append(("p", p, value))
        return checked

    def __call__(self, grid, block, *args, shared_bytes=0, backend=None, warmup=None,
                 repeat=None, check=None, flops=None, timeout="default", profile=False,
                 warm_l2=False):
        """Launch on `grid` blocks of `block` threads (ints or tuples of up to 3) with
        `shared_bytes` of dynamic shared memory. Returns a Result (`res.out`, `res.timing`,
        `res.launch`). `flops`: operations per launch, for `res.gflops`. `check=True` (emu):
        bounds-checked pointer parameters and race-checked shared memory. `timeout`: seconds
        the launch may take in the worker (default 60 or $TILEDMM_KERNEL_TIMEOUT; None: no
        limit). A grid with a zero dimension launches nothing. `profile=True` (emu): the
        launch runs once more, on copies of the arrays, in a profile build of the kernel that
        counts its memory traffic as Nsight Compute would (`res.profile`, docs/profile.md);
        `res.profile.predict()` needs `flops` for its instruction-issue term. On the GPU the
        L2 cache is flushed before each timed launch unless `warm_l2=True` (`res.timing.l2`
        says which), as for tm.matmul."""
        mod, name = _backend.resolve(backend or self._backend)
        check = self.check if check is None else bool(check)
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        if isinstance(shared_bytes, bool) or not isinstance(shared_bytes, (int, np.integer)) \
                or not 0 <= shared_bytes <= MAX_SHARED_BYTES:
            raise ValueError(f"shared_bytes must be an integer from 0 to {MAX_SHARED_BYTES}, "
                             f"got {shared_bytes!r}")
        flush_l2 = check_warm_l2(warm_l2)
        default_warmup, default_repeat = DEFAULT_RUNS[name]
        warmup = default_warmup if warmup is None else warmup
        repeat = default_repeat if repeat is None else repeat
        for label, value, least in (("warmup", warmup, 0), ("repeat", repeat, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or \
                    not least <= value <= MAX_RUNS:
                raise ValueError(f"{label} must be an integer from {least} to {MAX_RUNS}, "
                                 f"got {value!r}")
        if timeout == "default":
            timeout = default_timeout()
        elif timeout is not None and (isinstance(timeout, bool) or
                                      not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ValueError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}")
        if profile and name != "emu":
            raise RuntimeError("profile=True counts a tm.compile kernel's traffic on the emu "
                               "backend (backend='emu'); on the GPU use Nsight Compute (ncu)")
        if profile and check:
            raise ValueError("profile=True and check=True instrument the kernel differently: "
                             "run one, then the other")
        checked = self._arguments(args, name)
        launch = SimpleNamespace(backend=name, mod=mod, grid=grid, block=block,
                                 shared=int(shared_bytes), warmup=int(warmup), repeat=int(repeat),
                                 check=check, timeout=timeout, profile=False,
                                 flush_l2=flush_l2)
        counts = self._count(launch, args) if profile and 0 not in grid else None
        if 0 in grid:
            raw = _empty_launch(launch)
        elif self.isolate:
            raw = self._run_isolated(launch, checked)
        else:
            raw = self._run_in_process(launch, checked)
        outputs = [args[i] for i, p in enumerate(self.params) if p.is_output]
        raw["out"] = None if not outputs else outputs[0] if len(outputs) == 1 else tuple(outputs)
        spec = SimpleNamespace(name=self.name, family="user", params=())
        nbytes = sum(_nbytes(c) for c in checked)
        res = KernelResult(raw, spec, (), name, float(flops) if flops else 0.0, nbytes, warmup)
        res.params = {p.name: v for p, v in zip(self.params, args) if not p.takes_array}
        if name == "emu" and 0 not in grid:
            res.launch = replace(res.launch, **self._launch_path(check, raw))
        if counts is not None:
            res.profile = make_profile(counts, 1, res)
        return res

    def _launch_path(self, check, raw):
        """Which way the emulator ran the kernel, as its runtime reports it (emu/cuda_emu.h's
        tm_emu_launch_pair decides): split at its barriers into loops over the block's threads,
        else fibers; and why, the runtime's reason (per-thread arrays too large for this block,
        TILEDMM_EMU_SPLIT=0) or else the build's (the transform kept the fibers, check mode)."""
        path = raw.get("path") or "fibers"
        reason = raw.get("path_reason") or ""
        if not reason and path != "thread loops":   # the build's (looked up only then)
            split = getattr(self._compiled("emu", check), "split", None) or {}
            reason = split.get("reason", "")
        return {"path": path, "path_reason": reason}

    def _count(self, launch, args):
        """profile=True: one launch of the kernel's profile build on copies of the arrays (an
        accumulating kernel must not see its output twice); returns the counters."""
        copies = [_aligned_copy(a) if isinstance(a, np.ndarray) else
                  to_device(a.get(), "emu") if isinstance(a, DeviceArray) else a for a in args]
        counting = SimpleNamespace(**{**vars(launch), "warmup": 0, "repeat": 1, "profile": True})
        checked = self._arguments(copies, launch.backend)
        raw = (self._run_isolated if self.isolate else self._run_in_process)(counting, checked)
        return raw["profile_counts"]

    def _run_in_process(self, launch, checked):
        """isolate=False: the kernel runs in this process (csrc/user_kernels.c copies NumPy
        arrays to the device and the outputs back)."""
        packed, write_back, keep, after = [], [], [], []
        for kind, *rest in checked:
            if kind == "s":
                packed.append(("s", rest[0]))
            elif kind == "d":
                p, dev = rest
                nbytes = dev.placeholder.size * p.dtype.itemsize
                keep.append(dev)
                if p.kind == "rows":   # a table of the rows' device addresses
                    rows, cols = dev.placeholder.shape
                    arg, more, _ = row_table(launch.backend, launch.mod, dev.address, rows,
                                             cols * p.dtype.itemsize, nbytes, False, True)
                    packed.append(arg)
                    keep += more
                    continue
                packed.append(("p", None, dev.address, nbytes, False))
            else:
                p, value = rest
                host = np.ascontiguousarray(value)
                if p.is_output and host is not value and not np.shares_memory(host, value):
                    write_back.append((value, host))
                keep.append(host)
                if p.kind == "rows":   # emu: the rows in place; cuda: copied to the device
                    arg, more, fn = row_table(launch.backend, launch.mod, host.ctypes.data,
                                              host.shape[0], host.strides[0], host.nbytes,
                                              p.is_output)
                    packed.append(arg)
                    keep += more
                    after += [fn] if fn else []
                    continue
                if launch.profile:   # counting works on copies: the kernel runs in them
                    packed.append(("p", None, host.ctypes.data, host.nbytes, False))
                else:
                    packed.append(("p", host, 0, host.nbytes, p.is_output))
        loaded = _load_in_process(self._compiled(launch.backend, launch.check, launch.profile))
        try:
            raw = counted_launch(launch.mod, loaded, launch.grid, launch.block, launch.shared,
                                 tuple(packed), launch.warmup, launch.repeat, launch.profile,
                                 launch.flush_l2)
        except RuntimeError as exc:
            raise KernelError(f"kernel '{self.name}' on {launch.backend}: {exc}",
                              kind=KernelError.CUDA_ERROR) from None
        for fn in after:
            fn()
        for original, copy in write_back:
            original[...] = copy
        return raw

    def _run_isolated(self, launch, checked):
        """The kernel runs in tiledmm's worker process; the arrays cross through one
        shared-memory segment (tiledmm/confine/isolation.py)."""
        pointers = [(i, c) for i, c in enumerate(checked) if c[0] != "s"]
        # a `T **` parameter's table of row pointers gets a region of its own, filled where the
        # kernel runs (tiledmm/_row_tables.py)
        tables = [(i, _shape(c)[0]) for i, c in pointers if c[1].kind == "rows"]
        w = worker(launch.backend)
        with w.lock:   # the shared file is the worker's: one call at a time fills it
            try:
                segment = Segment([_nbytes(c) for _, c in pointers] +
                                  [8 * rows for _, rows in tables], w.args_file)
                raw, copy_in_ms, copy_out_ms = self._through_segment(
                    launch, checked, pointers, tables, segment)
            finally:
                w.args_file.after_call()
        if launch.backend == "emu":   # the worker's kernel worked in place: the copies are these
            raw.update(h2d_ms=copy_in_ms, d2h_ms=copy_out_ms,
                       h2d_bytes=sum(_nbytes(c) for _, c in pointers),
                       d2h_bytes=sum(_nbytes(c) for _, c in pointers if c[1].is_output))
        return raw

    def _through_segment(self, launch, checked, pointers, tables, segment):
        """Copy the arguments into the segment, launch in the worker, copy the outputs back.
        Returns (raw result, copy-in ms, copy-out ms)."""
        start = time.perf_counter()
        request_args, region = [], {}
        for i, c in pointers:
            region[i] = len(region)
        table_region = {i: len(pointers) + k for k, (i, _) in enumerate(tables)}
        for i, c in enumerate(checked):
            if c[0] == "s":
                request_args.append(c)
                continue
            _, p, value = c
            view = segment.view(region[i], _nbytes(c))
            if c[0] == "d":
                if view.size:
                    launch.mod.download(value.address, view)
            elif view.size:
                np.copyto(view.view(p.dtype).reshape(value.shape), value, casting="no")
            if p.kind == "rows":
                rows, cols = _shape(c)
                request_args.append(("r", region[i], _nbytes(c), p.is_output, rows,
                                     cols * p.dtype.itemsize, table_region[i]))
                continue
            request_args.append(("p", region[i], _nbytes(c), p.is_output))
        copy_in_ms = (time.perf_counter() - start) * 1e3
        raw = self._worker_launch(launch, request_args, segment)
        start = time.perf_counter()
        for i, c in pointers:
            _, p, value = c
            if not p.is_output or not _nbytes(c):
                continue
            view = segment.view(region[i], _nbytes(c))
            if c[0] == "d":
                launch.mod.upload_into(value.address, view)
            else:
                np.copyto(value, view.view(p.dtype).reshape(value.shape), casting="no")
        copy_out_ms = (time.perf_counter() - start) * 1e3
        return raw, copy_in_ms, copy_out_ms

    def _worker_launch(self, launch, request_args, segment):
        w = worker(launch.backend)
        request = {"op": "launch", "backend": launch.backend, "grid": launch.grid,
                   "block": launch.block, "shared": launch.shared, "args": request_args,
                   "regions": segment.regions, "warmup": launch.warmup, "repeat": launch.repeat,
                   "profile": launch.profile, "flush_l2": launch.flush_l2}
        if launch.backend == "emu":
            request["emu_threads"] = launch.mod.threads()
        what = f"kernel '{self.name}'"
        artifact = self._compiled(launch.backend, launch.check, launch.profile)
        with w.lock:   # the worker's pid and what it has loaded belong together
            loaded = w.pid is not None and artifact.key in w.loaded
            fds, image_fd = [segment.fd] if segment.size else [], -1
            request.update(key=artifact.key, artifact=None, args_fd=0 if fds else None)
            try:
                if not loaded:
                    request["artifact"] = _artifact_message(artifact)
                    if artifact.backend == "emu":   # the kernel's code: a memfd made here
                        image_fd = image_memfd(artifact)
                        request["image_fd"] = len(fds)
                        fds.append(image_fd)
                reply = w.call(request, fds=fds, timeout=launch.timeout, what=what)
            finally:
                if image_fd >= 0:
                    os.close(image_fd)
            if reply.get("ok") and w.alive():
                w.loaded.add(artifact.key)
        if reply.get("ok"):
            return reply["raw"]
        kind, message = reply.get("error"), reply.get("message", "")
        if kind == "MemoryError":
            raise MemoryError(message)
        if kind == "KernelError":
            report = [ln for ln in w.last_stderr.splitlines() if ln.startswith("tiledmm emulator:")]
            raise KernelError(f"{what} on {launch.backend}: {message}"
                              + "".join("\n" + ln for ln in report if ln not in message),
                              kind=reply["kind"])
        raise RuntimeError(f"tiledmm's worker failed: {kind}: {message}\n"
                           f"{reply.get('traceback', '')}")

    def launch(self, grid, block, *args, **kwargs):
        """The same as calling the kernel."""
        return self(grid, block, *args, **kwargs)


def _artifact_key(backend, source, name, options, check, profile):
    """A build's key in this process's memory: on emu also whether kernels split at their
    barriers (TILEDMM_EMU_SPLIT, read at each call: compile_emu.split_wanted)."""
    return (backend, source, name, tuple(options), check, profile,
            backend == "emu" and split_wanted())


def _signature_and_artifact(source, name, options, backend, check):
    """(name, params, emu artifact or None), from memory when this process has seen the source:
    on emu one confined compile child reads the signature and builds the kernel; on cuda it
    reads the signature (NVRTC runs in the worker)."""
    request = (backend, source, name, tuple(options), check)
    with _LOCK:
        known = _SIGNATURES.get(request)
    if known is not None:
        if known[2] is not None:   # on cuda the artifact's own lookup counts the hit
            kernel_cache.count("memory_hits")
        return known
    if backend == "emu":
        found = compile_emu(source, name, list(options), check)
        kernel_cache.count(found[2].origin)
        with _LOCK:   # the build is the Kernel's own too
            _ARTIFACTS[_artifact_key(backend, source, found[0], options, check, False)] = found[2]
    else:
        found = (*kernel_signature_confined(source, name, list(options)), None)
    with _LOCK:
        _SIGNATURES[request] = found
    return found


def _artifact_message(artifact):
    """What the worker needs to load a compiled kernel (emu: its code comes as a memfd)."""
    if artifact.backend == "emu":
        return {"backend": "emu", "key": artifact.key, "name": artifact.name,
                "digest": artifact.digest}
    return {"backend": "cuda", "key": artifact.key, "name": artifact.name,
            "image": artifact.image, "lowered": artifact.lowered}


def _aligned_copy(array):
    """A C-contiguous copy of `array` at a 256-byte boundary, as cudaMalloc places a buffer
    (the sectors a warp touches depend on it)."""
    raw = np.empty(array.nbytes + 256, np.uint8)
    start = -raw.ctypes.data % 256
    copy = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


def _shape(checked):
    kind, p, value = checked
    return tuple(value.placeholder.shape) if kind == "d" else value.shape


def _nbytes(checked):
    kind, *rest = checked
    if kind == "s":
        return 0
    p, value = rest
    return (value.placeholder.size if kind == "d" else value.size) * p.dtype.itemsize


def _check_shape(p, shape, what):
    """The array's shape against an array parameter's: float4 * wants a length that is a
    multiple of 4, float A[][64] rows of 64, float ** two dimensions."""
    size = int(np.prod(shape)) if len(shape) else 1
    if p.kind == "vector" and size % p.lanes:
        raise ValueError(f"{what} needs {p.wants()}: {size} elements is not a multiple of "
                         f"{p.lanes}")
    if p.kind == "array":
        want = tuple(p.inner)
        if len(shape) != 1 + len(want) or tuple(shape[1:]) != want:
            raise ValueError(f"{what} needs {p.wants()}, got shape {tuple(shape)}")
    if p.kind == "rows" and len(shape) != 2:
        raise ValueError(f"{what} needs {p.wants()}, got a {len(shape)}-D array of shape "
                         f"{tuple(shape)}")


def _scalar_bytes(p, value, what):
    fmt, kind = p.fmt, p.number_kind
    if kind == "b":
        if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and
                                                   value in (0, 1)):
            return struct.pack("=?", bool(value))
        raise TypeError(f"{what} needs a bool (True/False), got {value!r}")
    if isinstance(value, (np.ndarray, list, tuple)) or not isinstance(
            value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} needs a number, got {type(value).__name__}")
    if kind == "i":
        if isinstance(value, (float, np.floating)):
            if not float(value).is_integer():
                raise TypeError(f"{what} needs an integer, got {value!r}")
        value = int(value)
        lo, hi = _INT_RANGES[fmt]
        if not lo <= value <= hi:
            raise ValueError(f"{what}: {value} is out of range [{lo}, {hi}]")
    else:
        value = float(value)
    return struct.pack("=" + fmt, value)


_EMPTY_VALUE = {"samples": [], "number": 0.0, "int": 0, "text": "", "dim3": (0, 0, 0)}


def _empty_launch(launch):
    """The raw result of a launch that never ran (an empty problem), in the C glue's schema."""
    raw = {k: _EMPTY_VALUE[kind] for k, kind in _backend.raw_launch_fields().items()}
    raw.update(grid=launch.grid, block=launch.block, shared_bytes=launch.shared, l2="no launch")
    return raw


def _load_in_process(artifact):
    with _LOCK:
        loaded = _IN_PROCESS.get(artifact.key)
    if loaded is None:
        loaded = load_emu(artifact, report_faults=False) if artifact.backend == "emu" \
            else load_cuda(artifact)
        with _LOCK:
            _IN_PROCESS[artifact.key] = loaded
    return loaded


def _reply_value(reply, field):
    if reply.get("ok"):
        return reply[field]
    if reply.get("error") == "CompileError":
        raise CompileError(reply["message"], reply.get("log", ""))
    if reply.get("error") == "CompileTimeout":
        raise CompileTimeout(reply.get("message", ""))
    raise RuntimeError(f"{reply.get('error')}: {reply.get('message')}")


def compile(source, name=None, options=(), *, defines=None, backend=None, check=False,
            isolate=True):
    """Compile CUDA C `source` (tiledmm's kernel dialect) and return a `Kernel`.

    name: the `__global__` function to launch (needed when the source defines several).
    options: compiler options, e.g. ["-DTILE=16"] (passed to NVRTC on cuda, g++ on emu);
    defines: {"TILE": 16} is the same as options=["-DTILE=16"].
    backend: compile for this backend now ('cuda' or 'emu'; a call may still pick the other).
    check: launch in check mode by default (emu: bounds-checked pointer parameters and
    race-checked shared memory).
    isolate: run launches in tiledmm's confined worker process (default), where a fault, a hang,
    a wild write or a hostile kernel cannot reach this process or this account's files; False
    runs them here, UNCONFINED, with this process's rights (less overhead, no protection: for
    trusted code only; the compile is confined either way).
    Raises CompileError (a ValueError) with the compiler's diagnostics, line numbers as in
    `source`. Compiled code is cached (memory and disk), so compiling again costs nothing."""
    return Kernel(source, name, options, defines, backend, check, isolate)
