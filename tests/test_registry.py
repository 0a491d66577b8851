"""The kernel registry as users see it."""
import html

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


def test_kernels_show_as_a_compact_table():
    """At the REPL, tm.kernels() is one aligned line per kernel, not a wall of reprs; in
    Jupyter an HTML table with the summaries and lectures."""
    rows = tm.kernels()
    lines = repr(rows).splitlines()
    assert lines[0].split()[:3] == ["kernel", "family", "dtypes"]
    assert len(lines) == len(rows) + 2 and "KernelSpec(" not in repr(rows)
    family_column = lines[0].index("family")
    for line, spec in zip(lines[1:], rows):
        assert line.split()[0] == spec.name and line[family_column:].startswith(spec.family)
    tiled = lines[1 + [k.name for k in rows].index("tiled")]
    assert "tile=16 (8/16/32)" in tiled
    page = rows._repr_html_()
    assert page.startswith("<table>") and page.count("<tr>") == len(rows) + 1
    assert all(html.escape(k.summary) in page and html.escape(k.lecture) in page for k in rows)
    assert isinstance(rows, list) and repr(tm.kernels("matmul")).count("\n") == \
        len(tm.kernels("matmul")) + 1


def test_near_misses_get_a_suggestion():
    import numpy as np
    A = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match=r"unknown matmul kernel 'tild' \(did you mean 'tiled'\?\); "
                                         r"choose one of: .*tiled"):
        tm.matmul(A, A, kernel="tild", backend="emu")
    with pytest.raises(ValueError, match=r"no parameter 'tiles' \(its parameters: tile\); "
                                         r"did you mean 'tile'\?"):
        tm.matmul(A, A, kernel="tiled", tiles=8, backend="emu")
    with pytest.raises(ValueError, match=r"'shuffle' is a reduce kernel"):
        tm.matmul(A, A, kernel="shuffle", backend="emu")
    with pytest.raises(ValueError, match=r"did you mean 'matmul'\?"):
        tm.kernels("matmull")
    with pytest.raises(ValueError) as info:   # nothing near: no suggestion
        tm.matmul(A, A, kernel="zzzz", backend="emu")
    assert "did you mean" not in str(info.value)
