"""tm.plot with the Agg backend: each function returns Axes with the expected artists."""
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import tiledmm as tm  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def tiled_rows():
    return tm.sweep("tiled", [16, 32], tile="all", backend="emu", as_frame=False)


def test_tile_sizes_one_line_per_size(tiled_rows):
    ax = tm.plot.tile_sizes(tiled_rows)
    assert len(ax.lines) == 2                       # sizes 16 and 32
    assert all(len(line.get_xdata()) == 3 for line in ax.lines)   # tiles 8, 16, 32
    assert "emulator" in ax.get_ylabel()
    pd = pytest.importorskip("pandas")
    ax2 = tm.plot.tile_sizes(pd.DataFrame(tiled_rows), y="gflops")
    assert len(ax2.lines) == 2


def test_ladder_one_bar_per_variant_and_percent_of_reference():
    rows = tm.sweep(["naive", "tiled"], [16, 32], tile=[16, 32], backend="emu", as_frame=False)
    ax = tm.plot.ladder(rows)
    assert len(ax.patches) == 3                     # at the largest size: naive, tiled x 2
    # a stand-in reference row, as cublas would give on the GPU
    ref = dict(rows[-1], kernel="cublas", params="", tflops=rows[-1]["tflops"] * 2)
    ax = tm.plot.ladder(rows + [ref])
    assert len(ax.patches) == 4
    assert len(ax.texts) == 4 and ax.texts[-1].get_text() == "100%"


def test_roofline_roof_and_points(tiled_rows):
    ax = tm.plot.roofline(tiled_rows, peak_gflops=100.0, bandwidth_gbs=10.0,
                          extra_roofs=[("lecture 150 GB/s", 150.0)])
    assert len(ax.lines) == 2                       # the roof and the extra roof
    assert len(ax.collections) == 3                 # one scatter per tile
    assert sum(len(c.get_offsets()) for c in ax.collections) == len(tiled_rows)
    ax = tm.plot.roofline(tiled_rows, device="GM204")
    assert len(ax.lines) == 1


def test_roofline_from_results():
    import numpy as np
    A = np.ones((16, 16), np.float32)
    res = [tm.matmul(A, A, kernel="naive", backend="emu"),
           tm.matmul(A, A, kernel="tiled", tile=8, backend="emu")]
    ax = tm.plot.roofline(res, bandwidth_gbs=5.0)
    assert len(ax.collections) == 2


def test_reductions_bars():
    kernels = [k.name for k in tm.kernels("reduce")][:3]
    if not kernels:
        pytest.skip("no reduce kernels registered")
    rows = tm.sweep(kernels, [1000, 3000], family="reduce", backend="emu", as_frame=False)
    ax = tm.plot.reductions(rows, copy_gbps=1.0)
    assert len(ax.patches) == len(kernels) * 2
    assert len(ax.lines) == 1                       # the copy line
    assert ax.figure is not None


def test_measured_vs_predicted_and_given_axes():
    import numpy as np
    A = np.ones((16, 16), np.float32)
    res = [tm.matmul(A, A, kernel="tiled", tile=t, backend="emu") for t in (8, 16)]
    fig, ax = plt.subplots()
    out = tm.plot.measured_vs_predicted(tm.model.compare_table(res, bandwidth_gbs=1.0), ax=ax)
    assert out is ax and len(ax.patches) == 4


def test_tile_sizes_without_its_kernel_is_a_clear_error():
    rows = tm.sweep("naive", [16], backend="emu", as_frame=False)
    with pytest.raises(ValueError, match=r"no row of kernel 'tiled' with a 'tile' value.*"
                                         r"kernels in the data: naive"):
        tm.plot.tile_sizes(rows)
    with pytest.raises(ValueError, match="kernels in the data: none"):
        tm.plot.tile_sizes([])
    assert not plt.get_fignums()   # refused before a figure was made


def test_flop_rates_are_drawn_in_a_unit_that_suits_the_data(tiled_rows):
    """The emulator's 0.0001 TFLOP/s is drawn as MFLOP/s or GFLOP/s; a GPU's rates as TFLOP/s;
    unit= forces one."""
    ax = tm.plot.tile_sizes(tiled_rows)
    unit = ax.get_ylabel().split()[0]
    assert unit in ("MFLOP/s", "GFLOP/s")
    fastest = max(max(line.get_ydata()) for line in ax.lines)
    assert 1 <= fastest < 1000
    gpu_like = [dict(r, backend="cuda", tflops=r["tflops"] * 1e5, gflops=r["gflops"] * 1e5)
                for r in tiled_rows]
    assert tm.plot.tile_sizes(gpu_like).get_ylabel() == "TFLOP/s"
    ax = tm.plot.tile_sizes(tiled_rows, unit="GFLOP/s")
    assert ax.get_ylabel().startswith("GFLOP/s")
    assert max(max(line.get_ydata()) for line in ax.lines) == \
        pytest.approx(max(r["gflops"] for r in tiled_rows))
    ax = tm.plot.ladder(tiled_rows)
    assert ax.get_ylabel().split()[0] in ("MFLOP/s", "GFLOP/s")
    with pytest.raises(ValueError, match="unit must be one of"):
        tm.plot.tile_sizes(tiled_rows, unit="FLOPS")


def test_roofline_legend_leaves_the_points_uncovered():
    """The legend sits outside the axes, so no measured point is under it (notebook 06)."""
    import numpy as np
    A = np.ones((48, 48), np.float32)
    res = [tm.matmul(A, A, kernel=k, backend="emu", **p)
           for k, p in (("naive", {}), ("tiled", {"tile": 8}), ("tiled", {"tile": 32}),
                        ("regtile", {"dims": 2}))]
    ax = tm.plot.roofline(res, bandwidth_gbs=0.5)
    ax.figure.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    points = [p for c in ax.collections for p in ax.transData.transform(c.get_offsets())]
    assert len(points) == 4
    assert not any(legend.contains(x, y) for x, y in points)
    assert legend.x0 >= ax.get_window_extent().x1   # beside the axes: no point can be under it
    figure = ax.figure.get_window_extent()
    assert figure.x1 >= legend.x1   # and the figure still shows all of it


def test_as_rows_is_public_and_reads_every_input():
    pytest.importorskip("pandas")
    import numpy as np
    assert "as_rows" in tm.plot.__all__
    A = np.ones((8, 4), np.float32)
    res = tm.matmul(A, A.T, kernel="tiled", tile=8, backend="emu")
    (row,) = tm.plot.as_rows([res])
    assert (row["kernel"], row["tile"], row["M"], row["N"], row["K"]) == ("tiled", 8, 8, 8, 4)
    df = tm.sweep(["naive", "tiled"], [16], tile=[8], backend="emu", progress=False)
    rows = tm.plot.as_rows(df)
    assert rows[0]["tile"] is None and rows[1]["tile"] == 8   # Int64's <NA> comes back as None
    assert tm.plot.as_rows(rows) == rows
