"""Tuning probe for `fast` on a GPU: each candidate (config x schedule) against cuBLAS at a few
sizes, device-resident inputs (no transfers), median of `repeat` CUDA-event timings after
warm-up, two passes in opposite orders (their spread says what a difference must exceed to
count). Correctness: max relative error on 8 rows against float64. See fast_notes.md.
    usage: python3 benchmarks/fast_lab.py [--configs 0,4,6] [sizes...]   (default 4096 8192)"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tiledmm as tm  # noqa: E402 (a checkout built in place)

DEFAULT_CONFIGS = (0, 4, 6)


def run(A, B, kernel, params, repeat=10):
    r = tm.matmul(A, B, kernel=kernel, backend="cuda", warmup=3, repeat=repeat, output="device",
                  **params)
    return r


def main(sizes, configs=DEFAULT_CONFIGS):
    candidates = [("cublas", {})] + [("fast", {"config": c}) for c in configs]
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        M, N, K = (n, n, n) if isinstance(n, int) else n
        A_host = rng.random((M, K), dtype=np.float32) * 2 - 1
        B_host = rng.random((K, N), dtype=np.float32) * 2 - 1
        A, B = tm.to_device(A_host), tm.to_device(B_host)
        check_rows = rng.choice(M, 8, replace=False)
        ref = A_host[check_rows].astype(np.float64) @ B_host.astype(np.float64)
        times = {}
        for order in (candidates, candidates[::-1]):
            for kernel, params in order:
                r = run(A, B, kernel, params)
                times.setdefault((kernel, str(params)), []).append(r.timing.kernel_ms)
                out = r.out.get()[check_rows]
                err = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
                times[(kernel, str(params), "err")] = err
                times[(kernel, str(params), "grid")] = r.launch.grid
        base = np.median(times[("cublas", "{}")])
        for kernel, params in candidates:
            ms = times[(kernel, str(params))]
            med = float(np.median(ms))
            flops = 2.0 * M * N * K
            rows.append((f"{M}x{N}x{K}", kernel, str(params), med, flops / med / 1e9,
                         100 * base / med, max(ms) / min(ms) - 1,
                         times[(kernel, str(params), "err")], times[(kernel, str(params), "grid")]))
            print(f"{rows[-1][0]:>16} {kernel:7} {str(params):30} {med:8.3f} ms {rows[-1][4]:6.2f} TFLOP/s "
                  f"{rows[-1][5]:5.1f}% cuBLAS  passes differ {100 * rows[-1][6]:.1f}%  "
                  f"err {rows[-1][7]:.1e} grid {rows[-1][8]}", flush=True)
    return rows


if __name__ == "__main__":
    args = sys.argv[1:]
    configs = DEFAULT_CONFIGS
    if args[:1] == ["--configs"]:
        configs, args = tuple(int(c) for c in args[1].split(",")), args[2:]
    sizes = [tuple(int(v) for v in a.split("x")) if "x" in a else int(a) for a in args or ["4096", "8192"]]
    main(sizes, configs)
