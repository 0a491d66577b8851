"""Markdown tables for README from a CSV written by `python -m tiledmm bench --csv FILE`
(benchmarks/gpu_run.sh writes one): matmul TFLOP/s with % of cuBLAS, reductions' GB/s with %
of a device-to-device copy, and the NumPy round trips.

    python benchmarks/readme_tables.py benchmarks/results/h100_all_families.csv
"""
import sys

import pandas as pd

MATMUL_ROWS = [("cublas", None), ("fast", "config=0"), ("regtile", "dims=2"),
               ("coarse", "coarsen=4"), ("tiled", "tile=32"), ("tiled", "tile=16"),
               ("tiled", "tile=8"), ("colmajor_b", "corner=1"), ("colmajor_b", "corner=0"),
               ("naive", "block=32"), ("naive_uncoalesced", "block=32")]


def matmul_table(d):
    m = d[d.family == "matmul"]
    sizes = list(dict.fromkeys(zip(m.M.astype(int), m.N.astype(int), m.K.astype(int))))
    head = ["kernel"] + [f"{M}³" if M == N == K else f"{M}×{N}×{K}" for M, N, K in sizes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kernel, params in MATMUL_ROWS:
        rows = m[(m.kernel == kernel) & ((m.params == params) if params else m.params.isna())]
        if rows.empty:
            continue
        cells = []
        for M, N, K in sizes:
            r = rows[(rows.M == M) & (rows.N == N) & (rows.K == K)]
            cells.append(f"{r.tflops.iloc[0]:.2f} ({r.pct_cublas.iloc[0]:.0f}%)" if len(r) else "-")
        label = f"`{kernel}`" + (f" {params}" if params else "")
        lines.append("| " + " | ".join([label] + cells) + " |")
    return "\n".join(lines)


def reduce_table(d):
    r = d[d.family == "reduce"]
    lengths = sorted(r.n.unique())
    head = ["kernel (best block)"] + [f"2^{int(n).bit_length() - 1}" for n in lengths]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kernel in dict.fromkeys(r.kernel):
        cells = []
        for n in lengths:
            best = r[(r.kernel == kernel) & (r.n == n)].sort_values("gbps").iloc[-1]
            cells.append(f"{best.gbps:.0f} GB/s ({best.pct_copy:.0f}%, {best.params})")
        lines.append("| " + " | ".join([f"`{kernel}`"] + cells) + " |")
    return "\n".join(lines)


def transfer_lines(d):
    e = d[d.family == "end_to_end"]
    out = []
    for r in e.itertuples():
        if r.kind == "transfer":
            out.append(f"- {r.what}: {r.gbps:.1f} GB/s, {r.pct:.0f}% of a pinned cudaMemcpy "
                       f"({r.ref_gbps:.1f} GB/s) in the same run")
        else:
            out.append(f"- {r.what}: {r.ms:.2f} ms end to end, numpy.matmul {r.ref_ms:.1f} ms "
                       f"({r.speedup:.1f}x)")
    return "\n".join(out)


if __name__ == "__main__":
    data = pd.read_csv(sys.argv[1])
    print(matmul_table(data), reduce_table(data), transfer_lines(data), sep="\n\n")
