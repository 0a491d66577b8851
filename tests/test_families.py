"""tiledmm/_families.py: one table of (inputs, call) per kernel family, the one place that
knows mat_add takes 2-D matrices (issue 33 §1). Every registered kernel has a row; each row
builds the inputs its call takes and the call computes what NumPy does."""
import numpy as np
import pytest

import tiledmm as tm
from tiledmm import _families

from conftest import random_matrix


def test_every_registered_kernel_has_a_row():
    rows = {k.name: _families.family_of(k).name for k in tm.kernels()}
    assert rows and set(rows.values()) <= set(_families.FAMILIES)
    for k in tm.kernels():
        expected = k.name if k.name == "mat_add" else \
            {"elementwise": "vec_add"}.get(k.family, k.family)
        assert rows[k.name] == expected
    assert _families.family_of("mat_add") is _families.FAMILIES["mat_add"]   # by name too


def test_unknown_kernel_names_the_choices():
    with pytest.raises(ValueError, match="unknown kernel 'tilde'.*tiled"):
        _families.family_of("tilde")


@pytest.mark.parametrize("row, size, shapes", [
    ("matmul", 5, [(5, 5), (5, 5)]), ("matmul", (3, 4, 7), [(3, 7), (7, 4)]),
    ("reduce", 9, [(9,)]), ("reduce", (2, 3), [(2, 3)]),
    ("vec_add", 9, [(9,), (9,)]), ("mat_add", 9, [(9, 9), (9, 9)]),
    ("mat_add", (2, 5), [(2, 5), (2, 5)])])
def test_input_shapes(row, size, shapes):
    made = _families.FAMILIES[row].inputs(size, lambda shape: np.zeros(shape))
    assert [a.shape for a in made] == shapes


def test_elements_size():
    F = _families.FAMILIES
    assert [F[r].elements_size(1 << 20) for r in ("reduce", "vec_add", "mat_add")] == \
        [1 << 20, 1 << 20, 1 << 10]
    assert F["matmul"].elements_size(64) == 64   # matmul's size stays the edge
    assert F["mat_add"].elements_size(1000) == 32   # about 1000 elements: a 32 x 32 matrix


@pytest.mark.parametrize("kernel, size, params", [
    ("tiled", (19, 23, 29), {"tile": 8}), ("shuffle", 3001, {}), ("vec_add", 777, {}),
    ("mat_add", 21, {})])
def test_each_row_calls_its_kernel_on_the_inputs_it_builds(backend, rng, kernel, size, params):
    row = _families.family_of(kernel)
    inputs = row.inputs(size, lambda shape: random_matrix(rng, shape))
    res = row.call(*inputs, kernel=kernel, backend=backend, **params)
    assert res.kernel == kernel
    wide = [np.asarray(x, np.float64) for x in inputs]
    expected = {"matmul": lambda: wide[0] @ wide[1], "reduce": lambda: wide[0].sum(),
                "vec_add": lambda: wide[0] + wide[1], "mat_add": lambda: wide[0] + wide[1]}
    k = size[2] if row.name == "matmul" else (size if row.name == "reduce" else 1)
    np.testing.assert_allclose(np.asarray(res.out, np.float64), expected[row.name](),
                               rtol=1e-6 * k, atol=1e-6 * k)


def test_occupancy_and_lesson_table_run_elementwise_kernels_through_the_table():
    """mat_add launches 2-D blocks on a 256 x 256 matrix, vec_add 1-D ones on 65,536 elements
    (occupancy's default problem), as before the table."""
    mat = tm.occupancy._launch_facts("mat_add", {}, None, np.float32, "emu")
    vec = tm.occupancy._launch_facts("vec_add", {}, None, np.float32, "emu")
    assert mat.out.shape == (256, 256) and mat.launch.block[1] > 1
    assert vec.out.shape == (256 * 256,) and vec.launch.block[1] == 1
    rows = tm.profile.lesson_table("elementwise", [("vec_add", {}), ("mat_add", {})],
                                   size=1 << 12, measure_size=1 << 10, backend="emu")
    assert [r["kernel"] for r in rows] == ["vec_add", "mat_add"]
    assert all(r["measured_ms"] > 0 for r in rows)
