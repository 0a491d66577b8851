"""The L2 flush's effect (issue 33 §4): each kernel and size timed twice in one run, the L2
cache flushed before each timed launch (tiledmm's default) and kept warm (warm_l2=True), with
the ratio. Small problems fit the L2 (50 MB on the H100, 60 MB on the H200) and time faster
warm; large ones should not change. The figure for README's small-size rows.

    python benchmarks/l2_flush.py                     # the GPU: reductions 2^16..2^28, matmul 256..2048
    python benchmarks/l2_flush.py --csv l2_flush.csv  # also the rows as CSV
    python benchmarks/l2_flush.py --backend emu       # tiny sizes: checks the script runs
"""
import argparse
import sys

import numpy as np

import tiledmm as tm
from tiledmm.bench import save

GPU_CASES = {
    "reduce": ([1 << p for p in (16, 18, 20, 22, 24, 26, 28)],
               [("vectorized", {}), ("shuffle", {}), ("sequential", {"block": 256})]),
    "matmul": ([256, 512, 1024, 2048, 4096],
               [("tiled", {"tile": 32}), ("fast", {}), ("cublas", {})]),
}
EMU_CASES = {"reduce": ([1 << 10], [("shuffle", {})]), "matmul": ([32], [("tiled", {"tile": 16})])}


def _time(family, kernel, params, n, backend, repeat, warm_l2, rng):
    if family == "reduce":
        x = rng.random(n, dtype=np.float32) * 2 - 1
        res = tm.reduce(x, kernel=kernel, backend=backend, warmup=3, repeat=repeat,
                        warm_l2=warm_l2, **params)
        return res, x.nbytes
    A = rng.random((n, n), dtype=np.float32) * 2 - 1
    res = tm.matmul(A, A, kernel=kernel, backend=backend, warmup=3, repeat=repeat,
                    warm_l2=warm_l2, **params)
    return res, 3 * A.nbytes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["cuda", "emu"], default=None)
    ap.add_argument("--repeat", type=int, default=None, help="timed launches (GPU: 100)")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    backend = args.backend or tm.get_backend()
    cases = GPU_CASES if backend == "cuda" else EMU_CASES
    repeat = args.repeat or (100 if backend == "cuda" else 2)
    names = {k.name for k in tm.kernels()}
    rng = np.random.default_rng(0)
    rows = []
    device = tm.device_info(backend)["name"]   # each row names its device (benchmarks/results)
    print(f"{device} ({backend}), median of {repeat} timed launches "
          f"after 3 warm-up; ms flushed / warm (ratio)")
    for family, (sizes, kernels) in cases.items():
        for kernel, params in kernels:
            if kernel not in names or (kernel == "cublas" and backend != "cuda"):
                continue
            for n in sizes:
                flushed, nbytes = _time(family, kernel, params, n, backend, repeat, False, rng)
                warm, _ = _time(family, kernel, params, n, backend, repeat, True, rng)
                f_ms, w_ms = flushed.timing.kernel_ms, warm.timing.kernel_ms
                row = dict(family=family, kernel=kernel,
                           params=" ".join(f"{k}={v}" for k, v in params.items()), n=n,
                           data_mib=nbytes / 2**20, flushed_ms=f_ms, warm_ms=w_ms,
                           ratio=f_ms / w_ms if w_ms > 0 else float("nan"),
                           flushed_l2=flushed.timing.l2, warm_l2=warm.timing.l2,
                           backend=backend, device=device)
                rows.append(row)
                print(f"{family:<7}{kernel:<12}{row['params']:<10}n={n:<11}"
                      f"{row['data_mib']:>9.1f} MiB  {f_ms:>9.4f} / {w_ms:>9.4f} ms  "
                      f"({row['ratio']:.2f}x)", flush=True)
    if args.csv:
        save(rows, csv_path=args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
