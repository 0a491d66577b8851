"""The emulator's profile counters against Nsight Compute on the GPU, kernel by kernel (issue 21).

Every registry kernel and parameter value (float32; cuBLAS has no source to count) at the
validation sizes: matmul 256^3, reductions and vec_add 2^20 elements, mat_add 1024x1024. The
emulator's counts come from tm.profile.count (in full, no sampling, in a pool of processes);
the GPU's from one ncu process over all calls (tiledmm.profiling.ncu.profile_calls). Writes
$OUT/profile_vs_ncu.csv (one row per variant and counter) and $OUT/ncu_raw.csv, and prints a
table of the differences last.

A counter agrees when it is equal, or for bank conflicts within 10%, or within 0.12 per shared
request where ncu reports fewer than 0.12 per request (ncu's arbitration between warps, which
no per-warp model sees). docs/profile.md lists the kernels where the compiled code differs
from the source (nvcc merging a thread's adjacent accesses into one wider one).

    python3 benchmarks/profile_vs_ncu.py [--family matmul|reduce|elementwise] [--only REGEX]
"""
import argparse
import csv
import math
import multiprocessing
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tiledmm as tm  # noqa: E402 (a checkout built in place)
from tiledmm.profiling import ncu  # noqa: E402

SIZES = {"matmul": 256, "reduce": 1 << 20, "elementwise": 1 << 20}
CONFLICTS = ("shared_load_bank_conflicts", "shared_store_bank_conflicts")


def inputs(family, kernel, seed=0):
    rng = np.random.default_rng(seed)
    if family == "matmul":
        n = SIZES["matmul"]
        return [rng.standard_normal((n, n), dtype=np.float32) for _ in range(2)]
    if family == "reduce":
        return [rng.standard_normal(SIZES["reduce"], dtype=np.float32)]
    shape = (SIZES["elementwise"],) if kernel == "vec_add" else (1024, 1024)
    return [rng.standard_normal(shape, dtype=np.float32) for _ in range(2)]


def variants(family=None, only=None):
    for spec in tm.kernels(family):
        if spec.name in ("cublas", "cutlass") or "float32" not in spec.dtypes:
            continue
        if only and not re.search(only, spec.name):
            continue
        for params in spec.param_combinations():
            yield spec.family, spec.name, params


def emu_counts(variant):
    family, kernel, params = variant
    start = time.perf_counter()
    p = tm.profile.count(family, kernel, *inputs(family, kernel), sample=1, **params)
    return p.as_dict(), time.perf_counter() - start


# Compared, but not expected to be equal: divergent branches are the source's (GCC's basic
# blocks; nvcc predicates short ifs, and ncu then counts none), wavefronts are time-model inputs.
INFORMATIONAL = ("divergent_branches", "shared_load_wavefronts", "shared_store_wavefronts")


