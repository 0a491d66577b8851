"""Bad input of every kind gets a clear exception of the right type, never a crash, and the
next call still works. Extends tests/test_errors.py (matmul's A: ndim, dtypes; the tiled
kernel's tile; repeat/warmup; device out of memory) to every family, to B, to every
registered kernel's parameters, to non-array inputs and to sizes no memory can hold.

Huge sizes are made without allocating: zero-stride views (np.broadcast_to) and outputs larger
than any address space, so the allocation that fails is refused outright by malloc.
"""
import numpy as np
import pytest

import tiledmm as tm
from tiledmm.testing import assert_matmul_close

F32 = np.float32


@pytest.fixture
def works(backend):
    """Call after an error: the module still computes correct results."""
    def check():
        A = np.arange(12, dtype=F32).reshape(3, 4) - 5
        B = np.arange(8, dtype=F32).reshape(4, 2) - 3
        assert_matmul_close(tm.matmul(A, B, kernel="naive", backend=backend).out, A, B)
        assert float(tm.reduce(np.arange(10, dtype=F32), backend=backend).out) == 45.0
        np.testing.assert_array_equal(tm.vec_add(A.ravel(), A.ravel(), backend=backend).out,
                                      2 * A.ravel())
    return check


def call(family, inputs, backend, **kw):
    fn = {"matmul": tm.matmul, "reduce": tm.reduce, "vec_add": tm.vec_add,
          "mat_add": tm.mat_add}[family]
    return fn(*inputs, backend=backend, **kw)


def raises_then_works(works, exc, match, fn, *args, **kw):
    with pytest.raises(exc, match=match or None):
        fn(*args, **kw)
    works()


# ---- shapes ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(), (4,), (4, 1, 1)])
def test_matmul_b_wrong_ndim(backend, works, shape):
    raises_then_works(works, ValueError, "B must be a 2-D matrix", tm.matmul,
                      np.ones((2, 4), F32), np.ones(shape, F32), backend=backend)


@pytest.mark.parametrize("a,b", [((3, 1), (3, 1, 1)), ((1, 5), (4, 1)), ((0, 5), (5,)),
                                 ((3, 0), (1, 3)), ((2, 3), (2, 3))])
def test_matmul_mismatched_or_wrong_ndim(backend, works, a, b):
    raises_then_works(works, ValueError, "2-D matrix|inner dimensions differ", tm.matmul,
                      np.ones(a, F32), np.ones(b, F32), backend=backend)


@pytest.mark.parametrize("fn,a,b", [("vec_add", (5,), (6,)), ("vec_add", (5,), (5, 1)),
                                    ("mat_add", (2, 3), (3, 2)), ("mat_add", (2, 3), (3,)),
                                    ("mat_add", (2, 3), (1, 3))])
def test_elementwise_shapes_differ(backend, works, fn, a, b):
    raises_then_works(works, ValueError, "shapes differ", call, fn,
                      (np.ones(a, F32), np.ones(b, F32)), backend)


# ---- dtypes and non-arrays ---------------------------------------------------------------

BAD_DTYPES = [np.int8, np.uint64, np.float16, np.longdouble, np.complex128, bool, object, "U3",
              "S2", "M8[s]", [("x", "f4")]]


def bad_array(dtype, shape):
    if dtype in ("U3", "S2"):
        return np.full(shape, "ab", dtype)
    return np.zeros(shape, dtype)


@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=str)
@pytest.mark.parametrize("where", ["matmul B", "reduce", "vec_add a", "mat_add b"])
def test_unsupported_dtypes_everywhere(backend, works, dtype, where):
    good = np.ones((3, 3), F32)
    bad = bad_array(dtype, (3, 3))
    family = where.split()[0]
    inputs = {"matmul": (good, bad), "reduce": (bad,), "vec_add": (good.ravel(), bad.ravel()),
              "mat_add": (good, bad)}[family]
    raises_then_works(works, TypeError, "float32 or float64", call, family, inputs, backend)


@pytest.mark.parametrize("value", [None, "abc", "", 3.5, 2, [1.0, "x"], {"a": 1}, {1.0, 2.0},
                                   b"bytes", object()],
                         ids=lambda v: "object()" if type(v) is object else repr(v))  # stable under xdist
@pytest.mark.parametrize("family", ["matmul", "reduce", "vec_add"])
def test_non_array_inputs(backend, works, value, family):
    inputs = {"matmul": (np.ones((2, 2), F32), value), "reduce": (value,),
              "vec_add": (value, np.ones(1, F32))}[family]
    if family == "reduce" and isinstance(value, (float, int)):
        pytest.skip("a Python number is a 0-d array-like; its sum is itself (see below)")
    raises_then_works(works, (TypeError, ValueError), "", call, family, inputs, backend)


@pytest.mark.parametrize("ragged", [[[1.0, 2.0], [3.0]], [1.0, [2.0, 3.0]], [[[1.0]], [2.0]]],
                         ids=repr)
