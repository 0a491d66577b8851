"""Per-call host-to-device figures of NumPy round trips inside a Python process, the conditions
that `bench --end-to-end` reports medians of and `staging_probe.cu` (a C program) does not see.
Behind README's "NumPy round trips" paragraph (cuda backend only; one line per condition, one
number per call, GB/s of the call's timing.h2d_bytes over timing.h2d_ms):
    kept     every result kept alive (each call pins a new output)
    dropped  each result dropped before the next call (the pinned output block is reused)
    devout   output left on the device (no copy back, no host output)
    upload   tm.to_device of one array, wall clock
then a 4096^3 `fast` matmul, NumPy in and out: wall = h2d + kernel + d2h + the rest (ms), before
and after a numpy.matmul (whose BLAS threads then compete for the cores), and numpy.matmul's ms.
    usage: python3 benchmarks/roundtrip_probe.py   (a checkout built in place; about 30 s)"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tiledmm as tm  # noqa: E402
from tiledmm import _backend, _core  # noqa: E402

CALLS = 8
mod = _backend.module("cuda")
rng = np.random.default_rng(0)


def pinned_gbps(nbytes):
    return nbytes / (np.median(mod.copy_time("h2d_pinned", nbytes, 1, 3)) * 1e6)


def h2d_gbps(result):
    return result.timing.h2d_bytes / (result.timing.h2d_ms * 1e6)


def show(label, values, a):
    print(f"{label:8}", " ".join(f"{v:5.1f}" for v in values), f"| pinned {pinned_gbps(a.nbytes):.1f}",
          flush=True)


def transfers(mib):
    n = mib * 2**20 // 4
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    print(f"== 2 x {mib} MiB, GB/s per call; pinned cudaMemcpy of one array after each line", flush=True)
    kept = [_core.vec_add(a, b, backend="cuda", warmup=0, repeat=1) for _ in range(CALLS)]
    show("kept", [h2d_gbps(r) for r in kept], a)
    del kept
    for label, output in (("dropped", "numpy"), ("devout", "device")):
        values = []
        for _ in range(CALLS):
            values.append(h2d_gbps(_core.vec_add(a, b, backend="cuda", warmup=0, repeat=1, output=output)))
        show(label, values, a)
    values = []
    for _ in range(CALLS):
        start = time.perf_counter()
        d = tm.to_device(a)
        mod.synchronize()
        values.append(a.nbytes / ((time.perf_counter() - start) * 1e9))
        del d
    show("upload", values, a)


def matmul_round_trips(n=4096, calls=6):
    A = rng.random((n, n), dtype=np.float32)
    B = rng.random((n, n), dtype=np.float32)
    _core.matmul(A, B, kernel="fast", backend="cuda", warmup=0, repeat=1)
    for label in ("before numpy.matmul", "after numpy.matmul"):
        parts = []
        for _ in range(calls):
            start = time.perf_counter()
            r = _core.matmul(A, B, kernel="fast", backend="cuda", warmup=0, repeat=1)
            wall = (time.perf_counter() - start) * 1e3
            t = r.timing
            parts.append(f"{wall:.2f}={t.h2d_ms:.2f}+{t.kernel_ms:.2f}+{t.d2h_ms:.2f}"
                         f"+{wall - t.h2d_ms - t.kernel_ms - t.d2h_ms:.2f}")
        print(f"{n}^3 fast {label}, wall = h2d + kernel + d2h + rest (ms):", " ".join(parts), flush=True)
        cpu = []
        for _ in range(3):
            start = time.perf_counter()
            np.matmul(A, B)
            cpu.append((time.perf_counter() - start) * 1e3)
        print("numpy.matmul ms:", " ".join(f"{c:.1f}" for c in cpu), flush=True)


if __name__ == "__main__":
    for mib in (64, 256):
        transfers(mib)
    matmul_round_trips()
