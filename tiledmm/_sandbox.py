"""The sandbox: every process that compiles or runs student code is confined (Landlock for files
and signals, seccomp-bpf for system calls, rlimits for resources); the caller never is.

INTERFACE STUB (session 7): the functions below are the contract that tm.compile's worker, the
grader and whole programs (tm.run) call. This first version runs children unconfined; the
sandbox issue replaces the bodies, not the signatures.
"""
import dataclasses
import os
import signal
import subprocess
import sys
import time

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Policy:
    """What a confined process may do.

    read:       paths (files or folders, recursively) it may read
    execute:    paths it may read and execute (the toolchain of a compile child)
    write:      folders it may write (its scratch folder)
    allow_exec: True for a compile child (the compiler starts its passes): exec and fork allowed,
                sockets, ptrace and the rest still denied. False for anything that runs student
                code: no exec, no new processes (threads allowed)
    devices:    /dev/nvidia* read, write and ioctl (the cuda backend)
    memory_bytes, file_bytes, cpu_seconds: rlimits (None: tiledmm's default)
    """
    read: tuple = ()
    execute: tuple = ()
    write: tuple = ()
    allow_exec: bool = False
    devices: bool = False
    memory_bytes: int = None
    file_bytes: int = None
    cpu_seconds: int = None


@dataclasses.dataclass
class Completed:
    """A confined child that ended: returncode negative for a signal (as subprocess reports
    it), -9 after a timeout; stdout/stderr are None where they were not captured."""
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    confined: bool


def minimal_env(extra=None):
    """The allow-listed environment every confined child gets: never the caller's whole one."""
    keep = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
            "CXX")
    env = {k: v for k, v in os.environ.items()
           if k in keep or k.startswith("TILEDMM_")}
    env.update(extra or {})
    return env


def compile_policy(scratch, read=()):
    """A compile child: the toolchain and system headers, tiledmm's headers, `read` (the
    student's sources) readable; `scratch` writable (TMPDIR points there); exec allowed."""
    return Policy(read=tuple(read), write=(scratch,), allow_exec=True)


def run_policy(scratch, read=(), devices=False):
    """A child that runs student code: what it loads readable, `scratch` writable, no exec."""
    return Policy(read=tuple(read), write=(scratch,), devices=devices)


def status():
    """What confinement is available here: {"landlock": ABI or None, "seccomp": bool,
    "reason": text for what is missing}."""
    return {"landlock": None, "seccomp": False, "reason": "not implemented yet (stub)"}


def confine(policy):
    """Confine the calling process for the rest of its life. Call it before any thread exists.
    Returns True when confined, False when this system cannot (status() says why)."""
    return False


def run(argv, policy, *, cwd, stdin=b"", timeout=None, env=None, capture=True):
    """Run `argv` confined by `policy`, in a session of its own; its whole process group is
    ended before this returns. stdin: bytes fed to it (b"" an empty stdin), or None to inherit
    the caller's (with capture=False: a terminal program). timeout: seconds, None for no limit;
    on timeout the group gets SIGKILL and returncode is -9."""
    return _run(argv, cwd=cwd, stdin=stdin, timeout=timeout,
                env=minimal_env() if env is None else env, capture=capture)


def run_python(module, args, policy, *, cwd, stdin=b"", timeout=None, env=None, capture=True):
    """A fresh interpreter that confines itself by `policy` first, then calls
    `tiledmm.<module>.main(list(args))`; `main`'s return value is the exit code."""
    code = (f"import sys; sys.path.insert(0, {PACKAGE_PARENT!r}); "
            f"import importlib; m = importlib.import_module('tiledmm.' + {module!r}); "
            "sys.exit(m.main(sys.argv[1:]))")
    return run([sys.executable, "-c", code, *args], policy, cwd=cwd, stdin=stdin,
               timeout=timeout, env=env, capture=capture)


def _run(argv, *, cwd, stdin, timeout, env, capture):
    pipe = subprocess.PIPE if capture else None
    proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True,
                            stdin=None if stdin is None else subprocess.PIPE,
                            stdout=pipe, stderr=pipe)
    timed_out = False
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate()
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    _kill_group(proc)
    return Completed(-9 if timed_out else proc.returncode, out, err, timed_out, False)


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    time.sleep(0)
