"""tiledmm's worker process: where user kernels are loaded and run (tiledmm/confine/isolation.py starts
it and explains why). It serves one request at a time from the caller:

    {"op": "launch", ...}        map the arguments' shared memory, load the kernel if needed,
                                 run it (csrc/user_kernels.c), reply with the timings
    {"op": "compile_cuda", ...}  NVRTC, here rather than in the caller
    {"op": "ping"}               for tests and the overhead benchmark

A kernel that faults ends this process with a one-line report on stderr (tiledmm_fault.h). After
a CUDA error the worker replies, then exits: the error may have poisoned its context.

The worker is confined before this module is imported (tiledmm/confine/sandbox.py's bootstrap: Landlock,
seccomp, rlimits, while no other thread exists); its replies are JSON that the caller checks
field by field (tiledmm/confine/isolation.py, check_reply). A compiled emu kernel arrives as a memfd the
caller made (this process may not make one) and is loaded from /proc/self/fd/N.
"""
import ctypes
import os
import socket
import sys
import threading
import time
import traceback
from types import SimpleNamespace

import numpy as np

from .. import _backend
from .._row_tables import worker_row_table
from ..toolchain.compile_nvrtc import compile_cuda, load_cuda
from ..confine.isolation import end_of_output_marker, map_regions, recv_message, send_message, unmap_regions
from .launch import counted_launch, load_emu_fd

from ..errors import KernelError


def _watch_parent(parent):
    """End this process when the caller is gone, even in the middle of a kernel that never
    returns (the C call releases the GIL, so this thread runs)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


def _line_buffered_stdout():
    """The kernel's printf goes to C's stdout, a pipe here: line-buffered, so that what a
    faulting kernel printed before its fault is not lost."""
    libc = ctypes.CDLL(None)
    try:
        stdout = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.setvbuf(stdout, None, 1, 0)   # _IOLBF
    except (ValueError, AttributeError):
        pass
    return libc


class Server:
    def __init__(self, sock):
        self.sock = sock
        self.kernels = {}        # artifact key -> loaded kernel (handle, library)
        self.libc = _line_buffered_stdout()

    def serve(self):
        marker = end_of_output_marker()
        while True:
            try:
                request, fds = recv_message(self.sock)
            except (EOFError, ConnectionError):
                return
            self.keep_fds = set()
            try:
                reply = self.handle(request, fds)
            except Exception as exc:   # every failure becomes a reply; the worker lives on
                reply = {"error": type(exc).__name__, "message": str(exc),
                         "log": getattr(exc, "log", ""), "traceback": traceback.format_exc(limit=4)}
            finally:
                for fd in fds:
                    if fd not in self.keep_fds:   # a loaded kernel's memfd stays open
                        os.close(fd)
            self.libc.fflush(None)
            os.write(1, marker)
            os.write(2, marker)
            send_message(self.sock, reply)
            if reply.get("exit"):
                return

    def handle(self, request, fds):
        op = request["op"]
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "confined": CONFINED}
        if op == "compile_cuda":
            a = compile_cuda(request["source"], request["name"], request["options"],
                             request.get("seconds"))
            return {"ok": True, "artifact": {"key": a.key, "name": a.name, "image": a.image,
                                             "lowered": a.lowered, "log": a.log,
                                             "origin": a.origin}}
        if op == "launch":
            at = request.get("args_fd")
            return self.launch(request, fds, fds[at] if at is not None else -1)
        raise ValueError(f"unknown request {op!r}")

    def _kernel(self, request, fds):
        key = request["key"]
        if key not in self.kernels:
            artifact = request.get("artifact")
            if artifact is None:
                raise LookupError("not loaded")
            if artifact["backend"] == "emu":
                fd = fds[request["image_fd"]]
                self.kernels[key] = load_emu_fd(fd, artifact["name"], artifact["digest"],
                                                report_faults=True)
                self.keep_fds.add(fd)
            else:
                self.kernels[key] = load_cuda(SimpleNamespace(**artifact))
        return self.kernels[key]

    def launch(self, request, fds, fd):
        backend = request["backend"]
        mod = _backend.module(backend)
        kernel = self._kernel(request, fds)
        if backend == "emu" and request.get("emu_threads"):
            mod.threads(request["emu_threads"])
        base = total = None
        if request["regions"]:
            base, total, addresses = map_regions(fd, request["regions"])
        try:
            packed, keep, after = [], [], []
            for arg in request["args"]:
                arg = tuple(arg)
                if arg[0] == "s":
                    packed.append(arg)
                    continue
                if arg[0] == "r":   # a `T **` parameter: its table of row pointers, built here
                    table_arg, more, fn = worker_row_table(backend, mod, arg, addresses)
                    packed.append(table_arg)
                    keep += more
                    after += [fn] if fn else []
                    continue
                _, region, nbytes, copy_back = arg
                address = addresses[region]
                if backend == "emu":   # the kernel works in the shared memory itself
                    packed.append(("p", None, address, nbytes, False))
                else:                  # copied to and from the device by user_run
                    host = np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(
                        address))[:nbytes]
                    packed.append(("p", host, 0, nbytes, copy_back))
            try:
                raw = counted_launch(mod, kernel, tuple(request["grid"]), tuple(request["block"]),
                                     request["shared"], tuple(packed), request["warmup"],
                                     request["repeat"], request.get("profile"),
                                     bool(request.get("flush_l2", True)))
            except MemoryError as exc:
                return {"error": "MemoryError", "message": str(exc)}
            except RuntimeError as exc:
                return {"error": "KernelError", "kind": KernelError.CUDA_ERROR,
                        "message": str(exc), "exit": backend == "cuda"}
            for fn in after:   # cuda: a `T **` parameter's rows back from the device
                fn()
            # threads a kernel left behind are the caller's to find: it stops this process
            # between calls and counts them (tiledmm/confine/isolation.py, Worker._pause)
            return {"ok": True, "raw": raw}
        finally:
            if base is not None:
                unmap_regions(base, total)


CONFINED = False


def main(fd):
    """Serve requests on socket `fd`. Called by tiledmm/confine/sandbox.py's bootstrap, after it has
    confined this process (its `_ok`): the parent-watch thread starts only now."""
    global CONFINED
    boot = sys.modules.get("__main__")
    CONFINED = bool(getattr(boot, "_ok", False))
    os.environ["TILEDMM_WORKER"] = "1"
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    Server(socket.socket(fileno=fd)).serve()
    sys.stdout.flush()
    os._exit(0)
