"""Assertions for comparing tiledmm (or any kernel's) results with NumPy, for tiledmm's own
tests and a course's. References are computed in float64; tolerances grow with the length of
the dot products or sums, as floating-point error bounds do.

Bound used: a float sum of n terms differs from the exact one by at most about n * eps times
the sum of the terms' magnitudes, whatever the order of the additions (Higham, "Accuracy and
Stability of Numerical Algorithms", 3.1). It never fails a correct kernel; for long sums it is
loose, so pair it with an exact test: small nonzero integers (say in [-8, 8]) sum and multiply
exactly in float32 while partial sums stay below 2**24, so any dropped, doubled or misplaced
term changes the result (see `exact_integer_matrix`).
"""
import numpy as np

__all__ = ["assert_matmul_close", "assert_sum_close", "matmul_tolerance", "sum_tolerance",
           "assert_same_nonfinite", "exact_integer_matrix"]


def exact_integer_matrix(rng, shape, dtype=np.float32, high=8):
    """Random nonzero integers in [-high, high] as floats: sums and products of these are exact
    in float32 while partial sums stay below 2**24, so results can be compared exactly."""
    values = rng.integers(1, high + 1, size=shape) * rng.choice([-1, 1], size=shape)
    return values.astype(dtype)


def _eps(dtype):
    return float(np.finfo(np.dtype(dtype)).eps)


def matmul_tolerance(A, B, dtype, safety=2.0):
    """Per-element tolerance for A @ B computed in `dtype`: ``safety * (K + 2) * eps * |A| @ |B|``,
    plus the smallest normal number so exact zeros compare."""
    A64 = np.abs(np.asarray(A, dtype=np.float64))
    B64 = np.abs(np.asarray(B, dtype=np.float64))
    K = A64.shape[1]
    with np.errstate(invalid="ignore", over="ignore"):
        bound = A64 @ B64
    return safety * (K + 2) * _eps(dtype) * bound + np.finfo(np.dtype(dtype)).tiny


