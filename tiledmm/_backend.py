"""Which compiled backend runs a call: `cuda` (the GPU) or `emu` (the CPU emulator).

Default: `cuda` when its module was built and a device is present, else `emu` with a
one-line notice. `TILEDMM_BACKEND`, `tiledmm.set_backend` and every call's `backend=`
override it.
"""
import functools
import importlib
import sys
import threading

from . import _settings

BACKENDS = ("cuda", "emu")
_modules = {}
_import_errors = {}
_lock = threading.Lock()
_chosen = None  # set_backend's choice, or the resolved default
_notice_shown = False


def module(name):
    """The extension module of a backend, or a RuntimeError that says how to get it."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    with _lock:
        if name not in _modules and name not in _import_errors:
            try:
                _modules[name] = importlib.import_module(f"tiledmm._{name}")
            except ImportError as exc:
                _import_errors[name] = exc
    if name in _modules:
        return _modules[name]
    if name == "cuda":
        raise RuntimeError(
            "tiledmm's cuda backend was not built: nvcc was not found when tiledmm was "
            "installed. Install the CUDA toolkit (nvcc on PATH or CUDA_HOME set) and reinstall "
            "with `pip install .`, or run on the CPU emulator with backend='emu' "
            f"(import error: {_import_errors[name]})")
    raise RuntimeError(f"tiledmm's {name} backend failed to import: {_import_errors[name]}")


@functools.lru_cache(maxsize=None)
def raw_launch_fields():
    """{field: kind} of the raw launch result the C glue returns (csrc/result.c's one table,
    the same in both builds; the emulator's is always built): what the worker's replies are
    checked against and what a launch that never ran reports."""
    return dict(module("emu").RAW_LAUNCH_FIELDS)


def cuda_device_count():
    """Number of CUDA devices (0 without a built cuda backend, a driver or a device)."""
    try:
        count, _error = module("cuda").device_count()
    except RuntimeError:
        return 0
    return count


def _default():
    global _notice_shown
    env = _settings.get("TILEDMM_BACKEND")
    if env:
        if env not in BACKENDS:
            raise ValueError(f"TILEDMM_BACKEND={env!r}; choose one of {', '.join(BACKENDS)}")
        return env
    if cuda_device_count() > 0:
        return "cuda"
    if not _notice_shown:
        _notice_shown = True
        print("tiledmm: no CUDA device found; running kernels on the CPU emulator (backend='emu')",
              file=sys.stderr)
    return "emu"


def get_backend():
    """The backend a call without `backend=` uses."""
    global _chosen
    if _chosen is None:
        _chosen = _default()
    return _chosen


def set_backend(name):
    """Make `name` ('cuda', 'emu', or None for the default) the backend of later calls, and
    return it. A backend that cannot run (say `cuda` without a build) fails here, with the
    reason.

    >>> tm.set_backend("emu")
    'emu'
    >>> tm.get_backend()
    'emu'
    """
    global _chosen
    if name is None:
        _chosen = None
        return get_backend()
    module(name)  # fail now, with the reason, rather than at the next call
    _chosen = name
    return name


def resolve(backend):
    return module(backend or get_backend()), backend or get_backend()
