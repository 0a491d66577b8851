"""The faulting kernels of the user-kernel safety issue, launched one after another in ONE process
(tests/test_isolation.py runs this script in a subprocess, so that a failure of isolation cannot
take pytest down). After each fault it checks that the next call works: a correct matmul and a
correct user kernel. Prints one JSON object: {case: {"error": text or None, "next_call_ok": bool,
"seconds": float}}.

    python tests/isolation_faults.py BACKEND [CASE ...]
"""
import json
import os
import signal
import sys
import threading
import time

import numpy as np

import tiledmm as tm

HEAD = "__global__ void k(float *y, int n)\n{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
CASES = {   # name: (kernel body, grid, block, launch keywords)
    "no_bounds_guard": ("    y[i] = 1.0f;", 4, 256, {}),
    "past_the_end": ("    y[i * 4] = 1.0f;", 4, 256, {}),
    # null, but not known to the compiler (which may drop a store through a known null pointer)
    "null_pointer": ("    float *p = (float *)(long long)(n - 1000);\n    if (i == 5) p[i] = 1.0f;",
                     4, 256, {}),
    "far_address": ("    y[threadIdx.x * 100000000LL] = 1.0f;", 4, 256, {}),
    "before_the_start": ("    if (i == 7) y[i - 2000] = 1.0f;", 4, 256, {}),
    "large_local_array": ("    float buf[1 << 20];\n    buf[i % 7] = i;\n    y[i % n] = buf[(i * 3) % 7];",
                          4, 256, {}),
    "abort": ("    if (i == 3) abort();", 4, 256, {}),
    "failed_assert": ("    assert(i < 10);", 4, 256, {}),
    "cxx_throw": ("    if (i == 2) throw 42;", 4, 256, {}),
    "integer_division_by_zero": ("    volatile int zero = n - n;\n    y[i % n] = i / zero;", 4, 256, {}),
    "endless_loop": ("    while (1) {}", 1, 1, {"timeout": 2}),
}
GOOD = HEAD + "    if (i < n) y[i] = 2.0f * i;\n}\n"


def next_call_ok(backend, rng):
    A = rng.random((33, 17), dtype=np.float32)
    B = rng.random((17, 9), dtype=np.float32)
    C = tm.matmul(A, B, backend=backend).out
    tm.testing.assert_matmul_close(C, A, B)
    y = np.full(1000, np.nan, np.float32)
    tm.compile(GOOD, backend=backend)(4, 256, y, 1000, backend=backend)
    return bool(np.array_equal(y, 2.0 * np.arange(1000, dtype=np.float32)))


CTRL_C_LIMIT = 30.0   # seconds: a lost interrupt fails here, with a message, not after 600 s


def interrupted(backend):
    """Ctrl-C one second into an endless kernel: seconds until KeyboardInterrupt, or None.
    A shell starts background jobs with SIGINT ignored, and this process inherits that: the
    default handler is installed first, or the simulated Ctrl-C would never arrive. The kernel
    has a limit of CTRL_C_LIMIT s all the same, so a lost interrupt ends as a timeout."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    kernel = tm.compile(HEAD + CASES["endless_loop"][0] + "\n}\n", backend=backend)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        kernel(1, 1, np.zeros(4, np.float32), 4, backend=backend, timeout=CTRL_C_LIMIT)
    except KeyboardInterrupt:
        return time.monotonic() - start - 1.0
    except tm.KernelError:
        return None   # the interrupt was lost: the limit ended the kernel
    return None


def main():
    backend, names = sys.argv[1], sys.argv[2:] or list(CASES)
    rng = np.random.default_rng(1)
    out = {}
    for name in names:
        if name == "ctrl_c":
            late = interrupted(backend)
            out[name] = {"error": None if late is None else f"KeyboardInterrupt {late:.2f} s after",
                         "next_call_ok": next_call_ok(backend, rng), "seconds": late}
            continue
        body, grid, block, kw = CASES[name]
        kernel = tm.compile(HEAD + body + "\n}\n", backend=backend)
        y = np.zeros(1000, np.float32)
        start = time.monotonic()
        try:
            kernel(grid, block, y, 1000, backend=backend, **kw)
            error = None
        except tm.KernelError as exc:
            error = str(exc)
        out[name] = {"error": error, "next_call_ok": next_call_ok(backend, rng),
                     "seconds": time.monotonic() - start}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
