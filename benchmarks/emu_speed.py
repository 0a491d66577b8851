"""The emulator's speed on one CPU core: what barriers cost (issue 34).

Times every registry kernel on the `emu` backend with one emulator thread pinned to one core,
beside the naive triple loop as plain C++ compiled here in the same run (g++ -O2, no emulator),
and prints the ratios the issue's targets are stated in:

- `tiled` tile 16 at 256^3 against the plain loop (target: within 4.5x, i.e. <= 15 ms);
- each barrier kernel against its barrier-free equivalent (`tiled`, `coarse`, `colmajor_b`,
  `regtile`, `fast` against `naive` block 16; reductions against `shuffle`, which barriers
  only once per block).

Times are the best of --repeat launches (res.timing.kernel_ms_min: CPU time of the launch),
taken after a warm-up launch, so a busy machine inflates them less than medians would.

    PYTHONPATH=. python benchmarks/emu_speed.py [--size 256] [--reduce-n 4194304] [--repeat 5] [--cpu 0]
                                               [--json out.json] [--baseline old.json]

--baseline prints, beside each row, how many times faster than a previous --json run it is.

--fibers times every registry kernel on both of the emulator's paths in the same run, each
launch series on the thread loops followed at once by the same on fibers (TILEDMM_EMU_SPLIT=0,
read per launch), --rounds times over (best of all rounds per path), and prints the fibers'
time and fibers / thread loops beside each row: the ratio the issue's "3x faster than today"
target is stated in, measured interleaved. The `path` column says which path a row's default
launch took.

`user ...` rows: the lecture's tiled kernel (tile 16) and the naive kernel as a student writes
them, through tm.compile, on both of the emulator's paths: split at their barriers into loops
over the block's threads ("thread loops", tiledmm/toolchain/split/transform.py) and one fiber per CUDA
thread (TILEDMM_EMU_SPLIT=0). `--only user` times just those (and `naive` block 16).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import tiledmm as tm

PLAIN_LOOP = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
// The naive kernel's arithmetic as a plain loop: one sum per element of C, k innermost (ijk),
// and the same loop with j innermost (ikj), which the compiler vectorises.
__attribute__((noinline)) void ijk(const float *A, const float *B, float *C, int n)
{
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
            float s = 0;
            for (int k = 0; k < n; ++k) s += A[i * n + k] * B[k * n + j];
            C[i * n + j] = s;
        }
}
__attribute__((noinline)) void ikj(const float *A, const float *B, float *C, int n)
{
    for (int i = 0; i < n * n; ++i) C[i] = 0;
    for (int i = 0; i < n; ++i)
        for (int k = 0; k < n; ++k) {
            float a = A[i * n + k];
            for (int j = 0; j < n; ++j) C[i * n + j] += a * B[k * n + j];
        }
}
int main(int argc, char **argv)
{
    int n = atoi(argv[1]), reps = atoi(argv[2]);
    std::vector<float> A(n * n), B(n * n), C(n * n);
    for (int i = 0; i < n * n; ++i) { A[i] = (i % 7) * 0.25f; B[i] = (i % 5) * 0.5f; }
    for (int v = 0; v < 2; ++v) {
        double best = 1e30;
        for (int r = 0; r <= reps; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            (v ? ikj : ijk)(A.data(), B.data(), C.data(), n);
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (r && ms < best) best = ms;   // r == 0 warms up
        }
        printf("%s %.4f %g\n", v ? "ikj" : "ijk", best, C[n + 1]);
    }
}
"""

# the lecture's tiled kernel (M x K @ K x N), shared with tests/test_barrier_split.py
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "kernels",
                       "tiled16.cu")) as _f:
    USER_TILED = _f.read()
USER_NAIVE = r"""
__global__ void naive(const float *A, const float *B, float *C, int n)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && col < n) {
        float sum = 0.0f;
        for (int k = 0; k < n; ++k)
            sum += A[row * n + k] * B[k * n + col];
        C[row * n + col] = sum;
    }
}
"""


