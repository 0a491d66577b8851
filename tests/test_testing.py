"""tiledmm.testing's assertions must catch what they exist to catch."""
import numpy as np
import pytest

from tiledmm.testing import assert_matmul_close, assert_sum_close
from conftest import random_matrix


def test_matmul_assertion_passes_float32_rounding(rng):
    A, B = random_matrix(rng, (30, 500)), random_matrix(rng, (500, 20))
    assert_matmul_close((A @ B).astype(np.float32), A, B)


@pytest.mark.parametrize("corrupt", [
    lambda C: C.__setitem__((3, 4), C[3, 4] + 0.01),    # one wrong element
    lambda C: C.__setitem__((0, slice(None)), 0.0),      # an unwritten row
    lambda C: C.__setitem__(slice(None), C[:, ::-1]),    # wrong column indexing
    lambda C: C.__setitem__((1, 1), np.nan),             # a NaN that NumPy does not produce
])
def test_matmul_assertion_catches_errors(rng, corrupt):
    A, B = random_matrix(rng, (8, 64)), random_matrix(rng, (64, 9))
    C = (A.astype(np.float64) @ B).astype(np.float32)
    corrupt(C)
    with pytest.raises(AssertionError):
        assert_matmul_close(C, A, B)


def test_matmul_tolerance_grows_with_K(rng):
    from tiledmm.testing import matmul_tolerance
    A, B = np.full((1, 10), 1.0), np.full((10, 1), 1.0)
    A2, B2 = np.full((1, 1000), 1.0), np.full((1000, 1), 1.0)
    assert matmul_tolerance(A2, B2, np.float32)[0, 0] > 10 * matmul_tolerance(A, B, np.float32)[0, 0]


def test_sum_assertion(rng):
    x = random_matrix(rng, 1000)
    assert_sum_close(np.float32(x.astype(np.float64).sum()), x)
    with pytest.raises(AssertionError):  # tolerance here: 2 * 1002 * eps32 * sum|x| ~ 0.12
        assert_sum_close(x.astype(np.float64).sum() + 1.0, x)
    with pytest.raises(AssertionError):
        assert_sum_close(np.nan, x)


def test_a_kernel_whose_inf_times_inf_is_nan_is_held_to_exactly_that(rng):
    """tf32x3 (INF_TIMES_INF_IS_NAN): NaN where a product of two infinities meets, IEEE's
    results everywhere else; any other kernel gets NumPy's infinity there."""
    A = random_matrix(rng, (3, 4))
    B = random_matrix(rng, (4, 2))
    A[1, 2], B[2, 0] = np.inf, -np.inf   # C[1, 0] meets inf x -inf
    A[2, 3] = np.inf                      # C[2, :] is +-inf, by finite B[3, :]
    with np.errstate(invalid="ignore"):   # NumPy warns where its products meet infinities
        C = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    assert np.isneginf(C[1, 0])
    assert_matmul_close(C, A, B)
    with pytest.raises(AssertionError, match="NaN positions"):
        assert_matmul_close(C, A, B, kernel="tf32x3")
    C_tf32x3 = C.copy()
    C_tf32x3[1, 0] = np.nan
    assert_matmul_close(C_tf32x3, A, B, kernel="tf32x3")
    with pytest.raises(AssertionError, match="NaN positions"):
        assert_matmul_close(C_tf32x3, A, B)
