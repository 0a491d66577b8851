"""Isolation: user kernels run in a worker process, so that no kernel can kill, hang or corrupt
the Python process that launched it.

The worker (tiledmm/user_kernels/worker.py) is started on first use with a fresh interpreter (never fork:
libgomp and CUDA break after a fork), in a session of its own (Jupyter's interrupt signals the
whole process group; the worker must not die behind tiledmm's back), and is started again after
a fault. It alone loads the user's compiled code and, on `cuda`, owns a CUDA context of its own,
so an illegal address poisons only the worker's context.

The worker is confined (tiledmm/confine/sandbox.py: Landlock, seccomp, rlimits) before it imports
anything, gets an allow-listed environment, and a scratch folder of its own for its life (removed
when it ends). The caller trusts nothing that comes back.

What crosses:
- requests and replies: length-prefixed JSON over a Unix socket pair; replies are checked
  against a fixed schema with bounded sizes (check_reply), never unpickled;
- compiled emu kernels: a memfd the caller fills and passes (the worker may not make one);
- arrays: one shared-memory file per launch (memfd_create: not /dev/shm, which containers
  limit to 64 MiB and whose overrun kills with SIGBUS). The caller copies each argument into it
  once and the outputs out of it once; on `emu` the kernel works in it directly. The worker maps
  each argument's region between 1 MiB of inaccessible guard pages on either side, the buffer
  placed so that its end, rounded up to 256 bytes (cudaMalloc's alignment), meets the next
  guard: an access past that end (up to 1 MiB past) faults at once and is reported with the
  argument and the index. What it cannot catch: the up to 255 bytes of padding after a buffer
  (padding on a GPU too), and the slack before a buffer's start within its first page (up to
  4 KiB less its size); an access farther away may land in another argument's buffer.
- the kernel's printf output (the worker's stdout), shown in the caller after the launch;
- the fault report (the worker's stderr, tiledmm_fault.h), turned into KernelError.

Timeouts and Ctrl-C: the caller waits in short steps; on KeyboardInterrupt or when `timeout`
seconds pass, it kills the worker (the next call starts a new one).

Between calls (the emu worker, where a kernel is host code): a kernel may leave threads running
after it returns. The caller stops the worker's process group (SIGSTOP, which no code in it can
catch or undo) once a reply is in, before it copies any output out, and continues it (SIGCONT)
with the next request: no CPU is burnt and no output changes with no call in progress. It also
counts the worker's threads while it is stopped, against those it had before any kernel ran plus
the emulator's OpenMP pool: a worker with more is killed (a spawned thread would wake in the next
call, maybe another submission's), and the next call starts a fresh one. All of this runs in the
caller: nothing in the worker can be trusted to police a kernel that shares its address space.
"""
import atexit
import base64
import binascii
import ctypes
import json
import mmap
import os
import queue
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np

from .. import _backend
from .. import _settings
from . import sandbox
from ..errors import KernelError

PAGE = mmap.PAGESIZE
ALIGN = 256                     # cudaMalloc's alignment
GUARD = 1 << 20                 # inaccessible bytes before and after each argument's region:
                                # address space only (tiledmm_fault.h's TM_FAULT_GUARD)
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)   # map all pages at once, not one fault each
DEFAULT_TIMEOUT = 60.0          # seconds: a runaway `while (1) {}` ends here
_END_OF_OUTPUT = b"\0tiledmm-end-of-launch\0"
_SIGNALS = {getattr(signal, n): n for n in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT",
                                           "SIGKILL", "SIGTERM", "SIGTRAP", "SIGSYS")}


def default_timeout():
    """$TILEDMM_KERNEL_TIMEOUT seconds, else DEFAULT_TIMEOUT."""
    value = _settings.get("TILEDMM_KERNEL_TIMEOUT")
    try:
        return float(value) if value else DEFAULT_TIMEOUT
    except ValueError:
        raise ValueError(f"TILEDMM_KERNEL_TIMEOUT={value!r} is not a number of seconds") from None


# ---------------------------------------------------------------------------------------------
# messages: JSON both ways, never pickle. The caller trusts nothing the worker sends: a reply is
# parsed as JSON (no object the worker names is ever built), bounded in size, and checked field
# by field against the schema below before anything reads it (check_reply). File descriptors
# travel only from the caller to the worker; the caller reads replies with a plain recv, so any
# descriptor the worker sends is dropped by the kernel.