def assert_same_nonfinite(actual, expected, what="result"):
    """NaN where expected is NaN, the same infinity where expected is infinite."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    nan_expected, nan_actual = np.isnan(expected), np.isnan(actual)
    if not np.array_equal(nan_expected, nan_actual):
        where = np.argwhere(nan_expected != nan_actual)[:5].tolist()
        raise AssertionError(f"{what}: NaN positions differ from NumPy's, e.g. at {where}")
    inf_expected = np.isinf(expected)
    if not np.array_equal(inf_expected, np.isinf(actual)) or \
            not np.array_equal(expected[inf_expected], actual[inf_expected]):
        where = np.argwhere(inf_expected != np.isinf(actual))[:5].tolist()
        raise AssertionError(f"{what}: infinities differ from NumPy's, e.g. at {where}")


# Kernels that round their inputs to fewer fraction bits than float32's before multiplying, and
# how many they keep (the tensor-core rung: FP16 or TF32, 10 bits; FP32 accumulation).
REDUCED_INPUT_BITS = {"wmma": 10}
# Kernels where a product of two infinities is NaN, not IEEE's +-Inf (tf32x3 keeps an infinite
# input in its small part and drops small x small: cuda/matmul_tf32x3.cu says why).
INF_TIMES_INF_IS_NAN = {"tf32x3"}


def assert_matmul_close(C, A, B, safety=2.0, kernel=None):
    """C must equal A @ B (computed in float64) within the K-scaled tolerance of C's dtype, and
    have NaN and infinities exactly where NumPy's float64 product has them. `kernel`: the
    registry kernel that made C; one of REDUCED_INPUT_BITS is allowed its inputs' rounding, one
    of INF_TIMES_INF_IS_NAN NaN where a product of two infinities meets.

    >>> from tiledmm.testing import assert_matmul_close
    >>> rng = np.random.default_rng(0)
    >>> A = rng.random((40, 30), dtype=np.float32); B = rng.random((30, 20), dtype=np.float32)
    >>> C = tm.matmul(A, B, kernel="tiled", tile=8, backend="emu").out
    >>> assert_matmul_close(C, A, B)          # passes: nothing happens
    >>> assert_matmul_close(C + 1, A, B)
    Traceback (most recent call last):
        ...
    AssertionError: matmul: 800 of 800 elements out of tolerance; first at [0, 0]: ...
    """
    C = np.asarray(C)
    A64, B64 = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = A64 @ B64
    if C.shape != expected.shape:
        raise AssertionError(f"shape {C.shape}, expected {expected.shape}")
    if kernel in INF_TIMES_INF_IS_NAN:
        expected[(np.isinf(A64).astype(np.float64) @ np.isinf(B64).astype(np.float64)) > 0] = np.nan
    if C.dtype == np.float32:
        # Products that overflow float32 but not float64 are not errors of the kernel.
        with np.errstate(over="ignore"):
            expected_in_dtype = expected.astype(np.float32)
    else:
        expected_in_dtype = expected
    assert_same_nonfinite(C, expected_in_dtype, "matmul")
    finite = np.isfinite(expected_in_dtype)
    tol = matmul_tolerance(A, B, C.dtype, safety)
    if kernel in REDUCED_INPUT_BITS:   # each input rounded to `bits`: 2^-bits per product
        with np.errstate(invalid="ignore", over="ignore"):
            tol = tol + 2.0 ** -REDUCED_INPUT_BITS[kernel] * (np.abs(A64) @ np.abs(B64))
    with np.errstate(invalid="ignore"):
        err = np.abs(C.astype(np.float64) - expected)
    bad = finite & ~(err <= tol)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise AssertionError(
            f"matmul: {int(bad.sum())} of {C.size} elements out of tolerance; first at "
            f"[{i}, {j}]: got {C[i, j]!r}, expected {expected[i, j]!r} "
            f"(error {err[i, j]:.3g} > tolerance {tol[i, j]:.3g}, K={A64.shape[1]})")


def _exact_sum(x64, dtype):
    """True when every summation order of x64 in `dtype` is exact: the values are integer
    multiples of one power of two 2^-k, and sum|x| / 2^-k stays below 2^(significand bits), so
    every partial sum is representable (small integers, say: exact_integer_matrix)."""
    if not x64.size:
        return True
    bits = np.finfo(dtype).nmant + 1
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = float(np.abs(x64).sum())
    if not np.isfinite(magnitude):
        return False
    sample = x64[:: max(1, x64.size // 1024)]
    for k in range(0, 31):
        scale = 2.0 ** k
        if magnitude * scale >= 2.0 ** bits:
            return False
        if np.all(np.floor(sample * scale) == sample * scale):
            y = x64 * scale
            return bool(np.all(np.floor(y) == y))
    return False


def sum_tolerance(x, dtype=None, safety=2.0, any_order=False):
    """The one tolerance of a float sum of x (tiledmm's tests, tm.grade_reduce and the grader's
    'sum'): 0 where every summation order is exact (small integers with n * max < 2^24 in
    float32), so that a kernel that skips or doubles any term fails; otherwise
    safety * (ceil(log2 n) + 2) * eps * sum|x|, the bound of a tree of additions (a block's
    shared-memory reduction, partial sums combined in float64). any_order=True: Higham's bound
    for any order, (n + 2) instead of the tree's depth (a loop, atomics over many blocks)."""
    x = np.asarray(x)
    if dtype is None:
        native = np.dtype(x.dtype.type)  # byte order does not change the precision
        dtype = native if native in (np.float32, np.float64) else np.dtype(np.float64)
    dtype = np.dtype(dtype)
    x64 = x.astype(np.float64).ravel()
    if _exact_sum(x64, dtype):
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = float(np.abs(x64).sum())
    n = x64.size
    depth = n if any_order else int(np.ceil(np.log2(max(n, 1))))
    return safety * (depth + 2) * _eps(dtype) * magnitude + float(np.finfo(dtype).tiny)


def assert_sum_close(total, x, safety=2.0, any_order=True):
    """total must equal sum(x) (computed in float64) within sum_tolerance: exactly for inputs
    every order sums exactly (small integers), else within (n + 2) * eps * sum|x| (any order;
    any_order=False: the tree bound, ceil(log2 n) + 2) for the dtype of x; NaN and infinities
    as NumPy's float64 sum has them."""
    x = np.asarray(x)
    native = np.dtype(x.dtype.type)  # byte order does not change the precision
    dtype = native if native in (np.float32, np.float64) else np.dtype(np.float64)
    x64 = x.astype(np.float64).ravel()
    with np.errstate(invalid="ignore", over="ignore"):
        expected = x64.sum()
    total = np.asarray(total, dtype=np.float64)
    if not np.isfinite(expected) or not np.isfinite(total):
        if dtype == np.float32 and np.isfinite(expected) and abs(expected) > np.finfo(np.float32).max:
            return
        assert_same_nonfinite(total, expected, "sum")
        return
    tol = sum_tolerance(x, dtype, safety, any_order)
    if not abs(float(total) - expected) <= tol:
        raise AssertionError(f"sum: got {float(total)!r}, expected {expected!r} "
                             f"(error {abs(float(total) - expected):.3g} > tolerance {tol:.3g}, "
                             f"n={x64.size})")
