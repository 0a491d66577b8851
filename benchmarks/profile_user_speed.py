"""profile=True on tm.compile kernels, split at their barriers and on fibers (issue 34), on one
CPU core: a student's tiled matmul and shared-memory tree reduction (tests/kernels/tiled16.cu,
tree256.cu), each counted once per path after a first count has built both profile builds
(cached), the paths chosen by TILEDMM_EMU_SPLIT (read at each call). Prints the times and whether every
counter is the same on both paths.

    PYTHONPATH=. python benchmarks/profile_user_speed.py [--matmul 512] [--reduce 24] [--cpu 1]
"""
import argparse
import os
import time

import numpy as np

os.environ["TILEDMM_EMU_THREADS"] = "1"   # read at the emulator's first launch
import tiledmm as tm  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _kernel_file(name):
    with open(os.path.join(HERE, "..", "tests", "kernels", name)) as f:
        return f.read()


TILED, TREE = _kernel_file("tiled16.cu"), _kernel_file("tree256.cu")


def count(source, name, grid, block, args, split):
    """Seconds of one profiled launch (the profile count only: warmup 0, repeat 1) and its
    counters, on the path TILEDMM_EMU_SPLIT selects."""
    os.environ["TILEDMM_EMU_SPLIT"] = "1" if split else "0"
    kernel = tm.compile(source, name, backend="emu")
    kernel(grid, block, *args, profile=True, warmup=0, repeat=1, timeout=3600)   # builds
    t0 = time.perf_counter()
    res = kernel(grid, block, *args, profile=True, warmup=0, repeat=1, timeout=3600)
    return time.perf_counter() - t0, res.profile.as_dict()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matmul", type=int, default=512, help="n of the n^3 matmul (default 512)")
    ap.add_argument("--reduce", type=int, default=24, help="log2 of the reduction's length")
    ap.add_argument("--cpu", type=int, default=1, help="the core to pin to (default 1)")
    a = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    rng = np.random.default_rng(0)
    n, m = a.matmul, 1 << a.reduce
    A, B = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    x = rng.standard_normal(m, np.float32)
    cases = [
        (f"tiled16 {n}^3", TILED, "tiled", ((n + 15) // 16, (n + 15) // 16), (16, 16),
         [A, B, np.zeros((n, n), np.float32), n, n, n]),
        (f"tree 2^{a.reduce}", TREE, "tree", (m + 255) // 256, 256,
         [x, np.zeros((m + 255) // 256, np.float32), m]),
    ]
    print(f"tm.compile(...)(profile=True) on one core (cpu {a.cpu}), one count per path")
    print(f"{'kernel':18} {'split s':>8} {'fibers s':>9} {'fibers/split':>13}  counts")
    for label, source, name, grid, block, args in cases:
        t_split, c_split = count(source, name, grid, block, args, True)
        t_fibers, c_fibers = count(source, name, grid, block, args, False)
        differ = [k for k, v in c_fibers.items()
                  if not (v == c_split.get(k) or (v != v and c_split.get(k) != c_split.get(k)))]
        print(f"{label:18} {t_split:8.2f} {t_fibers:9.2f} {t_fibers / t_split:13.2f}  "
              f"{'identical' if not differ else 'DIFFER: ' + ', '.join(differ)}", flush=True)


if __name__ == "__main__":
    main()
