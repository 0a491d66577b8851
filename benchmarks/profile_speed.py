"""Profile mode's speed on one CPU core (issue 34's target: any kernel profiled in <= 5 s).

Times `tm.profile.count(family, kernel, *inputs, **params)` (only the profiled run, in
tiledmm._emu_profile) for registry kernels at the sizes lesson_table counts at
(tm.profile.LESSON_SIZES: matmul 1024^3, sampled one block in 64; reductions and elementwise
kernels 2^24, in full), with one emulator thread pinned to one core, on random float32 inputs.
Each row is the best of --repeat counts (wall time of the call); the first count's counters are
kept and, with --counts, written out, so two builds can be compared for identical counts
(--same-as: a previous --counts file; the run fails when any counter differs).

    PYTHONPATH=. python benchmarks/profile_speed.py [--all-params] [--only multi_pass,tiled]
        [--repeat 3] [--cpu 0] [--scale 1] [--json t.json] [--baseline old.json]
        [--counts c.json] [--same-as old_counts.json]

The profile build runs the reduction and element-wise files split at their barriers (issue 34);
a copy built with TILEDMM_PROFILE_SPLIT=0 (fibers everywhere), given as --against, compares the
two paths' times and counts.

Default: each kernel with its default parameters; --all-params: every parameter combination
(about 120 rows; an hour on one core before issue 34). --scale divides the sizes (matmul by
--scale per side, others by --scale^3) for a quick check. Sampled matmul counts depend on how
many profiled launches ran before in the process (each launch draws a new sample), so
--same-as needs the same --only/--all-params/--repeat selection in both runs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import tiledmm as tm
from tiledmm import _families, _registry

TARGET_S = 5.0


def cases(all_params, only, params=None):
    """(family, kernel, params) of every registry kernel the emulator runs."""
    for spec in _registry.kernels():
        if spec.name in _registry.CUDA_ONLY or (only and spec.name not in only):
            continue
        combos = [params] if params is not None else \
            spec.param_combinations() if all_params else [spec.defaults]
        for combo in combos:
            yield spec.family, spec.name, combo


def compare(args, against):
    """Each row in two child processes, the build at `against` (PYTHONPATH) then this one,
    alternating row by row so that both see the same load; prints both times and whether every
    counter is the same."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"tm.profile.count on one core (cpu {args.cpu}), best of {args.repeat}: old = {against}, "
          f"new = {here}; target <= {TARGET_S:g} s")
    print(f"{'kernel':40} {'old s':>8} {'new s':>8} {'old/new':>8} {'target':>7}  counts")
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        for family, kernel, params in cases(args.all_params, set(filter(None, args.only.split(",")))):
            got = {}
            for build, path in (("old", against), ("new", here)):
                times, counts = os.path.join(tmp, build + ".json"), os.path.join(tmp, build + "_c.json")
                subprocess.run([sys.executable, os.path.abspath(__file__), "--only", kernel,
                                "--params", json.dumps(params), "--repeat", str(args.repeat),
                                "--cpu", str(args.cpu), "--scale", str(args.scale), "--json", times,
                                "--counts", counts], env=dict(os.environ, PYTHONPATH=path),
                               check=True, timeout=1800, stdout=subprocess.DEVNULL)
                with open(times) as f, open(counts) as g:
                    got[build] = (next(iter(json.load(f)["rows"].values()))["s"],
                                  next(iter(json.load(g).values())))
            (old_s, old_c), (new_s, new_c) = got["old"], got["new"]
            moved = [k for k in old_c if not same(old_c[k], new_c.get(k))]
            differ += bool(moved)
            print(f"{label(kernel, params):40} {old_s:8.2f} {new_s:8.2f} {old_s / new_s:8.2f} "
                  f"{'ok' if new_s <= TARGET_S else 'OVER':>7}  "
                  f"{'identical' if not moved else 'DIFFER: ' + ', '.join(moved)}", flush=True)
    if differ:
        sys.exit(f"{differ} rows counted differently")


