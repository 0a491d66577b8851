"""Compiling a submission with limits. tm.compile already parses and compiles the source only in
a confined compile child (tiledmm/confine/sandbox.py, tiledmm/toolchain/compile_emu.py): Landlock lets it read the
toolchain and tiledmm's headers and write one scratch folder; seccomp lets it run the compiler's
passes but reach no network; it runs in a session of its own with a wall-clock limit, a CPU-time
limit and a data-segment limit (RLIMIT_DATA, not RLIMIT_AS: the CUDA driver and the emulator's
fiber stacks reserve address space they never use). Here the grader's limits are passed to it.
What it builds lands in tiledmm's verified disk cache, written by the grader alone; the
submission's code never runs in the grader's process (its launches run in tiledmm's confined
worker process, with the per-case timeout)."""
import warnings

from .. import _backend
from ..toolchain.compile_emu import CompileTimeout, compile_emu, kernel_signature_confined
from ..errors import CompileWarning
from ..user_kernels.kernel import Kernel

__all__ = ["compile_submission", "CompileLimitError"]

# Each confined compile child of a submission (one per build: plain, check mode), as a whole.
GRADING_COMPILE_CHILD_SECONDS = 120.0
COMPILE_MEMORY_MB = 4096


class CompileLimitError(RuntimeError):
    """The compile ran past its time or memory limit."""


def compile_submission(source, name, options, backend, check, *,
                       seconds=GRADING_COMPILE_CHILD_SECONDS, memory_mb=COMPILE_MEMORY_MB):
    """(Kernel, [warning lines]): compiled for `backend` (and in check mode too when `check`)
    in the confined compile child with these limits; the Kernel made here finds both builds in
    the disk cache. Raises CompileError, CompileLimitError or ValueError (no such kernel,
    several kernels)."""
    backend = _backend.resolve(backend)[1]
    try:
        if backend == "emu":
            resolved = name
            for mode in ([False, True] if check else [False]):
                # the check build under the resolved name, as the Kernel asks for it
                resolved = compile_emu(source, resolved if mode else name, list(options), mode,
                                       seconds=seconds, memory_bytes=int(memory_mb) << 20)[0]
        else:
            kernel_signature_confined(source, name, list(options), seconds=seconds)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # on cuda NVRTC compiles here, in the worker, within the same limit
            kernel = Kernel(source, name, options, backend=backend, compile_seconds=seconds)
    except CompileTimeout as exc:
        raise CompileLimitError(str(exc)) from None
    return kernel, [f"{w.filename}:{w.lineno}: {w.message}" for w in caught
                    if issubclass(w.category, CompileWarning)]