MAX_REPLY_BYTES = 1 << 20           # a reply: timings, counters, a message
MAX_COMPILE_REPLY_BYTES = 64 << 20  # compile_cuda's reply carries the cubin
MAX_TEXT = 64 << 10                 # characters of a message or log shown to the caller


class ProtocolError(RuntimeError):
    """The worker sent something outside the schema: it is not trusted again (killed)."""


def _json_default(obj):
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    raise TypeError(f"cannot send a {type(obj).__name__} to tiledmm's worker")


def _bytes_hook(d):
    if len(d) == 1 and "$bytes" in d and isinstance(d["$bytes"], str):
        return base64.b64decode(d["$bytes"], validate=True)
    return d


def encode(obj):
    return json.dumps(obj, default=_json_default, allow_nan=True).encode()


def decode(data):
    """JSON with bytes as {"$bytes": base64}; nothing else is built from it."""
    return json.loads(data.decode("utf-8"), object_hook=_bytes_hook)


def send_message(sock, obj, fds=()):
    """Send one JSON message; `fds` (open file descriptors) ride along with its header (the
    caller to the worker only)."""
    data = encode(obj)
    header = struct.pack("=Q", len(data))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(data)


def _recv_exact(sock, n, fds):
    chunks, got = [], 0
    while got < n:
        if fds is not None and not got:
            chunk, new_fds, _, _ = socket.recv_fds(sock, n, 4)
            fds.extend(new_fds)
        else:
            chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_message(sock):
    """The worker's side: (request, file descriptors received with it). The caller is trusted."""
    fds = []
    (n,) = struct.unpack("=Q", _recv_exact(sock, 8, fds))
    return decode(_recv_exact(sock, n, None)), fds


REPLY_SECONDS = 30.0   # a reply once begun must end within this (a worker may stop halfway)


def recv_reply(sock, limit=MAX_REPLY_BYTES):
    """The caller's side: one reply of at most `limit` bytes, parsed as JSON (ProtocolError
    otherwise), read within REPLY_SECONDS once it has begun. No descriptor is accepted."""
    previous = sock.gettimeout()
    sock.settimeout(REPLY_SECONDS)
    try:
        (n,) = struct.unpack("=Q", _recv_exact(sock, 8, None))
        if n > limit:
            raise ProtocolError(f"the worker sent a reply of {n} bytes (at most {limit})")
        data = _recv_exact(sock, n, None)
    except socket.timeout:
        raise ProtocolError("the worker stopped in the middle of a reply") from None
    finally:
        sock.settimeout(previous)
    try:
        reply = decode(data)
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise ProtocolError(f"the worker sent a reply that is not JSON ({exc})") from None
    if not isinstance(reply, dict):
        raise ProtocolError("the worker's reply is not an object")
    return reply


def _text(v, what, limit=MAX_TEXT):
    if not isinstance(v, str):
        raise ProtocolError(f"{what} is not text")
    return v if len(v) <= limit else v[:limit] + f"\n[... {len(v) - limit} characters cut]"


