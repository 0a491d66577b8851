"""Property-based tests (hypothesis) against NumPy, for every registered matmul, reduce and
elementwise kernel and every combination of its parameters.

Each example draws a shape (1, primes, tile edges and their neighbours, or anything up to a
few tiles), a memory layout per input (C, Fortran, strided view, negative strides, transposed
view, read-only, big-endian bytes), dtypes (float32, float64, mixed) and values of one kind:
  uniform  random in [-1, 1): compared with NumPy's float64 result within the K-scaled bound
           of tiledmm.testing (a dropped, doubled or misplaced term is far outside it);
  exact    small nonzero integers: every sum is exact in float32, so the result must EQUAL
           NumPy's float64 result bit for bit;
  special  uniform values with NaN, +Inf, -Inf and zeros scattered in: NaN and infinities
           must come out exactly where NumPy's come out (Inf * 0 = NaN, Inf - Inf = NaN).
Kernels are picked up from the registry (tm.kernels(family)), so new ones are tested as they
are registered. Examples are derandomized (the same on every run) and there is no example
database, so CI is stable. About a minute on the emulator.
"""
import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiledmm as tm
from tiledmm import testing
from tiledmm.testing import assert_matmul_close, assert_sum_close, exact_integer_matrix

SETTINGS = dict(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
EXAMPLES = {"matmul": 30, "reduce": 25, "elementwise": 10}

SMALL = [1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32, 33, 37, 61, 64, 65, 67, 71]
DIM = st.one_of(st.sampled_from(SMALL), st.integers(1, 72))
LENGTHS = [1, 2, 3, 5, 31, 32, 33, 127, 128, 129, 257, 1023, 1024, 1025, 2049, 4099, 8191,
           20011, 66049]
LAYOUTS = ["C", "F", "strided", "negative", "transposed", "readonly"]
VALUE_KINDS = ["uniform", "exact", "special"]
# Kernels whose tensor cores take their inputs rounded to fewer fraction bits than float32's
# (tiledmm.testing.REDUCED_INPUT_BITS): uniform results are compared within that precision's
# bound, which grows with K through |A| @ |B| as the float32 one does.
REDUCED_INPUT_BITS = testing.REDUCED_INPUT_BITS


def names(family):
    return [spec.name for spec in tm.kernels(family)]


@functools.lru_cache(maxsize=None)
def unsupported(name, backend):
    """Why a kernel cannot run on a backend at all (cublas on the emulator; cutlass in a copy
    built without its headers), or None."""
    spec = tm._registry.specs()[name]
    A = np.ones((1, 1), spec.dtypes[0])
    try:
        if spec.family == "matmul":
            tm.matmul(A, A, kernel=name, backend=backend)
        elif spec.family == "reduce":
            tm.reduce(A, kernel=name, backend=backend)
    except RuntimeError as exc:
        if "NotSupported" in str(exc) or "NotYetImplemented" in str(exc):   # cutlass unbuilt
            return str(exc)
        raise
    return None


@pytest.fixture
def usable(backend):
    def check(name):
        reason = unsupported(name, backend)
        if reason:
            pytest.skip(f"{name} does not run on {backend}: {reason}")
    return check


def dtype_pairs(spec):
    """(dtype of A, dtype of B) pairs whose common type the kernel supports."""
    f32, f64 = "float32" in spec.dtypes, "float64" in spec.dtypes
    pairs = []
    if f32:
        pairs += [("<f4", "<f4"), (">f4", "<f4")]
    if f64:
        pairs += [("<f8", "<f8"), ("<f4", "<f8"), ("<f8", "<f4"), (">f8", ">f4")]
    return pairs


def with_layout(x, layout):
    """An array equal to x (2-D) with the given memory layout."""
    if layout == "C":
        return np.ascontiguousarray(x)
    if layout == "F":
        return np.asfortranarray(x)
    if layout == "strided":  # a view with steps of 2 rows and 3 columns into a larger array
        big = np.full((2 * x.shape[0], 3 * x.shape[1]), np.float32(1e30), x.dtype)
        big[::2, ::3] = x
        return big[::2, ::3]
    if layout == "negative":  # negative strides in both dimensions
        return np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]
    if layout == "transposed":  # the transpose of a C array: Fortran-ordered, via .T
        return np.ascontiguousarray(x.T).T
    if layout == "readonly":
        y = x.copy()
        y.flags.writeable = False
        return y
    raise AssertionError(layout)


