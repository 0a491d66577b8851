"""A DeviceArray's shape, dtype, strides, address and backend describe memory allocated once:
they are read-only, so that no assignment can make a call read or write past the allocation
(issue 18: `d.shape = (3000, 3000); tm.matmul(d, d)` crashed, and `d.get()` after
`d.shape = (64, 64)` returned heap memory)."""
import numpy as np
import pytest

import tiledmm as tm

BACKEND = "emu"


@pytest.fixture
def d():
    return tm.to_device(np.arange(12, dtype=np.float32).reshape(3, 4), backend=BACKEND)


@pytest.mark.parametrize("name, value", [
    ("shape", (3000, 3000)), ("shape", (64, 64)), ("shape", (4, 3)),
    ("dtype", np.dtype(np.float64)), ("strides", (4, 4)), ("address", 0), ("backend", "cuda"),
])
def test_assignment_raises_and_changes_nothing(d, name, value):
    before = getattr(d, name)
    with pytest.raises(AttributeError):
        setattr(d, name, value)
    assert getattr(d, name) == before
    with pytest.raises(AttributeError):
        delattr(d, name)
    assert getattr(d, name) == before


def test_attributes_after_refused_assignment_still_describe_the_memory(d):
    for name, value in (("shape", (3000, 3000)), ("dtype", np.float64), ("strides", (0, 0))):
        with pytest.raises(AttributeError):
            setattr(d, name, value)
    np.testing.assert_array_equal(d.get(), np.arange(12, dtype=np.float32).reshape(3, 4))
    B = tm.to_device(np.ones((4, 2), np.float32), backend=BACKEND)
    np.testing.assert_array_equal(tm.matmul(d, B, backend=BACKEND).out.get(),
                                  np.arange(12, dtype=np.float32).reshape(3, 4) @ np.ones((4, 2)))


def test_strides_are_c_contiguous(d):
    assert d.strides == (16, 4)
    assert d.strides == np.empty(d.shape, d.dtype).strides
    d64 = tm.to_device(np.zeros((2, 3, 5)), backend=BACKEND)
    assert d64.strides == (120, 40, 8) and d64.dtype == np.float64
    assert tm.to_device(np.zeros(7, np.float32), backend=BACKEND).strides == (4,)


def test_reshape_is_the_way_to_another_shape(d):
    v = d.reshape(4, 3)
    assert v.shape == (4, 3) and v.strides == (12, 4) and v.dtype == d.dtype
    assert v.address == d.address and v.backend == d.backend
    np.testing.assert_array_equal(v.get(), np.arange(12, dtype=np.float32).reshape(4, 3))
    assert d.reshape((2, 6)).shape == (2, 6) and d.reshape([6, 2]).shape == (6, 2)
    assert d.reshape(-1).shape == (12,) and d.reshape(2, -1).shape == (2, 6)
    with pytest.raises(AttributeError):
        v.shape = (12,)
    assert d.shape == (3, 4)  # a view's shape is its own
    # The view computes like the original.
    B = tm.to_device(np.eye(3, dtype=np.float32), backend=BACKEND)
    np.testing.assert_array_equal(tm.matmul(v, B, backend=BACKEND).out.get(), v.get())


@pytest.mark.parametrize("shape", [(5, 5), (64, 64), (-2, -6), (-1, -1), (0, 12), (-1, 5)])
def test_reshape_refuses_shapes_of_other_sizes(d, shape):
    with pytest.raises(ValueError):
        d.reshape(shape)
    assert d.shape == (3, 4)


def test_reshape_refuses_non_integers(d):
    with pytest.raises(TypeError):
        d.reshape(3.0, 4)


def test_result_arrays_are_read_only_too():
    A = np.ones((5, 6), np.float32)
    out = tm.matmul(tm.to_device(A, backend=BACKEND), tm.to_device(A.T.copy(), backend=BACKEND),
                    backend=BACKEND).out
    assert isinstance(out, tm.DeviceArray) and out.shape == (5, 5)
    with pytest.raises(AttributeError):
        out.shape = (3000, 3000)
    np.testing.assert_array_equal(out.get(), np.full((5, 5), 6, np.float32))