def _number(v, what, integer=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or \
            (integer and not isinstance(v, int)):
        raise ProtocolError(f"{what} is not a{'n integer' if integer else ' number'}")
    if integer and not -2**63 <= v < 2**64:
        raise ProtocolError(f"{what} is out of range")
    return v


def _dim3(v, what):
    if not isinstance(v, list) or len(v) != 3:
        raise ProtocolError(f"{what} is not three integers")
    return tuple(_number(x, what, True) for x in v)


# the fields of a launch's raw result: name -> kind
# The raw launch result: csrc/result.c's table, and the profile counters tiledmm adds in Python.
def _raw_fields():
    return {**_backend.raw_launch_fields(), "profile_counts": "counters"}


_ERROR_KINDS = {"MemoryError", "KernelError", "CompileError", "CompileTimeout", "RuntimeError",
                "ValueError", "TypeError", "LookupError", "OSError", "ProtocolError"}


def _check_raw(raw):
    fields = _raw_fields()
    if not isinstance(raw, dict) or set(raw) - set(fields):
        raise ProtocolError("the launch's result has fields outside the schema")
    out = {}
    for k, v in raw.items():
        kind = fields[k]
        if kind == "samples":
            if not isinstance(v, list) or len(v) > 1_000_000:
                raise ProtocolError("samples_ms is not a list of numbers")
            out[k] = [float(_number(x, k)) for x in v]
        elif kind == "number":
            out[k] = float(_number(v, k))
        elif kind == "int":
            out[k] = _number(v, k, True)
        elif kind == "dim3":
            out[k] = _dim3(v, k)
        elif kind == "text":
            out[k] = _text(v, k, 200)
        else:
            if not isinstance(v, dict) or len(v) > 256:
                raise ProtocolError("profile_counts is not a table of counters")
            out[k] = {_text(n, "a counter's name", 64): float(_number(x, n)) for n, x in v.items()}
    missing = {"samples_ms", "h2d_ms", "d2h_ms", "grid", "block"} - set(out)
    if missing:
        raise ProtocolError(f"the launch's result lacks {sorted(missing)}")
    return out


def check_reply(reply, op):
    """The reply to request `op`, every field checked (types, sizes): ProtocolError otherwise."""
    if set(reply) - {"ok", "error", "kind", "message", "log", "traceback", "exit", "raw",
                     "artifact", "pid", "confined"}:
        raise ProtocolError("the worker's reply has fields outside the schema")
    out = {}
    if reply.get("ok") is True:
        out["ok"] = True
        if op == "launch":
            out["raw"] = _check_raw(reply.get("raw"))
        elif op == "compile_cuda":
            a = reply.get("artifact")
            if not isinstance(a, dict) or set(a) != {"key", "name", "image", "lowered", "log",
                                                     "origin"}:
                raise ProtocolError("compile_cuda's artifact is outside the schema")
            if not isinstance(a["image"], bytes) or a["origin"] not in ("compiled", "disk_hits"):
                raise ProtocolError("compile_cuda's artifact is outside the schema")
            out["artifact"] = {"key": _text(a["key"], "key", 256), "name": _text(a["name"], "name", 4096),
                               "image": a["image"], "lowered": _text(a["lowered"], "lowered", 4096),
                               "log": _text(a["log"], "log"), "origin": a["origin"]}
        elif op == "ping":
            out["pid"] = _number(reply.get("pid"), "pid", True)
            out["confined"] = bool(reply.get("confined"))
    else:
        kind = reply.get("error")
        if kind not in _ERROR_KINDS:
            kind = "RuntimeError"
        if kind == "KernelError":   # what failed the launch: KernelError.kind, never guessed
            if reply.get("kind") not in KernelError.KINDS:
                raise ProtocolError("a KernelError reply without a known kind")
            out["kind"] = reply["kind"]
        out.update(error=kind, message=_text(reply.get("message", ""), "message"),
                   log=_text(reply.get("log", ""), "log"),
                   traceback=_text(reply.get("traceback", ""), "traceback", 8192))
    if reply.get("exit") is True:
        out["exit"] = True
    return out


# ---------------------------------------------------------------------------------------------
# the arguments' shared memory

def _round_up(n, m):
    return (n + m - 1) // m * m


class ArgumentFile:
    """The shared-memory file the arguments cross in, kept from call to call (a new file's pages
    must be allocated and faulted in, which for 256 MiB costs more than the copies), grown when
    a call needs more, and let go after a call that needed more than KEEP_BYTES."""
    KEEP_BYTES = 1 << 30

    def __init__(self):
        self.fd, self.map, self.capacity = -1, None, 0

    def reserve(self, size):
        """A file and a mapping of at least `size` bytes."""
        if size <= self.capacity:
            return
        self.release()
        capacity = _round_up(max(size, 1), 16 * PAGE)
        _check_host_memory(capacity)
        # sealed against shrinking and growing: a kernel that finds this file in /proc/self/fd
        # can neither make the caller's copies fault (SIGBUS) nor keep memory outside its limits
        try:
            fd = sandbox.sealed_memory("tiledmm-args", capacity)
        except OSError as exc:
            raise MemoryError(f"cannot make {capacity} bytes of shared memory for the kernel's "
                              f"arguments: {exc}") from None
        try:
            self.map = mmap.mmap(fd, capacity, flags=mmap.MAP_SHARED | _MAP_POPULATE)
        except OSError as exc:
            os.close(fd)
            raise MemoryError(f"cannot make {capacity} bytes of shared memory for the kernel's "
                              f"arguments: {exc}") from None
        self.fd, self.capacity = fd, capacity

    def after_call(self):
        if self.capacity > self.KEEP_BYTES:
            self.release()

    def release(self):
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:   # a view is still alive somewhere: the GC unmaps it later
                pass
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.map, self.capacity = -1, None, 0


def _check_host_memory(nbytes):
    """MemoryError, not the OOM killer, for a shared file larger than the process can get: its
    pages belong to the caller (the host memory guard of emu/host_memory.h)."""
    limit, source, available, why = _backend.module("emu").host_memory()
    for bound, what in ((limit, source), (available, why)):
        if bound and nbytes > bound:
            raise MemoryError(f"out of memory: the kernel's arguments need {nbytes / 1e9:.3g} GB "
                              f"of shared memory to reach tiledmm's worker process; the process "
                              f"can have {bound / 1e9:.3g} GB ({what}). Use smaller arrays, or "
                              "isolate=False (no copy, no protection)")


class Segment:
    """The pointer arguments of one launch, laid out in the worker's ArgumentFile. Region i holds
    argument i's bytes at its `data_offset`, placed so that the buffer's 256-byte-rounded end is
    the region's end. regions: [(file offset, length, data offset)]. Use it while holding the
    worker's lock (the file is the worker's, one call at a time)."""

    def __init__(self, sizes, file):
        self.regions, offset = [], 0
        for n in sizes:
            padded = _round_up(n, ALIGN)
            length = _round_up(padded, PAGE)
            self.regions.append((offset, length, length - padded))
            offset += length
        self.size = offset
        file.reserve(self.size)
        self.fd, self.map = file.fd, file.map

    def view(self, i, nbytes):
        """The bytes of argument i, as a uint8 NumPy array over the shared memory."""
        offset, _, data_offset = self.regions[i]
        return np.frombuffer(self.map, np.uint8, nbytes, offset + data_offset) if nbytes \
            else np.empty(0, np.uint8)


class _Libc:
    """mmap/munmap through ctypes: Python's mmap module cannot map at a fixed address, which
    placing regions between guard pages needs."""
    PROT_NONE, PROT_RW = 0, mmap.PROT_READ | mmap.PROT_WRITE
    # MAP_FIXED is 0x10 on Linux and macOS; MAP_NORESERVE is in Python's mmap module on Linux
    # (and on macOS from Python 3.13); Linux's 0x4000 is another flag on macOS, so elsewhere none
    MAP_FIXED = 0x10
    MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)

    def __init__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        self.mmap, self.munmap = libc.mmap, libc.munmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

    def map(self, addr, length, prot, flags, fd, offset):
        out = self.mmap(addr, length, prot, flags, fd, offset)
        if out is None or out == ctypes.c_void_p(-1).value:
            err = ctypes.get_errno()
            raise MemoryError(f"mmap of {length} bytes failed: {os.strerror(err)}")
        return out


