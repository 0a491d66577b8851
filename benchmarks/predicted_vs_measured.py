"""The time model's predictions beside the H100's measured times (docs/profile.md's table).

Counts each kernel on the emulator (matmul 1024^3 sampled, reductions 2^24 in full: about a
minute on 2 cores) and predicts H100 time (tiledmm.profile, docs/profile.md); the measured
times are benchmarks/results/h100_all_families.csv (bench on the H100, CUDA events, medians).

    python benchmarks/predicted_vs_measured.py
"""
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


def measured_ms(family, kernel, params, size):
    text = ",".join(f"{k}={v}" for k, v in params.items())
    with open(os.path.join(HERE, "results", "h100_all_families.csv")) as f:
        for r in csv.DictReader(f):
            if r["kernel"] == kernel and r["params"] == text and r["family"] == family and \
                    (r["M"] if family == "matmul" else r["n"]) == str(size):
                return float(r["ms"]) if r["ms"] else 4 * size / float(r["gbps"]) / 1e6
    return float("nan")


def main():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((1024, 1024), dtype=np.float32)
    x = rng.standard_normal(1 << 24, dtype=np.float32)
    print("| kernel | predicted ms | measured ms | bound |\n|---|---|---|---|")
    for family, kernel, params in ROWS:
        inputs, size = ((A, A), 1024) if family == "matmul" else ((x,), 1 << 24)
        pred = tm.profile.count(family, kernel, *inputs, **params).predict("H100")
        label = kernel + "".join(f" {k}={v}" for k, v in params.items())
        print(f"| {label} | {pred.ms:.3f} | {measured_ms(family, kernel, params, size):.3f} "
              f"| {pred.bound} |")


if __name__ == "__main__":
    main()