def same(a, b):
    """Counters equal, NaN (a ratio of zero requests) equal to NaN."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


def label(kernel, params):
    return kernel + "".join(f" {k}={v}" for k, v in params.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all-params", action="store_true", help="every parameter combination")
    ap.add_argument("--only", default="", help="comma-separated kernel names (default all)")
    ap.add_argument("--repeat", type=int, default=3, help="counts per kernel, best taken (default 3)")
    ap.add_argument("--cpu", type=int, default=0, help="the core to pin to (default 0)")
    ap.add_argument("--scale", type=int, default=1, help="divide the sizes (quick checks)")
    ap.add_argument("--json", help="write the times to this file")
    ap.add_argument("--baseline", help="a previous --json file: print the speed-up against it")
    ap.add_argument("--counts", help="write every row's counters to this file")
    ap.add_argument("--same-as", help="a previous --counts file: fail where a counter differs")
    ap.add_argument("--params", help="one parameter combination as JSON (with --only one kernel)")
    ap.add_argument("--against", help="PYTHONPATH of another build (a copy of tiledmm/ with its "
                    "extensions): time both, row by row in child processes, and compare counts")
    args = ap.parse_args()
    if args.against:
        compare(args, args.against)
        return

    # One emulator thread on one core: the emulator reads the variable at its first launch.
    os.environ["TILEDMM_EMU_THREADS"] = "1"
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    only = set(filter(None, args.only.split(",")))
    baseline = None
    if args.baseline:
        with open(args.baseline) as f:
            baseline = json.load(f)["rows"]
    rng = np.random.default_rng(0)
    rows, counts = {}, {}
    print(f"tm.profile.count on one core (TILEDMM_EMU_THREADS=1, cpu {args.cpu}), float32, "
          f"best of {args.repeat}; target <= {TARGET_S:g} s")
    head = f"{'kernel':40} {'size':>10} {'s':>8} {'target':>7}"
    print(head + (f" {'speed-up':>9}" if baseline else ""), flush=True)
    t_start = time.perf_counter()
    given = json.loads(args.params) if args.params else None
    for family, kernel, params in cases(args.all_params, only, given):
        size = tm.profile.LESSON_SIZES[family]
        size = size // args.scale if family == "matmul" else size // args.scale ** 3
        row = _families.family_of(kernel)
        inputs = row.inputs(row.elements_size(size),
                            lambda shape: rng.standard_normal(shape, dtype=np.float32))
        best, first = float("inf"), None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            p = tm.profile.count(family, kernel, *inputs, **params)
            best = min(best, time.perf_counter() - t0)
            first = first or {k: v for k, v in p.as_dict().items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool)}
        name = label(kernel, params)
        rows[name] = {"family": family, "size": size, "s": best}
        counts[name] = first
        shown = f"{size}^3" if family == "matmul" else f"2^{size.bit_length() - 1}"
        line = f"{name:40} {shown:>10} {best:8.2f} {'ok' if best <= TARGET_S else 'OVER':>7}"
        if baseline and name in baseline:
            line += f" {baseline[name]['s'] / best:8.2f}x"
        print(line, flush=True)
    print(f"({time.perf_counter() - t_start:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"repeat": args.repeat, "scale": args.scale, "rows": rows}, f, indent=1)
    if args.counts:
        with open(args.counts, "w") as f:
            json.dump(counts, f, indent=1, sort_keys=True)
    if args.same_as:
        with open(args.same_as) as f:
            old = json.load(f)
        differ = [(name, k, old[name].get(k), v) for name, c in counts.items() if name in old
                  for k, v in c.items() if not same(old[name].get(k), v)]
        for name, k, was, now in differ:
            print(f"DIFFERS {name}: {k} was {was}, now {now}")
        compared = sum(name in old for name in counts)
        print(f"counts compared for {compared} rows: {'identical' if not differ else f'{len(differ)} differ'}")
        if differ:
            sys.exit(1)


if __name__ == "__main__":
    main()