def user_rows(A, B, ref, repeat):
    """{label: row} for the user kernels on both emulator paths (see the module's docstring)."""
    n = A.shape[0]
    rows = {}
    for kname, src in (("tiled", USER_TILED), ("naive", USER_NAIVE)):
        for path, env in (("thread loops", "1"), ("fibers", "0")):
            os.environ["TILEDMM_EMU_SPLIT"] = env
            # a distinct source per path: tm.compile's in-memory cache keys on the source
            kernel = tm.compile(src + f"// {path}\n", backend="emu")
            C = np.zeros((n, n), np.float32)
            sizes = (np.int32(n),) * (3 if kname == "tiled" else 1)   # tiled: m, n, k
            res = kernel(((n + 15) // 16, (n + 15) // 16), (16, 16), A, B, C, *sizes,
                         warmup=1, repeat=repeat)
            err = float(np.max(np.abs(C - ref)))
            if not err <= 1e-3 * np.sqrt(n) * np.max(np.abs(ref)):
                sys.exit(f"user {kname} ({path}): wrong result (max error {err:g})")
            took = getattr(res.launch, "path", "fibers") or "fibers"
            ms = res.timing.kernel_ms_min
            rows[f"user {kname} 16 [{path}]"] = {"family": "matmul", "ms": ms,
                                                 "gflops": 2.0 * n ** 3 / ms / 1e6, "path": took}
    os.environ.pop("TILEDMM_EMU_SPLIT", None)
    return rows


# (kernel, params) for every registry matmul kernel the emulator runs, and the reductions.
MATMUL_CASES = [
    ("naive", {"block": 16}), ("naive", {"block": 32}), ("naive_uncoalesced", {"block": 16}),
    ("tiled", {"tile": 8}), ("tiled", {"tile": 16}), ("tiled", {"tile": 32}),
    ("coarse", {"coarsen": 4, "tile": 16}), ("coarse", {"coarsen": 4, "tile": 32}),
    ("colmajor_b", {"corner": 1, "tile": 16}), ("colmajor_b", {"corner": 0, "tile": 16}),
    ("regtile", {"dims": 1}), ("regtile", {"dims": 2}), ("fast", {"config": 0}),
]
BARRIER_FREE_MATMUL = ("naive", {"block": 16})
REDUCE_KERNELS = ["shuffle", "vectorized", "per_level", "single_block", "multi_pass", "shared",
                  "interleaved_divergent", "interleaved_bank_conflicts", "sequential", "first_add",
                  "unroll_last_warp", "multi_element", "atomic"]
BARRIER_FREE_REDUCE = "shuffle"


def label(kernel, params):
    return kernel + "".join(f" {k}={v}" for k, v in params.items())


def plain_loop_ms(n, repeat, cpu):
    """Compiles and runs PLAIN_LOOP; returns {"ijk": ms, "ikj": ms} or None without g++."""
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "plain.cpp"), os.path.join(d, "plain")
        with open(src, "w") as f:
            f.write(PLAIN_LOOP)
        subprocess.run([cxx, "-O2", "-std=c++17", src, "-o", exe], check=True, timeout=120)
        cmd = [exe, str(n), str(repeat)]
        if shutil.which("taskset"):
            cmd = ["taskset", "-c", str(cpu)] + cmd
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    return {line.split()[0]: float(line.split()[1]) for line in out.splitlines()}