def test_ragged_nested_lists(backend, works, ragged):
    raises_then_works(works, (ValueError, TypeError), "", tm.matmul, ragged, [[1.0]],
                      backend=backend)
    raises_then_works(works, (ValueError, TypeError), "", tm.reduce, ragged, backend=backend)


def test_array_likes_are_accepted(backend):
    """Nested lists of floats and Python floats are float64 array-likes, as in NumPy."""
    C = tm.matmul([[1.0, 2.0], [3.0, 4.0]], [[1.0], [1.0]], backend=backend).out
    np.testing.assert_array_equal(C, [[3.0], [7.0]])
    assert C.dtype == np.float64
    assert float(tm.reduce(2.5, backend=backend).out) == 2.5
    assert float(tm.reduce([[1.5, 2.5], [3.0, 4.0]], backend=backend).out) == 11.0


def test_lists_of_ints_are_type_errors(backend, works):
    raises_then_works(works, TypeError, "float32 or float64", tm.matmul, [[1, 2]], [[1], [2]],
                      backend=backend)


# ---- kernels and parameters --------------------------------------------------------------

FAMILY_CALL = {"matmul": "matmul", "reduce": "reduce", "elementwise": "vec_add"}


def family_inputs(family):
    return {"matmul": (np.ones((3, 4), F32), np.ones((4, 2), F32)),
            "reduce": (np.ones(7, F32),),
            "elementwise": (np.ones(5, F32), np.ones(5, F32))}[family]


@pytest.mark.parametrize("family", ["matmul", "reduce", "elementwise"])
@pytest.mark.parametrize("kernel", ["", "TILED", "no_such_kernel", None, 3, "tiled\x00x"],
                         ids=repr)
def test_unknown_kernel(backend, works, family, kernel):
    raises_then_works(works, ValueError, "unknown", call, FAMILY_CALL[family],
                      family_inputs(family), backend, kernel=kernel)


@pytest.mark.parametrize("family,kernel", [("reduce", "tiled"), ("matmul", "shuffle"),
                                           ("elementwise", "naive"), ("matmul", "vec_add")])
def test_kernel_of_another_family(backend, works, family, kernel):
    if kernel not in tm._registry.specs():
        pytest.skip(f"{kernel} is not registered")
    raises_then_works(works, ValueError, f"unknown {family} kernel '{kernel}'.*choose one of",
                      call, FAMILY_CALL[family], family_inputs(family), backend, kernel=kernel)


def bad_values(param):
    """Values outside a parameter's allowed set: in between, beyond, zero, negative, huge,
    and not integers at all."""
    allowed = set(param.values)
    ints = {0, -1, -param.values[0], max(allowed) + 1, max(allowed) * 2, min(allowed) - 1,
            min(allowed) + 1, 2**31, 2**31 - 1, -2**31, 2**63, 2**64 + min(allowed)}
    return sorted(ints - allowed) + [float(min(allowed)), str(min(allowed)), None, True,
                                      [min(allowed)], np.float32(min(allowed))]


PARAM_CASES = [(spec.name, spec.family, p.name, v) for spec in tm.kernels() for p in spec.params
               for v in bad_values(p)]


@pytest.mark.parametrize("kernel,family,param,value", PARAM_CASES,
                         ids=[f"{k}-{p}={v!r}" for k, _, p, v in PARAM_CASES])
def test_parameter_outside_allowed_values(backend, works, kernel, family, param, value):
    raises_then_works(works, ValueError, f"{param}=.* is not allowed for kernel '{kernel}'",
                      call, FAMILY_CALL[family], family_inputs(family), backend,
                      kernel=kernel, **{param: value})


@pytest.mark.parametrize("spec", tm.kernels(), ids=lambda s: s.name)
def test_unknown_parameter_names_the_known_ones(backend, works, spec):
    known = ", ".join(sorted(p.name for p in spec.params)) or "none"
    raises_then_works(works, ValueError, f"no parameter 'blocksize' \\(its parameters: {known}\\)",
                      call, FAMILY_CALL[spec.family], family_inputs(spec.family), backend,
                      kernel=spec.name, blocksize=16)


@pytest.mark.parametrize("spec", [s for s in tm.kernels() if len(s.dtypes) == 1],
                         ids=lambda s: s.name)
def test_kernel_without_the_dtype(backend, works, spec):
    other = {"float32": np.float64, "float64": np.float32}[spec.dtypes[0]]
    inputs = tuple(x.astype(other) for x in family_inputs(spec.family))
    raises_then_works(works, TypeError, f"kernel '{spec.name}' does not support", call,
                      FAMILY_CALL[spec.family], inputs, backend, kernel=spec.name)


@pytest.mark.parametrize("kw", [{"repeat": True}, {"warmup": False}, {"repeat": "3"},
                                {"repeat": None, "warmup": -5}, {"warmup": 0.0},
                                {"repeat": np.float64(2)}, {"repeat": -2**40}])
def test_more_bad_repeat_and_warmup(backend, works, kw):
    raises_then_works(works, ValueError, "warmup|repeat", tm.reduce, np.ones(4, F32),
                      backend=backend, **kw)


