"""tf32x3's accuracy against float64 beside cuBLAS SGEMM's (issue 47's targets): K = 256 to 8192,
inputs uniform in [-1, 1] and in [0, 1]; also wmma (TF32 and FP16 inputs), and cuBLAS with TF32
(torch, allow_tf32) where torch is installed. Error: max |C - A B| / max |A| |B| (normwise, so
that near-zero sums of [-1, 1] inputs do not dominate).

    python3 benchmarks/tf32x3_accuracy.py [--mn 512] [--ks 256 1024 4096 8192] [--csv out.csv]
"""
import argparse
import sys

import numpy as np

import tiledmm as tm
from tiledmm.bench import save


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mn", type=int, default=512)
    parser.add_argument("--ks", type=int, nargs="+", default=[256, 1024, 4096, 8192])
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--csv")
    args = parser.parse_args(argv)
    try:
        import torch
        torch_ok = torch.cuda.is_available() and args.backend == "cuda"
    except ImportError:
        torch_ok = False
    runs = [("tf32x3", {}), ("cublas", {}), ("wmma", {"precision": 0}), ("wmma", {"precision": 1})]
    if args.backend != "cuda":
        runs = [r for r in runs if r[0] not in ("tf32x3", "cublas")]
    rng = np.random.default_rng(47)
    rows = []
    print(f"{'inputs':8} {'K':>6} " + " ".join(f"{n + ('' if not p else str(p['precision'])):>10}"
                                            for n, p in runs) + ("  cublas_tf32" if torch_ok else ""))
    for low in (-1.0, 0.0):
        for K in args.ks:
            A = rng.uniform(low, 1, (args.mn, K)).astype(np.float32)
            B = rng.uniform(low, 1, (K, args.mn)).astype(np.float32)
            exact = A.astype(np.float64) @ B.astype(np.float64)
            scale = (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))).max()
            errs = []
            for name, params in runs:
                C = tm.matmul(A, B, kernel=name, backend=args.backend, output="numpy", **params).out
                errs.append(float(np.abs(C - exact).max() / scale))
            if torch_ok:
                torch.backends.cuda.matmul.allow_tf32 = True
                C = (torch.from_numpy(A).cuda() @ torch.from_numpy(B).cuda()).cpu().numpy()
                torch.backends.cuda.matmul.allow_tf32 = False
                errs.append(float(np.abs(C - exact).max() / scale))
            label = "[-1,1]" if low < 0 else "[0,1]"
            print(f"{label:8} {K:6d} " + " ".join(f"{e:10.2e}" for e in errs), flush=True)
            rows.append(dict(inputs=label, K=K, **{f"{n}{p.get('precision', '')}": e for (n, p), e
                                                   in zip(runs, errs)},
                             **({"cublas_tf32": errs[-1]} if torch_ok else {})))
    if args.csv:
        save(rows, csv_path=args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