def timed_paths(run, args):
    """(best ms on the default path, the path it took, best ms on fibers or None): `run` on the
    default path, then (--fibers) on fibers, alternating --rounds times."""
    best, fibers, path = float("inf"), None, "fibers"
    for _ in range(args.rounds if args.fibers else 1):
        res = run()
        best = min(best, res.timing.kernel_ms_min)
        path = getattr(res.launch, "path", None) or "fibers"
        if args.fibers:
            os.environ["TILEDMM_EMU_SPLIT"] = "0"
            try:
                ms = run().timing.kernel_ms_min
            finally:
                del os.environ["TILEDMM_EMU_SPLIT"]
            fibers = ms if fibers is None else min(fibers, ms)
    return best, path, fibers


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=256, help="matmul M = N = K (default 256)")
    ap.add_argument("--reduce-n", type=int, default=1 << 22, help="reduction length (default 2^22)")
    ap.add_argument("--repeat", type=int, default=5, help="launches per kernel, best taken (default 5)")
    ap.add_argument("--cpu", type=int, default=0, help="the core to pin to (default 0)")
    ap.add_argument("--only", default="", help="comma-separated kernel names to time (default all)")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--baseline", help="a previous --json file: print the speed-up against it")
    ap.add_argument("--fibers", action="store_true",
                    help="also time each registry kernel on fibers (TILEDMM_EMU_SPLIT=0), "
                         "interleaved with its default path")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --fibers: alternations of the two paths per kernel (default 1)")
    args = ap.parse_args()

    # One emulator thread on one core: the emulator reads the variable at its first launch.
    os.environ["TILEDMM_EMU_THREADS"] = "1"
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})

    only = set(filter(None, args.only.split(",")))
    n = args.size
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=np.float32)
    B = rng.standard_normal((n, n), dtype=np.float32)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    x = rng.standard_normal(args.reduce_n, dtype=np.float32)
    rows = {}
    t_start = time.perf_counter()
    for kernel, params in MATMUL_CASES:
        if only and kernel not in only and (kernel, params) != BARRIER_FREE_MATMUL:
            continue
        def run_matmul():
            res = tm.matmul(A, B, kernel=kernel, backend="emu", warmup=1, repeat=args.repeat,
                            **params)
            err = float(np.max(np.abs(res.out - ref)))
            if not err <= 1e-3 * np.sqrt(n) * np.max(np.abs(ref)):
                sys.exit(f"{label(kernel, params)}: wrong result (max error {err:g})")
            return res
        ms, path, fibers_ms = timed_paths(run_matmul, args)
        rows[label(kernel, params)] = {"family": "matmul", "ms": ms, "gflops": 2.0 * n ** 3 / ms / 1e6,
                                       "path": path, "fibers_ms": fibers_ms}
    if not only or "user" in only:
        rows.update(user_rows(A, B, ref, args.repeat))
    for kernel in REDUCE_KERNELS:
        if only and "user" in only and len(only) == 1:
            break
        if only and kernel not in only and kernel != BARRIER_FREE_REDUCE:
            continue
        def run_reduce():
            res = tm.reduce(x, kernel=kernel, backend="emu", warmup=1, repeat=args.repeat)
            want = float(np.sum(x, dtype=np.float64))
            if abs(float(res.out) - want) > 1e-4 * np.sum(np.abs(x)):
                sys.exit(f"{kernel}: wrong sum {float(res.out)} (want {want})")
            return res
        ms, path, fibers_ms = timed_paths(run_reduce, args)
        rows[kernel] = {"family": "reduce", "ms": ms, "gbps": 4.0 * x.size / ms / 1e6,
                        "path": path, "fibers_ms": fibers_ms}
    plain = plain_loop_ms(n, args.repeat, args.cpu)
    baseline = None
    if args.baseline:
        with open(args.baseline) as f:
            baseline = json.load(f)["rows"]

    print(f"tiledmm emulator, one core (TILEDMM_EMU_THREADS=1, cpu {args.cpu}); "
          f"matmul {n}^3 float32, reduce 2^{args.reduce_n.bit_length() - 1} float32; best of {args.repeat}")
    if plain:
        print(f"plain C++ naive loop (g++ -O2, same run): ijk {plain['ijk']:.2f} ms, ikj (vectorised) "
              f"{plain['ikj']:.2f} ms; /plain below is against the faster of the two")
    free_mm = rows.get(label(*BARRIER_FREE_MATMUL), {}).get("ms")
    free_red = rows.get(BARRIER_FREE_REDUCE, {}).get("ms")
    fastest_plain = min(plain.values()) if plain else None
    head = f"{'kernel':36} {'ms':>9} {'rate':>12} {'/barrier-free':>14} {'/plain':>8}"
    head += f" {'path':>12}"
    if args.fibers:
        head += f" {'fibers ms':>10} {'fibers/this':>11}"
    if baseline:
        head += f" {'speed-up':>9}"
    print(head)
    for name, r in rows.items():
        rate = f"{r['gflops']:.2f} GFLOP/s" if "gflops" in r else f"{r['gbps']:.2f} GB/s"
        free = free_mm if r["family"] == "matmul" else free_red
        line = f"{name:36} {r['ms']:9.2f} {rate:>12} {r['ms'] / free:14.2f}"
        line += f" {r['ms'] / fastest_plain:8.2f}" if plain and r["family"] == "matmul" else f" {'':>8}"
        line += f" {r.get('path', ''):>12}"
        if args.fibers:
            f_ms = r.get("fibers_ms")
            line += (f" {f_ms:10.2f} {f_ms / r['ms']:10.2f}x" if f_ms else f" {'':>10} {'':>11}")
        if baseline and name in baseline:
            line += f" {baseline[name]['ms'] / r['ms']:8.2f}x"
        print(line)
    tiled16, naive16 = rows.get("tiled tile=16"), rows.get("naive block=16")
    if tiled16 and plain and n == 256:
        print(f"target: tiled 16 <= 15 ms and within 4.5x of the plain loop: {tiled16['ms']:.1f} ms, "
              f"{tiled16['ms'] / fastest_plain:.2f}x")
    elif tiled16 and naive16 and n >= 512:
        print(f"moonshot: tiled 16 at least as fast as naive 16 at {n}^3: "
              f"naive / tiled = {naive16['ms'] / tiled16['ms']:.2f}")
    print(f"({time.perf_counter() - t_start:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": n, "reduce_n": args.reduce_n, "repeat": args.repeat, "plain": plain,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
