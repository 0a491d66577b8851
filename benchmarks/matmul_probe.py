"""Probe the matmul ladder on a GPU: each rung at a few sizes, TFLOP/s and % of cuBLAS, medians
of CUDA-event timings (warmup 2, repeat 10). Used to tune `fast` and to pick bench defaults;
the README's table comes from `python -m tiledmm bench --family matmul`.
    usage: python3 benchmarks/matmul_probe.py 1024 4096 8192"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tiledmm as tm  # noqa: E402 (a checkout built in place)

sizes = [int(s) for s in sys.argv[1:]] or [4096]
rng = np.random.default_rng(0)
CASES = [("cublas", {}), ("fast", {"config": 1}), ("fast", {"config": 2}), ("fast", {"config": 3}),
         ("fast", {"config": 4}), ("fast", {"config": 5}),
         ("fast", {"config": 0}), ("regtile", {"dims": 2}), ("regtile", {"dims": 1}),
         ("coarse", {"tile": 16, "coarsen": 4}), ("coarse", {"tile": 32, "coarsen": 4}),
         ("coarse", {"tile": 32, "coarsen": 2}), ("coarse", {"tile": 16, "coarsen": 8}),
         ("tiled", {"tile": 32}), ("tiled", {"tile": 16}), ("colmajor_b", {"corner": 1}),
         ("colmajor_b", {"corner": 0}), ("naive", {"block": 16}), ("naive", {"block": 32}),
         ("naive_uncoalesced", {"block": 16}), ("naive_uncoalesced", {"block": 32})]
for n in sizes:
    M = N = K = n
    A = (rng.random((M, K), dtype=np.float32) * 2 - 1)
    B = (rng.random((K, N), dtype=np.float32) * 2 - 1)
    rows = rng.choice(M, 8, replace=False)
    ref64 = A[rows].astype(np.float64) @ B.astype(np.float64)
    base = None
    for kernel, params in CASES:
        if n >= 8192 and kernel in ("naive_uncoalesced", "colmajor_b") and params.get("corner", 0) == 0:
            continue
        r = tm.matmul(A, B, kernel=kernel, backend="cuda", warmup=2, repeat=10, **params)
        err = np.max(np.abs(r.out[rows] - ref64)) / np.max(np.abs(ref64))
        if kernel == "cublas":
            base = r.timing.kernel_ms
        print(f"{n:5d} {kernel:18s} {str(params):28s} {r.timing.kernel_ms:9.3f} ms "
              f"{r.tflops:6.2f} TFLOP/s {100 * base / r.timing.kernel_ms:5.0f}% cuBLAS "
              f"err {err:.1e} regs {r.launch.registers}", flush=True)
