"""The time model's predictions beside measured GPU times (docs/profile.md's tables).

Counts each kernel on the emulator (matmul 1024^3 sampled, reductions 2^24 in full: about a
minute on 2 cores), predicts its time on a device preset (tiledmm.profile, docs/profile.md), and
puts that beside the time measured on that GPU (a `python -m tiledmm bench --csv` file: CUDA
events, medians); then the lecture's lesson pairs (tm.profile.LESSON_PAIRS), predicted ratio
beside measured ratio.

    python benchmarks/predicted_vs_measured.py                        # H100, its stored CSV
    python benchmarks/predicted_vs_measured.py --device H200 --csv \\
        benchmarks/results/h200_lessons_matmul.csv benchmarks/results/h200_lessons_reduce.csv
"""
import argparse
import csv
import os

import numpy as np

import tiledmm as tm

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = [("matmul", "naive", {"block": 16}), ("matmul", "tiled", {"tile": 8}),
        ("matmul", "tiled", {"tile": 16}), ("matmul", "tiled", {"tile": 32}),
        ("matmul", "naive", {"block": 32}), ("matmul", "naive_uncoalesced", {"block": 32}),
        ("matmul", "colmajor_b", {"corner": 0}), ("matmul", "colmajor_b", {"corner": 1}),
        ("matmul", "coarse", {"coarsen": 4}), ("matmul", "regtile", {"dims": 1}),
        ("matmul", "regtile", {"dims": 2}), ("matmul", "fast", {"config": 0})] + [
        ("reduce", k, {"block": 256}) for k in (
            "interleaved_divergent", "interleaved_bank_conflicts", "sequential", "first_add",
            "unroll_last_warp", "shuffle", "per_level", "atomic_per_element", "atomic")]
SIZES = {"matmul": 1024, "reduce": 1 << 24}


def measured_ms(paths, family, kernel, params, size):
    text = ",".join(f"{k}={v}" for k, v in params.items())
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["kernel"] == kernel and r["params"] == text and r["family"] == family and \
                        (r["M"] if family == "matmul" else r["n"]) == str(size):
                    return float(r["ms"]) if r["ms"] else 4 * size / float(r["gbps"]) / 1e6
    return float("nan")


def label(kernel, params):
    return kernel + "".join(f" {k}={v}" for k, v in params.items())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="H100", help="the preset to predict for")
    ap.add_argument("--csv", nargs="+",
                    default=[os.path.join(HERE, "results", "h100_all_families.csv")],
                    help="bench --csv files of the same GPU, at matmul 1024^3 and reduce 2^24")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    inputs = {"matmul": [rng.standard_normal((1024, 1024), dtype=np.float32)] * 2,
              "reduce": [rng.standard_normal(1 << 24, dtype=np.float32)]}
    predicted, measured = {}, {}
    print(f"| kernel | predicted ms ({args.device}) | measured ms | bound |\n|---|---|---|---|")
    for family, kernel, params in ROWS:
        pred = tm.profile.count(family, kernel, *inputs[family], **params).predict(args.device)
        key = (family, label(kernel, params))
        predicted[key] = pred.ms
        measured[key] = measured_ms(args.csv, family, kernel, params, SIZES[family])
        print(f"| {key[1]} | {pred.ms:.3f} | {measured[key]:.3f} | {pred.bound} |")
    print("\n| lesson pair (slower / faster) | predicted ratio | measured ratio | direction |"
          " within 2x |\n|---|---|---|---|---|")
    for family, slow, fast in tm.profile.LESSON_PAIRS:
        s, f = (family, label(*slow)), (family, label(*fast))
        p, m = predicted[s] / predicted[f], measured[s] / measured[f]
        print(f"| {s[1]} / {f[1]} | {p:.2f} | {m:.2f} | {'yes' if (p > 1) == (m > 1) else 'NO'}"
              f" | {'yes' if 0.5 <= p / m <= 2 else 'NO'} |")


if __name__ == "__main__":
    main()
