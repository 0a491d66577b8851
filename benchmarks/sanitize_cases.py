"""Every registered kernel and parameter value on a few awkward shapes, once each, on the GPU:
the workload benchmarks/gpu_run.sh runs under compute-sanitizer."""
import numpy as np

import tiledmm as tm
from tiledmm.bench import variants

rng = np.random.default_rng(3)
for family in ("matmul", "elementwise", "reduce"):
    for kernel, params in variants(family):
        for shape in [(1, 1, 1), (33, 17, 9), (70, 65, 31)]:
            M, N, K = shape
            if family == "matmul":
                res = tm.matmul(rng.random((M, K), dtype=np.float32),
                                rng.random((K, N), dtype=np.float32), kernel=kernel,
                                backend="cuda", warmup=0, repeat=1, **params)
            elif family == "elementwise":
                a, b = rng.random((M, N)), rng.random((M, N))
                fn = tm.vec_add if kernel == "vec_add" else tm.mat_add
                res = fn(a.ravel() if kernel == "vec_add" else a,
                         b.ravel() if kernel == "vec_add" else b, kernel=kernel,
                         backend="cuda", warmup=0, repeat=1, **params)
            else:
                res = tm.reduce(rng.random(M * N * K + 5), kernel=kernel, backend="cuda",
                                warmup=0, repeat=1, **params)
        print(f"{family} {kernel} {params}: ok")
