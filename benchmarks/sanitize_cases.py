"""Every registered kernel, with every combination of its parameter values, on a set of awkward
shapes, once each: the workload that sanitizers run.

On the GPU (benchmarks/gpu_run.sh):
    compute-sanitizer --tool memcheck|racecheck|synccheck|initcheck \\
        python3 benchmarks/sanitize_cases.py
On the CPU emulator under AddressSanitizer (tests/test_asan.py does this in CI):
    LD_PRELOAD=$(g++ -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \\
        python3 benchmarks/sanitize_cases.py --backend emu

Shapes: 1x1x1, a single row, a single column, primes below one tile, several tiles with a
remainder in every dimension, a long K with a tiny output, exact multiples of every tile;
reductions of lengths 1, 2, one under and over a warp, not powers of two, more than one block
squared (three passes for multi-pass kernels). Every kernel variant runs in float32 (or its
only dtype); the default variant also runs in every other dtype it supports.
Results are checked against NumPy (except kernels named demo_*, which are deliberately
wrong lessons; they still must not touch memory they do not own).

Prints one line per variant ending in ': ok', ': FAILED ...' or ': skipped (...)'; exits 1
when any variant failed. Runtime: a few seconds per kernel under a sanitizer on an H100
(warmup=0, repeat=1), about 10 s for everything on the emulator (a minute under ASan).
"""
import argparse
import os
import sys
import time
import traceback

import numpy as np

try:
    import tiledmm as tm  # installed, or on PYTHONPATH (tests/test_asan.py points it at a build)
except ImportError:  # run from a checkout built in place
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import tiledmm as tm
from tiledmm.testing import assert_matmul_close, assert_sum_close  # noqa: E402 (after tm)

MATMUL_SHAPES = [  # (M, N, K)
    (1, 1, 1), (1, 67, 5), (67, 1, 3), (33, 17, 9), (70, 65, 37), (5, 3, 131), (128, 64, 64),
    (257, 130, 67),
]
REDUCE_LENGTHS = [1, 2, 31, 33, 1000, 4097, 70001]
REDUCE_LONG = (1 << 20) + 3   # > 1024^2: three passes for multi-pass kernels at block 1024
VEC_LENGTHS = [1, 33, 1000, 4097]
MAT_SHAPES = [(1, 1), (33, 17), (70, 65), (1, 1000), (1000, 3)]


# Kernels whose tensor cores round the inputs to fewer fraction bits than float32's (wmma: FP16
# or TF32, 10 bits): their results are checked within that precision (tests/test_properties.py).
REDUCED_INPUT_BITS = {"wmma": 10}
# tf32x3: FP32 accuracy from three TF32 products; the split's dropped terms (a_small b_small and
# the small parts' own rounding) add up to about 3 2^-22 |a||b| per product: 16 eps more.
EXTRA_EPS = {"tf32x3": 16}


def is_demonstration(spec):
    """Kernels that are deliberately wrong (a lesson in what not to do): checked for memory
    safety, not for their results."""
    return spec.name.startswith("demo_")


def run_variant(spec, params, dtype, backend, rng, long_reduce, quick=False):
    check = not is_demonstration(spec)
    call = dict(kernel=spec.name, backend=backend, warmup=0, repeat=1, **params)
    if spec.family == "matmul":
        for M, N, K in MATMUL_SHAPES[:-1] if quick else MATMUL_SHAPES:
            A = (rng.random((M, K)) * 2 - 1).astype(dtype)
            B = (rng.random((K, N)) * 2 - 1).astype(dtype)
            res = tm.matmul(A, B, **call)
            if check:
                bits = REDUCED_INPUT_BITS.get(spec.name)
                # float32's bound is safety (K + 2) 2^-23 |A||B|; 2^-bits |A||B| more for the inputs
                safety = 2.0 + (2.0 ** (23 - bits) / (K + 2) if bits else 0.0) + \
                    EXTRA_EPS.get(spec.name, 0) / (K + 2)
                assert_matmul_close(res.out, A, B, safety=safety)
    elif spec.family == "reduce":
        for n in REDUCE_LENGTHS + ([REDUCE_LONG] if long_reduce else []):
            x = (rng.random(n) * 2 - 1).astype(dtype)
            res = tm.reduce(x, **call)
            if check:
                assert_sum_close(res.out, x)
    elif spec.family == "elementwise":
        fn = tm.vec_add if spec.name == "vec_add" else tm.mat_add
        shapes = [(n,) for n in VEC_LENGTHS] if spec.name == "vec_add" else MAT_SHAPES
        for shape in shapes:
            a = (rng.random(shape) * 2 - 1).astype(dtype)
            b = (rng.random(shape) * 2 - 1).astype(dtype)
            res = fn(a, b, **call)
            if check:
                np.testing.assert_array_equal(res.out, a + b)
    else:
        raise AssertionError(f"unknown family {spec.family!r}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["cuda", "emu"], default="cuda")
    parser.add_argument("--kernels", nargs="+", default=None, help="only these kernels")
    parser.add_argument("--quick", action="store_true",
                        help=f"skip the largest shapes (matmul {MATMUL_SHAPES[-1]}, reduce "
                             f"{REDUCE_LONG}): for the emulator under AddressSanitizer")
    args = parser.parse_args(argv)
    tm.set_backend(args.backend)  # fails here, once, when the backend cannot be used
    rng = np.random.default_rng(3)
    failed = ran = skipped = 0
    start = time.perf_counter()
    for spec in tm.kernels():
        if args.kernels and spec.name not in args.kernels:
            continue
        t0 = time.perf_counter()
        default = spec.defaults
        for params in spec.param_combinations():
            dtypes = list(spec.dtypes) if params == default else [spec.dtypes[0]]
            label = f"{spec.family} {spec.name} {params}"
            try:
                for dtype in dtypes:
                    # the long reduction once per kernel: it dominates the runtime
                    long_reduce = params == default and not args.quick
                    run_variant(spec, params, np.dtype(dtype), args.backend, rng, long_reduce, args.quick)
            except RuntimeError as exc:
                if "cudaErrorNotSupported" in str(exc) or "NotYetImplemented" in str(exc):
                    skipped += 1
                    print(f"{label}: skipped (not supported on {args.backend}, or not built)",
                          flush=True)
                    break  # the other variants of this kernel are not supported either
                failed += 1
                print(f"{label}: FAILED {type(exc).__name__}: {exc}", flush=True)
            except Exception as exc:  # report, go on with the next variant
                failed += 1
                print(f"{label}: FAILED {type(exc).__name__}: {exc}", flush=True)
                traceback.print_exc()
            else:
                ran += 1
                print(f"{label}: ok", flush=True)
        print(f"  ({spec.name}: {time.perf_counter() - t0:.2f} s)", flush=True)
    print(f"{ran} variants ok, {failed} failed, {skipped} kernels skipped on {args.backend} "
          f"in {time.perf_counter() - start:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
