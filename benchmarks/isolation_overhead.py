"""What isolation costs: a user kernel launched in tiledmm's worker process (isolate=True, the
default) against the same kernel in the caller's process (isolate=False).

- per launch: wall time of one call of a small kernel (1,000 floats), median of many calls
  after warm-up, both ways;
- large arrays: wall time of one call on 64 Mi floats (256 MiB in, 256 MiB out) both ways,
  beside one NumPy copy of the same array (the worker's path copies each input once into
  shared memory and each output once out of it).

- the sandbox (issue 29): the time to install the confinement (the private root, Landlock and
  seccomp, rlimits) in a fresh interpreter, and the worker's start-up (first call: start,
  confine, import, serve a ping) with the sandbox and with TILEDMM_SANDBOX=off, medians and
  bests of --starts (on a loaded host the best of N is the figure to compare: load only adds).

    python benchmarks/isolation_overhead.py [--backend emu|cuda] [--calls 200] [--starts 9]
    python benchmarks/isolation_overhead.py --sandbox-only
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import tiledmm as tm

SOURCE = r"""
__global__ void scale(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def median_ms(fn, calls, warmup=5):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


_INSTALL = r"""
import importlib.util as u, json, sys, time
s = u.spec_from_file_location("_sb", sys.argv[1]); m = u.module_from_spec(s)
s.loader.exec_module(m)
policy = m.Policy.from_json(sys.argv[2])
bpf = bytes.fromhex(sys.argv[3])   # built by the caller, as python_argv does
t = time.perf_counter(); ok = m.confine(policy, bpf); ms = (time.perf_counter() - t) * 1e3
print(json.dumps({"ok": ok, "ms": ms}))
"""

_START = r"""
import json, time
from tiledmm.confine import isolation
w = isolation.worker()
t = time.perf_counter(); reply = w.call({"op": "ping"}, timeout=60)
print(json.dumps({"ms": (time.perf_counter() - t) * 1e3, "confined": reply["confined"]}))
w.stop()
"""


def sandbox_figures(starts):
    """{"install", "confined", "plain"}: each (median ms, best ms) of `starts`."""
    from tiledmm.confine import sandbox
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(here))
    install, start = [], {True: [], False: []}
    policy = sandbox.run_policy(tempfile.mkdtemp())
    bpf = sandbox._precompiled(policy)
    for _ in range(starts):
        out = subprocess.run([sys.executable, "-I", "-S", "-c", _INSTALL, sandbox.__file__,
                              policy.to_json(), bpf.hex()],
                             capture_output=True, text=True, timeout=60, env=env)
        r = json.loads(out.stdout)
        assert r["ok"], "the sandbox is not available here"
        install.append(r["ms"])
        for confined in (True, False):
            e = dict(env) if confined else dict(env, TILEDMM_SANDBOX="off")
            out = subprocess.run([sys.executable, "-c", _START], capture_output=True, text=True,
                                 timeout=120, env=e, cwd=tempfile.gettempdir())
            r = json.loads(out.stdout.strip().splitlines()[-1])
            assert r["confined"] == confined, r
            start[confined].append(r["ms"])
    return {name: (statistics.median(v), min(v))
            for name, v in (("install", install), ("confined", start[True]),
                            ("plain", start[False]))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--starts", type=int, default=9)
    ap.add_argument("--sandbox-only", action="store_true")
    ap.add_argument("--large", type=int, default=64 * 2**20, help="floats in the large case")
    args = ap.parse_args()
    f = sandbox_figures(args.starts)
    for i, what in ((0, "median"), (1, "best")):
        install, confined, plain = f["install"][i], f["confined"][i], f["plain"][i]
        print(f"sandbox ({what} of {args.starts}): install (private root + Landlock + seccomp + "
              f"rlimits) {install:.3f} ms; worker start-up {confined:.1f} ms confined vs "
              f"{plain:.1f} ms with TILEDMM_SANDBOX=off (+{confined - plain:.1f} ms)")
    if args.sandbox_only:
        return
    backend = tm._backend.resolve(args.backend)[1]
    rows = []
    for n, calls in ((1000, args.calls), (args.large, 5)):
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        y = np.empty_like(x)
        grid = (n + 255) // 256
        times = {}
        for isolate in (False, True):   # median_ms of many calls: each a best-of is noisier
            kernel = tm.compile(SOURCE, backend=backend, isolate=isolate)
            times[isolate] = median_ms(lambda: kernel(grid, 256, x, y, 2.0, n, backend=backend,
                                                      warmup=0, repeat=1), calls)
            assert np.array_equal(y, 2.0 * x)
        copy = median_ms(lambda: np.copyto(y, x), calls)
        rows.append((n, times[False], times[True], times[True] - times[False], copy))
    print(f"backend {backend}: wall time of one call (median), isolate=False vs True")
    print(f"{'floats':>10} {'in-process ms':>14} {'isolated ms':>12} {'added ms':>9} "
          f"{'one NumPy copy ms':>18}")
    for n, a, b, d, c in rows:
        print(f"{n:>10} {a:>14.3f} {b:>12.3f} {d:>9.3f} {c:>18.3f}")


if __name__ == "__main__":
    main()