def make_values(rng, shape, dtype, kind):
    if kind == "exact":
        return exact_integer_matrix(rng, shape, np.float64).astype(dtype)
    x = (rng.random(shape) * 2 - 1).astype(dtype)
    if kind == "special" and x.size:
        count = rng.integers(1, max(2, x.size // 8) + 1)
        where = rng.integers(0, x.size, size=count)
        x.reshape(-1)[where] = rng.choice([np.nan, np.inf, -np.inf, 0.0], size=count)
    return x


# ---- matmul ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", names("matmul"))
@settings(max_examples=EXAMPLES["matmul"], **SETTINGS)
@given(data=st.data())
def test_matmul_matches_numpy(backend, usable, name, data):
    usable(name)
    spec = tm._registry.specs()[name]
    params = data.draw(st.sampled_from(spec.param_combinations()), label="params")
    M, N, K = data.draw(st.tuples(DIM, DIM, DIM), label="M, N, K")
    dA, dB = data.draw(st.sampled_from(dtype_pairs(spec)), label="dtypes")
    lA, lB = data.draw(st.tuples(st.sampled_from(LAYOUTS), st.sampled_from(LAYOUTS)),
                       label="layouts")
    kind = data.draw(st.sampled_from(VALUE_KINDS), label="values")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    A = with_layout(make_values(rng, (M, K), dA, kind), lA)
    B = with_layout(make_values(rng, (K, N), dB, kind), lB)
    A_before, B_before = A.copy(), B.copy()

    C = tm.matmul(A, B, kernel=name, backend=backend, **params).out

    assert C.shape == (M, N)
    assert C.dtype == np.result_type(A.dtype, B.dtype).newbyteorder("=")
    assert C.flags.c_contiguous and C.flags.writeable
    np.testing.assert_array_equal(A, A_before)  # inputs are never written
    np.testing.assert_array_equal(B, B_before)
    if kind == "exact":
        np.testing.assert_array_equal(C, A.astype(np.float64) @ B.astype(np.float64))
    elif name in REDUCED_INPUT_BITS:
        assert_reduced_precision_close(C, A, B, REDUCED_INPUT_BITS[name])
    else:
        assert_matmul_close(C, A, B, kernel=name)


def assert_reduced_precision_close(C, A, B, bits):
    """Inputs rounded to `bits` fraction bits (a relative 2^-(bits+1) each), exact products,
    float32 accumulation: |C - A B| <= (2^-bits + (K + 2) eps32) |A| @ |B|; NaN and infinities
    where NumPy's are."""
    A64, B64 = np.asarray(A, np.float64), np.asarray(B, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = A64 @ B64
        bound = np.abs(A64) @ np.abs(B64)
    tm.testing.assert_same_nonfinite(C, expected.astype(np.float32), "matmul")
    finite = np.isfinite(expected)
    tol = (2.0 ** -bits * 1.01 + (A64.shape[1] + 2) * 2.0 ** -23) * bound + 1e-30
    with np.errstate(invalid="ignore"):
        err = np.abs(C.astype(np.float64) - expected)
    assert not (finite & ~(err <= tol)).any(), float(np.nanmax(np.where(finite, err / tol, 0)))


# ---- reduce ------------------------------------------------------------------------------

def reduce_input(data, rng, dtype, kind, max_length):
    """A 1-D, 2-D or 3-D array of some layout whose flattened length is drawn from LENGTH."""
    n = data.draw(st.one_of(st.sampled_from([v for v in LENGTHS if v <= max_length]),
                            st.integers(1, min(5000, max_length))), label="length")
    ndim = data.draw(st.sampled_from([1, 1, 2, 3]), label="ndim")
    values = make_values(rng, (n,), dtype, kind)
    if ndim == 1:
        layout = data.draw(st.sampled_from(["C", "strided", "negative", "readonly"]),
                           label="layout")
        if layout == "strided":
            big = np.zeros(3 * n, dtype)
            big[::3] = values
            return big[::3]
        if layout == "negative":
            return values[::-1].copy()[::-1]
        if layout == "readonly":
            values.flags.writeable = False
        return values
    # split n into a x b (x c): the factors of n, so primes give a 1 x n or n x 1 matrix
    divisors = [d for d in range(1, min(n, 64) + 1) if n % d == 0]
    a = data.draw(st.sampled_from(divisors), label="rows")
    shape = (a, n // a)
    x = with_layout(values.reshape(shape), data.draw(st.sampled_from(LAYOUTS), label="layout"))
    return x.reshape(a, 1, n // a) if ndim == 3 and x.flags.c_contiguous else x


@pytest.mark.parametrize("name", names("reduce"))
@settings(max_examples=EXAMPLES["reduce"], **SETTINGS)
@given(data=st.data())
def test_reduce_matches_numpy(backend, usable, name, data):
    usable(name)
    spec = tm._registry.specs()[name]
    params = data.draw(st.sampled_from(spec.param_combinations()), label="params")
    # demo_* kernels are lessons in what goes wrong; what they get right is one block's sum
    max_length = params.get("block", 0) if name.startswith("demo_") else max(LENGTHS)
    if max_length < 1:
        pytest.skip(f"{name}: a demonstration kernel without a block size")
    dtype = data.draw(st.sampled_from(
        [d for d in ("<f4", ">f4", "<f8", ">f8") if np.dtype(d).name in spec.dtypes]),
        label="dtype")
    kind = data.draw(st.sampled_from(VALUE_KINDS), label="values")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    x = reduce_input(data, rng, dtype, kind, max_length)
    before = x.copy()

    total = tm.reduce(x, kernel=name, backend=backend, **params).out

    assert total.shape == () and total.dtype == x.dtype.newbyteorder("=")
    np.testing.assert_array_equal(x, before)
    if kind == "exact":
        assert float(total) == float(x.astype(np.float64).sum())
    else:
        # native byte order: see test_assert_sum_close_big_endian_float32 below
        assert_sum_close(total, x.astype(x.dtype.newbyteorder("=")))


# ---- elementwise -------------------------------------------------------------------------

@pytest.mark.parametrize("name", names("elementwise"))
@settings(max_examples=EXAMPLES["elementwise"], **SETTINGS)
@given(data=st.data())
def test_elementwise_matches_numpy(backend, name, data):
    spec = tm._registry.specs()[name]
    params = data.draw(st.sampled_from(spec.param_combinations()), label="params")
    shape = data.draw(st.tuples(DIM, DIM), label="shape")
    if name == "vec_add":
        shape = (shape[0] * shape[1],)
    dA, dB = data.draw(st.sampled_from(dtype_pairs(spec)), label="dtypes")
    kind = data.draw(st.sampled_from(["uniform", "special"]), label="values")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    a, b = make_values(rng, shape, dA, kind), make_values(rng, shape, dB, kind)
    if len(shape) == 2:
        a = with_layout(a, data.draw(st.sampled_from(LAYOUTS), label="layout a"))
        b = with_layout(b, data.draw(st.sampled_from(LAYOUTS), label="layout b"))
    fn = tm.vec_add if name == "vec_add" else tm.mat_add
    out = fn(a, b, kernel=name, backend=backend, **params).out
    with np.errstate(invalid="ignore"):
        expected = a + b
    np.testing.assert_array_equal(out, expected)  # one rounding each: exact, NaN included
    assert out.dtype == expected.dtype.newbyteorder("=")


# ---- explicit edge cases -----------------------------------------------------------------

@pytest.mark.parametrize("name", names("matmul"))
@pytest.mark.parametrize("M,N,K", [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0), (1, 1, 1)])
def test_matmul_empty_and_single(backend, usable, name, M, N, K):
    usable(name)
    dtype = tm._registry.specs()[name].dtypes[0]
    A, B = np.full((M, K), 2, dtype), np.full((K, N), 3, dtype)
    C = tm.matmul(A, B, kernel=name, backend=backend).out
    assert C.shape == (M, N) and C.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(C, A @ B)


@pytest.mark.parametrize("name", names("reduce"))
@pytest.mark.parametrize("shape", [(0,), (0, 5), (1,), ()])
def test_reduce_empty_and_single(backend, usable, name, shape):
    usable(name)
    x = np.full(shape, 2.5, np.float64 if "float64" in tm._registry.specs()[name].dtypes
                else np.float32)
    total = tm.reduce(x, kernel=name, backend=backend).out
    assert float(total) == float(x.sum())


def test_assert_sum_close_big_endian_float32():
    # A big-endian float32 array is float32 precision: held to float32's tolerance.
    x = np.array([0.1, 0.2, 0.7], ">f4")
    total = np.float32(0.1) + np.float32(0.2) + np.float32(0.7)  # a correct float32 sum
    assert_sum_close(total, x.astype("<f4"))  # passes
    assert_sum_close(total, x)  # the same values, big-endian
