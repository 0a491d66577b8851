"""Every TILEDMM_* environment variable, in one table: its name, when it is read (at build time by
setup.py, or at run time), which side reads it (Python, or the C/C++ of csrc/, emu/, cuda/ and
the shipped headers, through getenv), whether confined children inherit it, and what it does.

Python reads run-time settings through `get`, which refuses a name missing here; the C side reads
its own with getenv. tests/test_settings.py checks that every TILEDMM_ name in the sources is a
row here and that docs/settings.md holds `table()`.
"""
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    when: str        # "build" (setup.py) or "run"
    read_in: str     # "python", "c" or "both"
    inherit: bool    # handed to confined children (the worker, compile children, programs)
    meaning: str


SETTINGS = (
    # build time (setup.py)
    Setting("TILEDMM_CUDA_ARCHS", "build", "python", False,
            'compute capabilities to build for, e.g. "90" or "80;90" (default 75;80;86;89;90)'),
    Setting("TILEDMM_NO_CUDA", "build", "python", False,
            "1: build only the emulator backend, even where nvcc exists"),
    Setting("TILEDMM_NO_PROFILE", "build", "python", False,
            "1: skip tiledmm._emu_profile, the build behind profile=True on emu"),
    Setting("TILEDMM_EMU_ASAN", "build", "python", False,
            "1: build the emulator under AddressSanitizer"),
    Setting("TILEDMM_CUTLASS_INCLUDE", "build", "python", False,
            "CUTLASS's include folder (the one holding cutlass/), for the `cutlass` kernel"),
    Setting("TILEDMM_PROFILE_SPLIT", "build", "python", False,
            "0: the profile build keeps every registry kernel on fibers; a comma list names the "
            "kernel files it splits"),
    # run time, the caller's
    Setting("TILEDMM_BACKEND", "run", "python", True, "the default backend: cuda or emu"),
    Setting("TILEDMM_KERNEL_TIMEOUT", "run", "python", True,
            "seconds a user kernel or program may run (default 60)"),
    Setting("TILEDMM_CACHE_DIR", "run", "python", False,
            "the compiled-kernel cache (default ~/.cache/tiledmm); never shown to a child"),
    Setting("TILEDMM_SANDBOX", "run", "python", True,
            "off: run student code unconfined (never on a grader)"),
    Setting("TILEDMM_SANDBOX_MEMORY", "run", "python", True,
            "bytes of address space a confined child may use"),
    Setting("TILEDMM_SANDBOX_GPU_MEMORY", "run", "python", True,
            "bytes of private memory (RLIMIT_DATA) a confined child with the GPU may use "
            "(default: as TILEDMM_SANDBOX_MEMORY; 0: no limit)"),
    Setting("TILEDMM_SANDBOX_PRIVATE_ROOT", "run", "python", True,
            "off: no private root (mount namespace) per child: file metadata (stat, "
            "__has_include) outside the grants is then exposed, as where the host allows none"),
    Setting("TILEDMM_SANDBOX_TRAP_ALL", "run", "python", True,
            "1: a refused system call ends the child with SIGSYS, naming the call (debugging)"),
    Setting("TILEDMM_NCU", "run", "python", False, "the Nsight Compute executable"),
    Setting("TILEDMM_CUBLAS", "run", "c", True, "a path to libcublas.so for kernel='cublas'"),
    Setting("TILEDMM_HOST_MEMORY_LIMIT", "run", "c", True,
            "host memory tiledmm may use (bytes, or with a K, M, G or T suffix)"),
    Setting("TILEDMM_PIN_INPUTS", "run", "c", True,
            "0: never pin large NumPy inputs in place (always stage them)"),
    Setting("TILEDMM_PINNED_MB", "run", "c", True, "the pinned staging buffer's size in MiB"),
    # run time, the emulator's
    Setting("TILEDMM_EMU_THREADS", "run", "c", True,
            "OS threads that run blocks (default: the CPUs this process may use)"),
    Setting("TILEDMM_EMU_SPLIT", "run", "both", True,
            "0: every kernel runs one fiber per CUDA thread, none as thread loops"),
    Setting("TILEDMM_EMU_STACK_KB", "run", "c", True,
            "a fiber's stack in KiB (default 64; large local arrays need more)"),
    Setting("TILEDMM_EMU_STRICT_EXIT", "run", "c", True,
            "0: a thread that returns leaves the barrier count, as current GPUs do"),
    Setting("TILEDMM_EMU_MEMORY_MB", "run", "c", True, "the emulated device memory in MiB"),
    Setting("TILEDMM_EMU_DEVICE", "run", "c", True,
            "the emulated device preset whole programs see (H100, H200, A100)"),
    # set by tiledmm itself for its children
    Setting("TILEDMM_WORKER", "run", "both", False,
            "set to 1 in the worker process (check mode's report goes to its fault file)"),
    Setting("TILEDMM_DEVICE_MEMORY_FD", "run", "both", False,
            "the sealed memfd a program's emulated device memory lives in (set by tm.run)"),
)

BY_NAME = {s.name: s for s in SETTINGS}


def get(name, default=None):
    """os.environ[name] or `default`; `name` must be a row of SETTINGS."""
    if name not in BY_NAME:
        raise KeyError(f"{name} is not a tiledmm setting (tiledmm/_settings.py lists them)")
    return os.environ.get(name, default)


def inherited(environ=None):
    """{name: value} of the settings confined children inherit, from `environ` (os.environ)."""
    environ = os.environ if environ is None else environ
    return {s.name: environ[s.name] for s in SETTINGS if s.inherit and s.name in environ}


def table():
    """The settings as Markdown table rows (docs/settings.md holds the same)."""
    rows = ["| variable | read | by | children | what it does |", "|---|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.when} | {s.read_in} | {'yes' if s.inherit else 'no'} | "
             f"{s.meaning} |" for s in SETTINGS]
    return "\n".join(rows)
