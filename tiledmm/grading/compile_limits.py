"""Compiling a submission with limits: the compiler runs in a child process of its own (a new
session, so everything it starts is stopped together) with a wall-clock limit, a CPU-time limit
and a data-segment limit (RLIMIT_DATA, not RLIMIT_AS: the CUDA driver and the emulator's fiber
stacks reserve address space they never use). What it builds lands in tiledmm's verified disk
cache, from where the grader loads it; the submission's code never runs in the grader's process
(its launches run in tiledmm's worker process, with the per-case timeout)."""
import json
import os
import signal
import subprocess
import sys
import warnings

from ..user_kernels import CompileError, compile as tm_compile

__all__ = ["compile_submission", "CompileLimitError"]

COMPILE_SECONDS = 120.0
COMPILE_MEMORY_MB = 4096

_CHILD = r"""
import json, sys, warnings
request = json.loads(sys.stdin.read())
import tiledmm as tm
out = {"ok": True, "warnings": []}
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for check in request["checks"]:
            tm.compile(request["source"], request["name"], request["options"],
                       backend=request["backend"], check=check,
                       isolate=request["backend"] == "emu")
    out["warnings"] = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught
                       if issubclass(w.category, tm.CompileWarning)]
except tm.CompileError as exc:
    out = {"ok": False, "error": "CompileError", "message": str(exc), "log": exc.log}
except Exception as exc:
    out = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
sys.stdout.write("\n@@tiledmm-grade@@" + json.dumps(out))
"""


class CompileLimitError(RuntimeError):
    """The compile ran past its time or memory limit."""


def _limits(seconds, memory_mb):
    def apply():
        import resource
        cpu = int(seconds) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        data = int(memory_mb) << 20
        resource.setrlimit(resource.RLIMIT_DATA, (data, data))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def _child_compile(source, name, options, backend, checks, seconds, memory_mb):
    request = json.dumps({"source": source, "name": name, "options": list(options),
                          "backend": backend, "checks": list(checks)})
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_limits(seconds, memory_mb))
    try:
        out, err = proc.communicate(request, timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise CompileLimitError(f"compiling took more than {seconds:g} s and was stopped") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    marker = "\n@@tiledmm-grade@@"
    if marker not in out:
        why = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else \
            f"exit code {proc.returncode}"
        if proc.returncode in (-signal.SIGKILL, -signal.SIGXCPU):
            raise CompileLimitError(f"compiling ran past its CPU-time limit ({why})")
        raise CompileLimitError(f"the compile step failed ({why}; memory limit "
                                f"{memory_mb} MB?): {err.strip()[-2000:]}")
    return json.loads(out.rsplit(marker, 1)[1])


def compile_submission(source, name, options, backend, check, *, seconds=COMPILE_SECONDS,
                       memory_mb=COMPILE_MEMORY_MB):
    """(Kernel, [warning lines]): compiled for `backend` (and in check mode too when `check`)
    in a limited child process; the Kernel made here finds both builds in the disk cache.
    Raises CompileError, CompileLimitError or ValueError (no such kernel, several kernels)."""
    checks = [False, True] if check else [False]
    reply = _child_compile(source, name, options, backend, checks, seconds, memory_mb)
    if not reply["ok"]:
        if reply["error"] == "CompileError":
            raise CompileError(reply["message"], reply.get("log", ""))
        if reply["error"] in ("ValueError", "TypeError"):
            raise ValueError(reply["message"])
        raise RuntimeError(f"{reply['error']}: {reply['message']}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the child reported them
        kernel = tm_compile(source, name, options, backend=backend)
    return kernel, reply["warnings"]