def map_regions(fd, regions):
    """Worker side: map each region of the shared file between guard pages. Returns (base,
    total length, [address of each argument's buffer]); unmap with unmap_regions."""
    libc = _Libc()
    total = GUARD + sum(length + GUARD for _, length, _ in regions)
    base = libc.map(None, total, libc.PROT_NONE,
                    mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | libc.MAP_NORESERVE, -1, 0)
    addresses, pos = [], GUARD
    try:
        for offset, length, data_offset in regions:
            if length:
                libc.map(base + pos, length, libc.PROT_RW,
                         mmap.MAP_SHARED | libc.MAP_FIXED | _MAP_POPULATE, fd, offset)
            addresses.append(base + pos + data_offset)   # an empty buffer points at a guard page
            pos += length + GUARD
    except BaseException:
        libc.munmap(base, total)
        raise
    return base, total, addresses


def unmap_regions(base, total):
    _Libc().munmap(base, total)


# ---------------------------------------------------------------------------------------------
# the worker, seen from the caller

class _Pipe:
    """A reader thread that keeps what the worker writes to one of its pipes."""

    def __init__(self, stream, keep_last):
        self.data = bytearray()
        self.keep_last = keep_last   # a kernel printing in an endless loop must not fill memory
        self.dropped = 0
        self.cond = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True,
                                       name="tiledmm-worker-pipe")
        self.thread.start()

    def _read(self, stream):
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            with self.cond:
                if not chunk:
                    self.closed = True
                    self.cond.notify_all()
                    return
                self.data += chunk
                if len(self.data) > 2 * self.keep_last:
                    self.dropped += len(self.data) - self.keep_last
                    del self.data[:-self.keep_last]
                self.cond.notify_all()

    def take_until(self, marker, timeout):
        """The bytes before `marker` (consumed with it), waiting up to `timeout` s for it; at the
        end of the stream or the timeout, everything there is."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while marker not in self.data and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            i = self.data.find(marker)
            end = len(self.data) if i < 0 else i
            out = bytes(self.data[:end])
            del self.data[:end + (len(marker) if i >= 0 else 0)]
            return out

    def tail(self, timeout=2.0):
        """Everything read so far, after waiting up to `timeout` s for the end of the stream."""
        self.thread.join(timeout)
        with self.cond:
            return bytes(self.data)


class _Starter:
    """One long-lived daemon thread that starts worker processes (see Worker._start)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs = None
        self.owner = None

    def run(self, fn):
        with self.lock:
            if self.jobs is None or self.owner != os.getpid():   # first use, or forked
                self.jobs, self.owner = queue.Queue(), os.getpid()
                threading.Thread(target=self._serve, args=(self.jobs,), daemon=True,
                                 name="tiledmm-worker-starter").start()
            done, box = threading.Event(), []
            self.jobs.put((fn, box, done))
            done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    @staticmethod
    def _serve(jobs):
        while True:
            fn, box, done = jobs.get()
            try:
                box.append(fn())
            except BaseException as exc:   # handed to the caller
                box.append(exc)
            done.set()