@pytest.mark.parametrize("kw", [{"repeat": 2**31}, {"warmup": 2**40}])
def test_repeat_beyond_c_int(backend, works, kw):
    """Counts above INT_MAX cannot be run; they must be refused, not wrapped around."""
    raises_then_works(works, (ValueError, OverflowError), "", tm.reduce, np.ones(4, F32),
                      backend=backend, **kw)


def test_numpy_integer_counts_are_accepted(backend):
    res = tm.reduce(np.ones(4, F32), backend=backend, warmup=np.int8(0), repeat=np.uint16(2))
    assert len(res.timing.samples_ms) == 2


# ---- the glue called directly (what a wrong caller or a future wrapper could pass) -------

ONE = (np.ones((1, 1), F32),)
HOST = (None, None)  # device pointers: both inputs are host arrays


@pytest.mark.parametrize("args,exc", [
    # run(kernel, inputs, device_ptrs, params, warmup, repeat, out_on_device)
    (("naive", [np.ones((1, 1), F32)] * 2, HOST, (16,), 0, 1, False), TypeError),  # list
    (("naive", ONE, (None,), (16,), 0, 1, False), TypeError),              # one input
    (("naive", ONE * 3, (None,) * 3, (16,), 0, 1, False), TypeError),       # three inputs
    (("naive", ONE * 2, (None,), (16,), 0, 1, False), TypeError),           # pointers != inputs
    (("naive", ONE * 2, HOST, (), 0, 1, False), ValueError),                 # no params
    (("naive", ONE * 2, HOST, (16, 16), 0, 1, False), ValueError),           # extra param
    (("naive", ONE * 2, HOST, (12,), 0, 1, False), ValueError),              # not allowed
    (("naive", ONE * 2, HOST, (2**70,), 0, 1, False), OverflowError),
    (("naive", ONE * 2, HOST, ("16",), 0, 1, False), TypeError),
    (("naive", ONE * 2, ("x", None), (16,), 0, 1, False), TypeError),       # pointer not int
    (("naive", ONE * 2, HOST, (16,), -1, 1, False), ValueError),
    (("naive", ONE * 2, HOST, (16,), 0, 0, False), ValueError),
    (("nope", ONE * 2, HOST, (16,), 0, 1, False), ValueError),
    ((b"naive", ONE * 2, HOST, (16,), 0, 1, False), TypeError),
    (("naive", ONE * 2, HOST, (16,)), TypeError),                            # too few args
])
def test_glue_run_refuses_bad_arguments(backend, works, args, exc):
    from tiledmm import _backend
    mod = _backend.module(backend)
    raises_then_works(works, exc, "", mod.run, *args)


# ---- sizes no memory can hold ------------------------------------------------------------

HUGE = 1 << 45  # elements: 128 TiB of float32, beyond any x86-64 or aarch64 address space


def test_huge_output_is_memory_error(backend, works):
    """Small inputs whose product is larger than any memory: the output cannot be allocated."""
    A = np.broadcast_to(np.ones((1, 1), F32), (1 << 23, 1))   # zero strides: 4 bytes held
    B = np.broadcast_to(np.ones((1, 1), F32), (1, 1 << 22))
    raises_then_works(works, (MemoryError, ValueError), "", tm.matmul, A, B, backend=backend)


@pytest.mark.parametrize("family", ["matmul", "reduce", "vec_add"])
def test_huge_inputs_are_memory_errors(backend, works, family):
    """Zero-stride views of 2**45 elements: the contiguous copy the kernels need cannot be
    made."""
    big = np.broadcast_to(np.ones(1, F32), (HUGE,))
    inputs = {"matmul": (np.broadcast_to(np.ones((1, 1), F32), (1, HUGE)),
                         np.broadcast_to(np.ones((1, 1), F32), (HUGE, 1))),
              "reduce": (big,), "vec_add": (big, big)}[family]
    raises_then_works(works, MemoryError, "", call, family, inputs, backend)


def test_sizes_beyond_npy_intp(backend, works):
    """An output with more elements than an array can index: NumPy's ValueError, no crash."""
    A = np.broadcast_to(np.ones((1, 1), F32), (1 << 40, 1))
    B = np.broadcast_to(np.ones((1, 1), F32), (1, 1 << 40))
    raises_then_works(works, (ValueError, MemoryError), "", tm.matmul, A, B, backend=backend)


@pytest.mark.device_memory
def test_memory_errors_leave_no_device_memory(backend, works):
    free = tm.mem_info(backend=backend)[0]
    for _ in range(20):
        with pytest.raises((MemoryError, ValueError)):
            tm.matmul(np.broadcast_to(np.ones((1, 1), F32), (1 << 23, 1)),
                      np.broadcast_to(np.ones((1, 1), F32), (1, 1 << 22)), backend=backend)
    works()
    assert tm.mem_info(backend=backend)[0] >= free - (0 if backend == "emu" else 2 << 20)
