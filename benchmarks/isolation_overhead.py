"""What isolation costs: a user kernel launched in tiledmm's worker process (isolate=True, the
default) against the same kernel in the caller's process (isolate=False).

- per launch: wall time of one call of a small kernel (1,000 floats), median of many calls
  after warm-up, both ways;
- large arrays: wall time of one call on 64 Mi floats (256 MiB in, 256 MiB out) both ways,
  beside one NumPy copy of the same array (the worker's path copies each input once into
  shared memory and each output once out of it).

    python benchmarks/isolation_overhead.py [--backend emu|cuda] [--calls 200]
"""
import argparse
import statistics
import time

import numpy as np

import tiledmm as tm

SOURCE = r"""
__global__ void scale(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def median_ms(fn, calls, warmup=5):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--large", type=int, default=64 * 2**20, help="floats in the large case")
    args = ap.parse_args()
    backend = tm._backend.resolve(args.backend)[1]
    rows = []
    for n, calls in ((1000, args.calls), (args.large, 5)):
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        y = np.empty_like(x)
        grid = (n + 255) // 256
        times = {}
        for isolate in (False, True):
            kernel = tm.compile(SOURCE, backend=backend, isolate=isolate)
            times[isolate] = median_ms(lambda: kernel(grid, 256, x, y, 2.0, n, backend=backend,
                                                      warmup=0, repeat=1), calls)
            assert np.array_equal(y, 2.0 * x)
        copy = median_ms(lambda: np.copyto(y, x), calls)
        rows.append((n, times[False], times[True], times[True] - times[False], copy))
    print(f"backend {backend}: wall time of one call (median), isolate=False vs True")
    print(f"{'floats':>10} {'in-process ms':>14} {'isolated ms':>12} {'added ms':>9} "
          f"{'one NumPy copy ms':>18}")
    for n, a, b, d, c in rows:
        print(f"{n:>10} {a:>14.3f} {b:>12.3f} {d:>9.3f} {c:>18.3f}")


if __name__ == "__main__":
    main()
