"""tm.sweep: kernels x sizes x parameters -> rows."""
import sys

import numpy as np
import pytest

import tiledmm as tm


def test_dataframe_shape_and_columns():
    pd = pytest.importorskip("pandas")
    df = tm.sweep(["naive", "tiled"], [32, (40, 24, 16)], tile=[8, 16], backend="emu",
                  check=True, progress=False)
    assert isinstance(df, pd.DataFrame)
    # per size: naive once (no tile), tiled twice
    assert len(df) == 2 * 3
    assert list(df["kernel"]) == ["naive", "tiled", "tiled"] * 2
    for col in ("kernel", "params", "tile", "M", "N", "K", "ms", "gflops", "tflops",
                "model_bytes", "intensity", "grid", "block_dim", "threads_per_block",
                "shared_bytes", "blocks_per_sm", "occupancy", "launches", "max_rel_error",
                "backend"):
        assert col in df.columns, col
    assert (df["max_rel_error"] < 1e-5).all()
    rect = df[(df["M"] == 40) & (df["kernel"] == "tiled")]
    assert list(rect["N"]) == [24, 24] and list(rect["K"]) == [16, 16]
    assert set(df["backend"]) == {"emu"}
    assert (df["model_bytes"] > 0).all()


def test_list_of_dicts_without_pandas(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)   # import pandas -> ImportError
    rows = tm.sweep("tiled", 32, tile="all", backend="emu", progress=False)
    assert isinstance(rows, list) and len(rows) == 3
    assert [r["tile"] for r in rows] == [8, 16, 32]
    assert all(isinstance(r, dict) and r["M"] == r["N"] == r["K"] == 32 for r in rows)
    with pytest.raises(ImportError):
        tm.sweep("tiled", 32, backend="emu", as_frame=True)


def test_as_frame_false_and_params_dict():
    rows = tm.sweep("tiled", [16, 32], params={"tile": [8, 32, 64]}, backend="emu",
                    as_frame=False)
    assert [(r["M"], r["tile"]) for r in rows] == [(16, 8), (16, 32), (32, 8), (32, 32)]


def test_reduce_and_elementwise_sweeps():
    kernels = [k.name for k in tm.kernels("reduce") if k.name in ("shuffle", "sequential")]
    if not kernels:
        pytest.skip("no reduce kernels registered")
    rows = tm.sweep(kernels, [1000, 4096], family="reduce", block=[128, 256], backend="emu",
                    as_frame=False, check=True)
    assert len(rows) == len(kernels) * 2 * 2
    assert {r["n"] for r in rows} == {1000, 4096}
    assert all(r["max_rel_error"] < 1e-5 and r["gbps"] > 0 for r in rows)
    rows = tm.sweep(["vec_add", "mat_add"], 16, family="elementwise", backend="emu",
                    as_frame=False)
    assert [r["n"] for r in rows] == [16, 256]


def test_errors_and_unknown_names():
    with pytest.raises(ValueError, match="unknown kernel"):
        tm.sweep("nope", 16, backend="emu")
    with pytest.raises(ValueError, match="no kernel"):
        tm.sweep("naive", 16, tile=[8], backend="emu")
    with pytest.warns(UserWarning, match="not registered"):
        rows = tm.sweep(["naive", "nope"], 16, backend="emu", skip_missing=True, as_frame=False)
    assert [r["kernel"] for r in rows] == ["naive"]
    if "cublas" in {k.name for k in tm.kernels("matmul")}:
        rows = tm.sweep(["naive", "cublas"], 16, backend="emu", errors="record", as_frame=False)
        assert "error" in rows[1] and rows[1]["kernel"] == "cublas"
        rows = tm.sweep(["naive", "cublas"], 16, backend="emu", errors="skip", as_frame=False)
        assert [r["kernel"] for r in rows] == ["naive"]


def test_progress_bar_on_long_sweeps(capsys):
    pytest.importorskip("tqdm")
    tm.sweep("tiled", [8, 16, 24], tile="all", backend="emu", progress=True, as_frame=False)
    assert "tm.sweep" in capsys.readouterr().err


def test_cases_grid():
    cases = tm.sweep.cases(["tiled", "naive"], {"tile": "all"})
    assert [(s.name, p) for s, p in cases] == [("tiled", {"tile": 8}), ("tiled", {"tile": 16}),
                                               ("tiled", {"tile": 32}), ("naive", {})]


def test_integer_parameters_stay_integers_in_the_frame():
    """A parameter only some kernels have (tile: tiled, not naive) is pandas' nullable Int64
    with <NA>, not float64 with NaN; sizes and launch counts are integers too."""
    pytest.importorskip("pandas")
    df = tm.sweep(["naive", "tiled"], [16], tile=[8, 16], backend="emu", progress=False)
    for column in ("tile", "block", "M", "N", "K", "launches", "threads_per_block"):
        assert str(df[column].dtype) == "Int64", (column, df[column].dtype)
    assert list(df["tile"].isna()) == [True, False, False]
    assert df["tile"].dropna().tolist() == [8, 16]
    assert df["ms"].dtype == np.float64
    assert df[df["tile"] == 16]["kernel"].tolist() == ["tiled"]   # NA rows drop out of a filter
