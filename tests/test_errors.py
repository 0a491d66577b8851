"""Bad input gets a clear exception of the right type, and the next call still works."""
import numpy as np
import pytest

import tiledmm as tm
from conftest import random_matrix


@pytest.fixture
def AB(rng):
    return random_matrix(rng, (4, 3)), random_matrix(rng, (3, 5))


def test_mismatched_inner_dimensions(backend, rng):
    with pytest.raises(ValueError, match="inner dimensions differ: A is 4 x 3 and B is 4 x 5"):
        tm.matmul(random_matrix(rng, (4, 3)), random_matrix(rng, (4, 5)), backend=backend)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3, 4)])
def test_wrong_ndim(backend, AB, shape):
    with pytest.raises(ValueError, match="must be a 2-D matrix"):
        tm.matmul(np.ones(shape, np.float32), AB[1], backend=backend)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16, np.complex64, bool, object, "U3"])
def test_unsupported_dtypes_are_type_errors(backend, AB, dtype):
    A = np.ones((4, 3), dtype=dtype) if dtype != "U3" else np.full((4, 3), "abc")
    with pytest.raises(TypeError, match="float32 or float64"):
        tm.matmul(A, AB[1], backend=backend)


def test_unknown_kernel_lists_choices(backend, AB):
    with pytest.raises(ValueError, match="unknown matmul kernel 'tiles'.*naive.*tiled"):
        tm.matmul(*AB, kernel="tiles", backend=backend)


@pytest.mark.parametrize("params,match", [
    ({"tile": 12}, "tile=12 is not allowed.*8, 16, 32"),
    ({"tile": "16"}, "tile='16' is not allowed"),
    ({"tile": True}, "tile=True is not allowed"),
    ({"tile": -8}, "tile=-8 is not allowed"),
    ({"coarsen": 2}, "no parameter 'coarsen'"),
])
def test_bad_parameters(backend, AB, params, match):
    with pytest.raises(ValueError, match=match):
        tm.matmul(*AB, kernel="tiled", backend=backend, **params)


def test_numpy_integer_parameters_are_accepted(backend, AB):
    res = tm.matmul(*AB, kernel="tiled", tile=np.int64(8), backend=backend)
    assert res.params == {"tile": 8}


@pytest.mark.parametrize("kw", [{"repeat": 0}, {"repeat": -1}, {"warmup": -1}, {"repeat": 1.5}])
def test_bad_repeat_and_warmup(backend, AB, kw):
    with pytest.raises(ValueError, match="warmup|repeat"):
        tm.matmul(*AB, backend=backend, **kw)


def test_unknown_backend(AB):
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        tm.matmul(*AB, backend="gpu")


def test_non_array_input(backend, AB):
    with pytest.raises((TypeError, ValueError)):
        tm.matmul(object(), AB[1], backend=backend)


@pytest.mark.device_memory
def test_device_out_of_memory_is_memory_error_and_next_call_works(backend, rng):
    free, total = tm.mem_info(backend=backend)
    # Small inputs, an output larger than the whole device: the host output array is never
    # touched (the OS gives its pages lazily), the device allocation must fail cleanly.
    n = int((total // 4) ** 0.5) + 64
    A, B = np.full((n, 1), 1.5, np.float32), np.full((1, n), 0.5, np.float32)
    with pytest.raises(MemoryError, match="out of memory"):
        tm.matmul(A, B, kernel="naive", backend=backend)
    assert tm.mem_info(backend=backend)[0] >= free * 0.99  # nothing left allocated
    A, B = random_matrix(rng, (16, 8)), random_matrix(rng, (8, 4))
    np.testing.assert_allclose(tm.matmul(A, B, backend=backend).out, A @ B, rtol=1e-5, atol=1e-6)


def test_cuda_backend_without_device_names_the_way_out(AB):
    from tiledmm import _backend
    if _backend.cuda_device_count() > 0:
        pytest.skip("a device is present")
    with pytest.raises(RuntimeError, match="backend='emu'"):
        tm.matmul(*AB, backend="cuda")
