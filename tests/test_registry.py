"""The kernel registry as users see it."""
import pytest

import tiledmm as tm


def test_every_kernel_is_described():
    rows = tm.kernels()
    assert len({k.name for k in rows}) == len(rows)
    for k in rows:
        assert k.family in ("matmul", "reduce", "elementwise")
        assert set(k.dtypes) <= {"float32", "float64"} and k.dtypes
        assert k.lecture and k.summary
        for p in k.params:
            assert p.default in p.values and p.doc
        assert k.name in str(k)


def test_issue_kernels_are_registered():
    names = {k.name for k in tm.kernels("matmul")}
    assert {"naive", "naive_uncoalesced", "tiled"} <= names
    tiled = {k.name: k for k in tm.kernels("matmul")}["tiled"]
    assert tiled.params[0].name == "tile" and tiled.params[0].values == (8, 16, 32)


def test_family_filter():
    assert all(k.family == "elementwise" for k in tm.kernels("elementwise"))
    with pytest.raises(ValueError, match="unknown family"):
        tm.kernels("sort")
