"""Loading a compiled user kernel and launching it: what tm.compile does in the caller
(isolate=False) and what the worker does (tiledmm/user_kernels/worker.py). Compiling is
tiledmm/toolchain/compile_emu.py's and compile_nvrtc.py's; this module only opens the image they
made and runs it, counted by profile mode's hooks when it is a profile build.
"""
import ctypes
import fcntl
import hashlib
import os
import tempfile
from types import SimpleNamespace

from ..profiling.counters import bind, counted_run

__all__ = ["load_emu", "image_memfd", "load_emu_fd", "counted_launch"]


def load_emu(artifact, report_faults):
    """Load a compiled kernel from its bytes: written to an anonymous in-memory file
    (memfd_create, else a private temporary file) and opened from there, so no file another
    process can touch is ever loaded. With report_faults, install its fault handlers
    (tiledmm's worker process only). Returns SimpleNamespace(handle=launcher address,
    keep=library)."""
    if hashlib.sha256(artifact.image).hexdigest() != artifact.digest:
        raise RuntimeError(f"kernel '{artifact.name}': the compiled code changed in memory")
    if hasattr(os, "memfd_create"):
        # The file stays open as long as the library is loaded: the dynamic loader knows a
        # library by its path, and a closed descriptor's number (and so its path) is reused.
        fd = os.memfd_create(f"tiledmm-{artifact.name}", os.MFD_CLOEXEC)
        os.write(fd, artifact.image)
        lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
    else:
        fd, path = tempfile.mkstemp(prefix="tiledmm-kernel-", suffix=".so")
        try:
            os.write(fd, artifact.image)
            lib = ctypes.CDLL(path)
        finally:
            os.unlink(path)
    lib.tm_loaded_from_fd = fd
    if report_faults:
        lib.tm_user_fault_setup()
    return SimpleNamespace(handle=ctypes.cast(lib.tm_user_launch, ctypes.c_void_p).value, keep=lib)


def image_memfd(artifact):
    """A memfd holding the compiled kernel, made by the caller for the worker (which may not make
    one: tiledmm/confine/sandbox.py), sealed against changes."""
    fd = os.memfd_create(f"tiledmm-{artifact.name}"[:200],
                         os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 2))
    try:
        os.write(fd, artifact.image)
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                        fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
        except (AttributeError, OSError):
            pass
    except BaseException:
        os.close(fd)
        raise
    return fd


def load_emu_fd(fd, name, digest, report_faults):
    """The worker's load_emu: the kernel from a memfd the caller passed, checked against its
    digest, then opened through /proc/self/fd (which Landlock lets through: the file is the
    process's own anonymous memory). The descriptor must stay open while the library is."""
    h, offset = hashlib.sha256(), 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            break
        h.update(chunk)
        offset += len(chunk)
    if h.hexdigest() != digest:
        raise RuntimeError(f"kernel '{name}': the compiled code does not match its digest")
    lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
    lib.tm_loaded_from_fd = fd
    if report_faults:
        lib.tm_user_fault_setup()
    return SimpleNamespace(handle=ctypes.cast(lib.tm_user_launch, ctypes.c_void_p).value, keep=lib)


def counted_launch(mod, loaded, grid, block, shared, packed, warmup, repeat, profile,
                   flush_l2=True):
    """The backend's user_run of a loaded kernel (flush_l2: the L2 flush before each timed
    launch, csrc/launch_core.c); with profile (a profile build), counted by its hooks: the pointer
    arguments' memory is global memory, and raw["profile_counts"] holds the counters
    (tiledmm.profile)."""
    run = lambda: mod.user_run(loaded.handle, grid, block, shared, packed,  # noqa: E731
                               warmup, repeat, flush_l2)
    if not profile:
        return run()
    lib, names = bind(loaded.keep)
    ranges = [(arg[2] or arg[1].ctypes.data, arg[3]) for arg in packed
              if arg[0] == "p" and arg[3]]
    raw, counts = counted_run(lib, names, ranges, run)
    raw["profile_counts"] = counts
    return raw
