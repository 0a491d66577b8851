"""A whole program running the lecture's tiled 16 kernel on emu (issue 34): its kernels split at
their barriers (thread loops) against the same build with TILEDMM_EMU_SPLIT=0 (fibers),
interleaved, best of N. The program fills A and B itself (no stdin), launches the kernel
`--launches` times and prints a checksum; the times are the launches' own (the emulator's wall
time, `ProgramLaunch.ms`: the best launch of each run, then the best run) and each tm.run's
whole wall time. Beside them, interleaved: the same kernel through tm.compile (thread loops,
`res.timing.kernel_ms_min` of as many launches). Measure on one core:

    TILEDMM_EMU_THREADS=1 taskset -c 0 python benchmarks/program_split.py --size 256 --runs 5
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import numpy as np  # noqa: E402

import tiledmm as tm  # noqa: E402

with open(os.path.join(os.path.dirname(HERE), "tests", "kernels", "tiled16.cu")) as _f:
    KERNEL = _f.read()

MAIN = r"""
#include <cstdio>
#include <cstdlib>
int main(int argc, char **argv)
{
    const int n = atoi(argv[1]), launches = atoi(argv[2]);
    const size_t sz = (size_t)n * n;
    float *A = (float *)malloc(sz * 4), *B = (float *)malloc(sz * 4), *C = (float *)malloc(sz * 4);
    unsigned s = 12345;
    for (size_t i = 0; i < 2 * sz; ++i) {   // a small LCG: the same data on every run
        s = s * 1664525u + 1013904223u;
        (i < sz ? A[i] : B[i - sz]) = (s >> 8) * (1.0f / 16777216.0f) - 0.5f;
    }
    float *dA, *dB, *dC;
    cudaMalloc(&dA, sz * 4); cudaMalloc(&dB, sz * 4); cudaMalloc(&dC, sz * 4);
    cudaMemcpy(dA, A, sz * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sz * 4, cudaMemcpyHostToDevice);
    dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    for (int r = 0; r < launches; ++r)
        tiled<<<grid, block>>>(dA, dB, dC, n, n, n);
    cudaMemcpy(C, dC, sz * 4, cudaMemcpyDeviceToHost);
    double sum = 0;
    for (size_t i = 0; i < sz; ++i) sum += C[i] * (double)((i % 7) + 1);
    printf("%.17g\n", sum);
    return 0;
}
"""


def one(size, launches, split):
    if split:
        os.environ.pop("TILEDMM_EMU_SPLIT", None)
    else:
        os.environ["TILEDMM_EMU_SPLIT"] = "0"
    t0 = time.perf_counter()
    r = tm.run(KERNEL + MAIN, args=[size, launches], backend="emu", timeout=600)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"the program failed: {r.stderr}")
    paths = {ln.path for ln in r.launches}
    return min(ln.ms for ln in r.launches), wall, r.stdout.strip(), paths


def compiled(size, launches):
    """The kernel_ms_min of the same kernel through tm.compile (thread loops), as a reference."""
    os.environ.pop("TILEDMM_EMU_SPLIT", None)
    kernel = tm.compile(KERNEL, backend="emu")
    rng = np.random.default_rng(1)
    A = rng.standard_normal((size, size)).astype(np.float32)
    B = rng.standard_normal((size, size)).astype(np.float32)
    C = np.zeros((size, size), np.float32)
    g = (size + 15) // 16
    res = kernel((g, g), (16, 16), A, B, C, *(np.int32(size),) * 3, warmup=0, repeat=launches)
    return res.timing.kernel_ms_min, res.launch.path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()
    one(16, 1, True)   # the build, cached from here on (one build serves both paths)
    best = {True: (float("inf"), float("inf")), False: (float("inf"), float("inf"))}
    sums, seen, user = set(), {}, (float("inf"), "")
    compiled(16, 1)   # its compile, cached
    for _ in range(args.runs):
        for split in (True, False):
            ms, wall, out, paths = one(args.size, args.launches, split)
            best[split] = (min(best[split][0], ms), min(best[split][1], wall))
            sums.add(out)
            seen[split] = paths
        ms, path = compiled(args.size, args.launches)
        user = (min(user[0], ms), path)
    print(f"tiled 16, {args.size}^3 float32, whole program on emu, best of {args.runs} runs "
          f"(each the best of {args.launches} launches), TILEDMM_EMU_THREADS="
          f"{os.environ.get('TILEDMM_EMU_THREADS', '(default)')}")
    for split, name in ((True, "split (thread loops)"), (False, "TILEDMM_EMU_SPLIT=0 (fibers)")):
        print(f"  {name:30s} kernel {best[split][0]:9.2f} ms   tm.run wall {best[split][1]:7.2f} s"
              f"   paths {sorted(seen[split])}")
    print(f"  {'tm.compile, same kernel':30s} kernel {user[0]:9.2f} ms   path {user[1]}")
    print(f"  ratio fibers/split (kernel): {best[False][0] / best[True][0]:.2f}x; "
          f"checksums {'identical' if len(sums) == 1 else 'DIFFER: ' + str(sums)}")


if __name__ == "__main__":
    main()