def agrees(counter, emu, ncu, shared_requests, counts=None, measured=None):
    if math.isnan(ncu) or math.isnan(emu):
        return "n/a"
    if emu == ncu:
        return "equal"
    if counter in INFORMATIONAL:
        return "informational"
    # Hopper's L1TEX counts cp.async.cg (LDGSTS) requests and sectors under global loads too.
    pair = {"global_load_requests": "global_ldgsts_requests",
            "global_load_sectors": "global_ldgsts_sectors"}.get(counter)
    if pair and counts and measured and measured.get(pair, 0) and \
            emu + counts.get(pair, 0) == ncu:
        return "equal with cp.async"
    if counter in CONFLICTS:
        if ncu and abs(emu - ncu) <= 0.10 * ncu:
            return "within 10%"
        if shared_requests and ncu / shared_requests < 0.12 and \
                abs(emu - ncu) / shared_requests <= 0.12:
            return "within 0.12/request"
    return "DIFFERS"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=sorted(SIZES))
    ap.add_argument("--only", help="regular expression on kernel names")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    todo = list(variants(args.family, args.only))
    print(f"{len(todo)} variants", flush=True)

    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(os.cpu_count()) as pool:
        emu = pool.map(emu_counts, todo)
    print(f"emulator counts: {time.perf_counter() - start:.0f} s "
          f"(slowest variant {max(t for _, t in emu):.1f} s)", flush=True)

    start = time.perf_counter()
    calls = [{"family": f, "kernel": k, "inputs": inputs(f, k), "params": p} for f, k, p in todo]
    hw = ncu.profile_calls(calls, timeout=560, raw_out=os.path.join(args.out, "ncu_raw.csv"))
    print(f"Nsight Compute: {time.perf_counter() - start:.0f} s", flush=True)

    rows, differing = [], []
    for (family, kernel, params), (counts, _), measured in zip(todo, emu, hw):
        label = kernel + "".join(f" {k}={v}" for k, v in params.items())
        for counter in ncu.COUNTER_METRICS:
            e = float(counts.get(counter, math.nan))
            n = float(measured[counter])
            verdict = agrees(counter, e, n, measured["shared_load_requests"]
                             + measured["shared_store_requests"], counts, measured)
            rows.append(dict(variant=label, family=family, counter=counter, emu=e, ncu=n,
                             verdict=verdict))
            if verdict == "DIFFERS":
                differing.append((label, counter, e, n))
        rows.append(dict(variant=label, family=family, counter="gpu_time_ns", emu=math.nan,
                         ncu=measured["gpu_time_ns"], verdict="measured"))
        for extra in ("dram_bytes", "l2_sectors_from_l1", "warp_instructions", "thread_instructions",
                      "ffma_thread_instructions", "registers_per_thread", "launches"):
            rows.append(dict(variant=label, family=family, counter=extra,
                             emu=float(counts.get(extra, math.nan)), ncu=measured[extra],
                             verdict="measured"))
    with open(os.path.join(args.out, "profile_vs_ncu.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    checked = [r for r in rows if r["verdict"] not in ("n/a", "measured", "informational")
               and r["counter"] not in INFORMATIONAL]
    print(f"\n{len(checked)} counter values compared over {len(todo)} variants: "
          f"{sum(r['verdict'].startswith('equal') for r in checked)} equal, "
          f"{sum(r['verdict'].startswith('within') for r in checked)} within the conflict "
          f"tolerance, {len(differing)} differ")
    print(f"\n{'counter':<30} {'equal':>6} {'tolerance':>9} {'differ':>6}")
    for counter in ncu.COUNTER_METRICS:
        if counter in INFORMATIONAL:
            continue
        mine = [r["verdict"] for r in checked if r["counter"] == counter]
        print(f"{counter:<30} {sum(v.startswith('equal') for v in mine):>6} "
              f"{sum(v.startswith('within') for v in mine):>9} {mine.count('DIFFERS'):>6}")
    print("\ndivergence (reductions, block 256): emulator's divergent branches (the source's), "
          "ncu's (nvcc's), ncu's active lanes per warp instruction")
    for (family, kernel, params), (counts, _), measured in zip(todo, emu, hw):
        if family == "reduce" and params.get("block") == 256 and "per_thread" not in params:
            lanes = measured["thread_instructions"] / measured["warp_instructions"]
            print(f"  {kernel:<28} {counts.get('divergent_branches', math.nan):>10,.0f} "
                  f"{measured['divergent_branches']:>10,.0f} {lanes:>6.1f}")
    by_counter = {}
    for label, counter, e, n in differing:
        by_counter.setdefault(counter, []).append((label, e, n))
    for counter, items in sorted(by_counter.items()):
        print(f"\n{counter}: {len(items)} variants differ")
        for label, e, n in items[:40]:
            print(f"  {label:<44} emu {e:>14,.0f}  ncu {n:>14,.0f}  ({e / n if n else math.inf:.3f})")


if __name__ == "__main__":
    main()
