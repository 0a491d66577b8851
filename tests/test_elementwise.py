"""vec_add and mat_add against NumPy."""
import numpy as np
import pytest

import tiledmm as tm
from conftest import random_matrix


@pytest.mark.parametrize("block", [128, 256, 512, 1024])
@pytest.mark.parametrize("n", [1, 3, 255, 256, 257, 10007])
def test_vec_add(backend, rng, n, block):
    a, b = random_matrix(rng, n), random_matrix(rng, n)
    res = tm.vec_add(a, b, block=block, backend=backend)
    np.testing.assert_array_equal(res.out, a + b)  # one rounding, same as NumPy's
    assert res.launch.block == (block, 1, 1) and res.launch.grid[0] == -(-n // block)


@pytest.mark.parametrize("block", [8, 16, 32])
@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (64, 3), (3, 100)])
def test_mat_add(backend, rng, shape, block):
    a, b = random_matrix(rng, shape, np.float64), random_matrix(rng, shape, np.float64)
    res = tm.mat_add(np.asfortranarray(a), b, block=block, backend=backend)
    np.testing.assert_array_equal(res.out, a + b)
    assert res.gbps > 0 and "GB/s" in repr(res)


def test_shapes_must_match(backend):
    with pytest.raises(ValueError, match="shapes differ"):
        tm.vec_add(np.ones(3, np.float32), np.ones(4, np.float32), backend=backend)


def test_empty(backend):
    res = tm.vec_add(np.ones(0, np.float32), np.ones(0, np.float32), backend=backend)
    assert res.out.shape == (0,)
