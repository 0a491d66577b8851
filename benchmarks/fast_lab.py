"""Tuning probe for `fast` on a GPU: each candidate (config x schedule) against cuBLAS at a few
sizes, device-resident inputs (no transfers), median of `repeat` CUDA-event timings after
warm-up, two passes in opposite orders (their spread says what a difference must exceed to
count). Correctness: max relative error on 8 rows against float64. See fast_notes.md.
    usage: python3 benchmarks/fast_lab.py [--configs 0,4,6] [sizes...]   (default 4096 8192)
The same script reads SASS (no GPU needed): for each kernel in `cuobjdump -sass` output, its
main loop (the backward branch holding the most FFMAs): instructions, FFMAs, and how many FFMAs
set the operand-reuse flag on 0, 1 or 2 operands (fast_notes.md v7: CUTLASS 18/528/478 of 1024).
    usage: python3 benchmarks/fast_lab.py --sass FILE.sass [kernel-name substring]"""
import collections
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
if sys.argv[1:2] != ["--sass"]:  # reading SASS needs neither NumPy nor a built checkout
    import numpy as np
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


def sass_loops(text, name_part=""):
    """(kernel, instructions, FFMAs, Counter of FFMAs by number of .reuse flags) per kernel."""
    rows = []
    for func in re.split(r"\n\s*Function : ", text)[1:]:
        name = func.split("\n", 1)[0].strip()
        if name_part not in name:
            continue
        code = [(int(m.group(1), 16), m.group(2)) for m in
                re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", func)]
        best = None
        for addr, ins in code:
            target = re.search(r"BRA\s.*?0x([0-9a-f]+)", ins)
            if target and int(target.group(1), 16) < addr:
                body = [i for a, i in code if int(target.group(1), 16) <= a <= addr]
                ffma = [i for i in body if i.lstrip("@!P0123456789T ").startswith("FFMA")]
                if best is None or len(ffma) > len(best[1]):
                    best = (body, ffma)
        if best:
            rows.append((name, len(best[0]), len(best[1]),
                         collections.Counter(i.count(".reuse") for i in best[1])))
    return rows


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--sass"]:
        for name, n, nf, reuse in sass_loops(open(args[1]).read(), args[2] if len(args) > 2 else ""):
            print(f"{name[:90]}\n    loop: {n} instructions, {nf} FFMA; FFMAs by reuse flags "
                  f"0/1/2: {reuse[0]}/{reuse[1]}/{reuse[2]}")
        sys.exit(0)
    configs = DEFAULT_CONFIGS
    if args[:1] == ["--configs"]:
        configs, args = tuple(int(c) for c in args[1].split(",")), args[2:]
    sizes = [tuple(int(v) for v in a.split("x")) if "x" in a else int(a) for a in args or ["4096", "8192"]]
    main(sizes, configs)