_STARTER = _Starter()


class Worker:
    """The worker process: started on first use, started again after a fault or a kill."""
    STDOUT_KEEP = 4 << 20       # bytes of the kernel's printf output kept for one call

    def __init__(self, devices=False, host_code=True):
        self.devices = devices    # the cuda worker: /dev/nvidia* in its sandbox policy
        # kernels run as host code in it (emu): stopped between calls, its threads counted.
        # On cuda only NVRTC's device code runs (on the GPU), and the driver keeps threads
        self.host_code = host_code
        self.baseline = 0         # the worker's threads before any kernel ran
        self.pool = 0             # OpenMP pool threads its launches may have started
        self.paused = False
        self.lock = threading.RLock()
        self.proc = self.sock = self.stdout = self.stderr = None
        self.scratch = None
        self.loaded = set()       # artifact keys the current worker has loaded
        self.starts = 0
        self.last_stderr = ""
        self.owner = os.getpid()  # a forked child must not talk to its parent's worker
        self.args_file = ArgumentFile()

    @property
    def pid(self):
        return self.proc.pid if self.alive() else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _start(self):
        """A fresh interpreter that confines itself (run_policy: its scratch folder writable, no
        exec, no processes, no network; /dev/nvidia* where a GPU is) before it imports tiledmm
        or starts a thread, then serves requests (tiledmm/user_kernels/worker.py)."""
        sandbox.warn_if_unconfined("tm.compile's kernels")
        self.scratch = sandbox.scratch_folder("worker")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        policy = sandbox.run_policy(self.scratch, devices=self.devices)
        # PR_SET_PDEATHSIG fires when the *thread* that started the worker ends, and a call may
        # come from any thread: the worker is started from one long-lived thread (_STARTER),
        # and its parent watch (tiledmm/user_kernels/worker.py) stays for the rest
        argv = sandbox.python_argv("user_kernels.worker", policy, call=f"main({theirs.fileno()})",
                                    die_with_parent=True)
        env = sandbox.minimal_env({"TILEDMM_WORKER": "1", "TMPDIR": self.scratch})
        # a kernel's path is chosen where it is compiled, in this process, when it is called
        # (compile_emu.split_wanted): the worker, started once, must not hold an older choice
        env.pop("TILEDMM_EMU_SPLIT", None)
        try:
            self.proc = _STARTER.run(lambda: subprocess.Popen(
                argv, pass_fds=[theirs.fileno()], env=env, cwd=self.scratch,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True))
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.stdout, self.stderr = _Pipe(self.proc.stdout, self.STDOUT_KEEP), _Pipe(self.proc.stderr, 65536)
        self.loaded = set()
        self.starts += 1
        self.pool, self.paused = 0, False
        if self.host_code:   # its own threads, counted once it serves and before any kernel ran
            try:
                send_message(self.sock, {"op": "ping"})
                check_reply(self._wait(_START_SECONDS, "tiledmm's worker", "ping"), "ping")
            except BaseException:   # Ctrl-C included: a reply left unread would answer the next
                self._kill()         # request
                raise
            self._show_output(0.5)
            self.baseline = _thread_count(self.proc.pid)

    def stop(self):
        """End the worker (killed at once: it may be running a kernel that never ends)."""
        with self.lock:
            self._kill()
            self.args_file.release()

    def _kill(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)   # its own session: its group
            except OSError:
                self.proc.kill()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:   # not reaped yet (a task stuck in the kernel)
            pass
        self._forget()

    def _forget(self):
        for f in (self.sock, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except (OSError, AttributeError):
                pass
        self.proc = self.sock = None
        self.loaded, self.paused = set(), False
        if self.scratch:   # the worker's scratch folder lives as long as the worker
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def call(self, request, fds=(), timeout=None, what="the kernel"):
        """Send `request`, wait for the reply (at most `timeout` s; None: no limit), show the
        worker's printf output, and return the reply. A worker that dies raises KernelError
        with its fault report; a timeout kills it and raises KernelError; Ctrl-C kills it and
        raises KeyboardInterrupt. The next call starts a new worker."""
        with self.lock:
            if self.owner != os.getpid():   # forked: the worker is the parent's; start our own
                self.proc = self.sock = self.stdout = self.stderr = None
                self.owner, self.loaded, self.args_file = os.getpid(), set(), ArgumentFile()
            if not self.alive():
                if self.proc is not None:
                    self._forget()
                self._start()
            self._resume()
            try:
                send_message(self.sock, request, fds)
                reply = check_reply(self._wait(timeout, what, request["op"]), request["op"])
            except KeyboardInterrupt:
                self._show_output(0.2)
                self._kill()
                raise
            except ProtocolError as exc:   # a worker that breaks the schema is not heard again
                self._show_output(0.2)
                self._kill()
                raise KernelError(f"{what}: tiledmm's worker sent a reply outside its schema "
                                  f"({exc}); it was stopped (the worker is started again for "
                                  "the next call)", kind=KernelError.WORKER) from None
            self._show_output(5.0)
            if isinstance(reply, dict) and reply.get("exit"):
                try:   # the worker ends itself (a CUDA error may have poisoned it)
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:   # a kernel's thread or atexit holds it
                    self._kill()
                else:
                    self._forget()
            elif self.host_code:
                self._pause(request)
            return reply

    def _pause(self, request):
        """Stop the worker until the next request; kill it if a kernel left threads behind."""
        if request.get("op") == "launch":
            blocks = 1
            for n in request.get("grid") or (1,):
                blocks *= max(int(n), 1)
            threads = request.get("emu_threads") or len(os.sched_getaffinity(0))
            self.pool = max(self.pool, min(int(threads), blocks) - 1)
        pid = self.proc.pid
        try:
            os.killpg(pid, signal.SIGSTOP)
        except OSError:
            return
        self.paused = True
        if not _stopped(pid, _STOP_SECONDS) or _thread_count(pid) > self.baseline + self.pool:
            self._kill()

    def _resume(self):
        if self.paused and self.proc is not None:
            self.paused = False
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass

    def _wait(self, timeout, what, op):
        start = time.monotonic()
        while True:
            left = None if timeout is None else timeout - (time.monotonic() - start)
            if left is not None and left <= 0:
                self._show_output(0.2)
                self._kill()
                # check mode's first report, written to stderr as it was recorded
                # (tiledmm_kernel.h, tm_check_report_at): the launch never got to return it
                found = [ln[len("tiledmm check: "):] for ln in self.last_stderr.splitlines()
                         if ln.startswith("tiledmm check: ")][:1]
                raise KernelError(f"{what} ran for more than {timeout:g} s and was stopped by "
                                  "its timeout (a loop that never ends?). Pass timeout=None for "
                                  "no limit, or a larger timeout=."
                                  + "".join(f"\ntiledmm check, before the timeout: {ln}"
                                            for ln in found), kind=KernelError.TIMEOUT)
            try:
                ready = self._readable(0.1 if left is None else min(0.1, left))
                if ready:
                    return recv_reply(self.sock, MAX_COMPILE_REPLY_BYTES if op == "compile_cuda"
                                      else MAX_REPLY_BYTES)
            except (EOFError, ConnectionError):
                pass
            else:
                if self.proc.poll() is None:
                    continue
            raise self._death(what)

    def _readable(self, seconds):
        return select.select([self.sock], [], [], seconds)[0]

    def _death(self, what):
        """The KernelError for a worker that died: its fault report, else its signal and the
        end of what it wrote to stderr."""
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self._kill()
        code = self.proc.returncode
        self._show_output(0.5)
        err = self.last_stderr + self.stderr.tail().decode(errors="replace")
        self._forget()
        reports = [ln[len("tiledmm-fault: "):] for ln in err.splitlines()
                   if ln.startswith("tiledmm-fault: ")]
        context = [ln for ln in err.splitlines() if ln.strip() and
                   not ln.startswith("tiledmm-fault: ")][-12:]
        # the kind from how the worker ended: the fault handler raises the signal again after
        # writing its report (tiledmm_fault.h), so the exit status is the signal either way
        kind = KernelError.SANDBOX if code == -signal.SIGSYS else \
            KernelError.SIGNAL if code is not None and code < 0 else KernelError.WORKER
        if reports:
            text = re.sub(r"made system call (\d+), which the sandbox refuses",
                          lambda m: "tried to " + sandbox.describe_refused_call(int(m[1])),
                          reports[0])
        elif code == -signal.SIGSYS:   # the seccomp trap, with signals blocked (posix_spawn)
            text = (f"sandbox: {what} made a system call the sandbox refuses (SIGSYS: a "
                    "program, a process, a network socket or another process's memory); "
                    "student code may only compute on its arrays")
        elif code is not None and code < 0:
            text = f"{what} ended tiledmm's worker process with {_SIGNALS.get(-code, -code)}"
        else:
            text = f"{what} ended tiledmm's worker process (exit code {code})"
        if context:
            text += "\nthe worker's last messages:\n  " + "\n  ".join(context)
        return KernelError(text + "\n(the worker is started again for the next call)", kind=kind)

    def _show_output(self, wait):
        """Print what the kernel printed (the worker's stdout) and keep what the worker wrote to
        stderr since the last request in `last_stderr` (the emulator's reports)."""
        if self.stdout is None:
            return
        text = self.stdout.take_until(_END_OF_OUTPUT, wait)
        if self.stdout.dropped:
            sys.stdout.write(f"[tiledmm: the kernel printed more than the {self.STDOUT_KEEP} "
                             f"bytes kept; the first {self.stdout.dropped} bytes are not shown]\n")
            self.stdout.dropped = 0
        if text:
            sys.stdout.write(text.decode(errors="replace"))
            sys.stdout.flush()
        self.last_stderr = self.stderr.take_until(_END_OF_OUTPUT, wait).decode(errors="replace")


_START_SECONDS = 120.0    # a worker's start-up (a fresh interpreter, NumPy, tiledmm): a loaded host
_STOP_SECONDS = 5.0       # every thread of a stopped worker has stopped (one in the kernel may lag)


def _thread_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _stopped(pid, seconds):
    """Whether every thread of child `pid` stopped within `seconds`: waitid reports a group stop
    once all have; WSTOPPED without WEXITED never reaps it (Popen keeps its exit status)."""
    start = time.monotonic()
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return False
        waited = time.monotonic() - start
        if waited > seconds:
            return False
        # the worker's threads stop as soon as they run: let them (a sleep's timer slack is
        # longer than a stop takes), then poll more slowly for one held up
        os.sched_yield() if waited < 0.005 else time.sleep(0.0005)


def _has_gpu_devices():
    return os.path.exists("/dev/nvidiactl")


# One worker per backend: the cuda worker's policy opens /dev/nvidia* and lets the driver make
# shared memory and go without RLIMIT_DATA; an emu kernel never runs under that policy, so on a
# GPU machine too it stays bounded and cannot map shared memory of its own.
_WORKERS = {"emu": Worker(devices=False),
            "cuda": Worker(devices=_has_gpu_devices(), host_code=False)}


def worker(backend="emu"):
    """The process-wide worker of `backend` (one at a time; calls from several threads take
    turns)."""
    return _WORKERS[backend]


def stop_workers():
    """End every worker (their process groups), e.g. before a grader writes its results."""
    for w in _WORKERS.values():
        w.stop()


def end_of_output_marker():
    return _END_OF_OUTPUT


atexit.register(stop_workers)
