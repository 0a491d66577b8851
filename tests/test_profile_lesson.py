"""tm.profile.lesson_table and tm.plot.lesson: what notebooks 02-07 show on every machine, the
counted traffic and the H100 time predicted from it beside the measured time."""
import matplotlib
import numpy as np
import pytest

import tiledmm as tm
from tiledmm.profiling.time_model import default_device

matplotlib.use("Agg")
pytestmark = pytest.mark.skipif(not tm.profile.available(),
                                reason="tiledmm._emu_profile not built (TILEDMM_NO_PROFILE=1?)")


@pytest.fixture(scope="module")
def rows():
    return tm.profile.lesson_table("matmul", [("naive", {"block": 16}), ("tiled", {"tile": 16})],
                                   size=256, measure_size=48, backend="emu")


def test_rows_hold_counts_prediction_and_cpu_time(rows):
    naive, tiled = rows
    # The ncu figures at 256^3 (equal to ncu on the H100).
    assert (naive["global_load_requests"], naive["load_sectors_per_request"]) == (1048576, 2.0)
    assert (tiled["global_load_requests"], tiled["load_sectors_per_request"]) == (65536, 4.0)
    assert naive["l1_l2_bytes"] == 32 * (1048576 * 2 + 256 * 256 / 32 * 4)
    assert naive["predicted_ms"] > tiled["predicted_ms"] > 0
    # no device given: the running GPU's preset, else the H100 (as predict() picks)
    assert naive["device"] == default_device()[0]
    assert naive["counted_at"] == "256³" and naive["measured_on"] == "CPU time (emulator) at 48³"
    assert naive["measured_ms"] > 0 and naive["params"] == "block=16"


def test_plot_on_the_emulator_keeps_cpu_time_on_its_own_axis(rows):
    ax = tm.plot.lesson(rows)
    assert [p.get_height() for p in ax.patches] == [r["predicted_ms"] for r in rows]
    assert f"predicted for {default_device()[0]} from counted traffic" in ax.get_title()
    twin = [a for a in ax.figure.axes if a is not ax]
    assert len(twin) == 1 and list(twin[0].lines[0].get_ydata()) == [r["measured_ms"] for r in rows]
    assert "not the lesson" in twin[0].get_legend().get_texts()[0].get_text()


def test_plot_on_a_gpu_puts_measured_beside_predicted(rows):
    gpu = [dict(r, measured_ms=r["predicted_ms"] * 1.5, measured_on="NVIDIA H100 at 1024³")
           for r in rows]
    ax = tm.plot.lesson(gpu)
    heights = [p.get_height() for p in ax.patches]
    assert heights == [r["predicted_ms"] for r in gpu] + [r["measured_ms"] for r in gpu]
    assert len(ax.figure.axes) == 1


@pytest.fixture(scope="module")
def profiled():
    A = np.random.default_rng(1).standard_normal((64, 64), dtype=np.float32)
    return [tm.matmul(A, A, kernel=k, backend="emu", profile=True, **p)
            for k, p in (("naive", {"block": 16}), ("naive_uncoalesced", {"block": 16}),
                         ("tiled", {"tile": 16}))]


def test_compare_puts_counted_beside_modelled(profiled):
    naive, uncoalesced, tiled = (tm.model.compare(r, bandwidth_gbs=100) for r in profiled)
    for row in (naive, uncoalesced, tiled):
        # The bytes the lanes asked for are the lecture's loads and stores, exactly.
        assert row["counted_requested_bytes"] == row["model_bytes"]
        assert row["counted_by"] == "emu" and row["compulsory_bytes"] == 3 * 64 * 64 * 4
    # The sectors they touched tell the access patterns apart: a naive warp's A reads are one
    # broadcast row (fewer sector bytes than asked), the uncoalesced warp's 32 rows are 32 sectors.
    assert naive["counted_sector_bytes"] < naive["model_bytes"] < uncoalesced["counted_sector_bytes"]
    assert tiled["counted_sector_bytes"] == tiled["model_bytes"] == 147456
    assert tiled["predicted_h100_ms"] < naive["predicted_h100_ms"]
    unprofiled = tm.matmul(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32),
                           kernel="naive", backend="emu")
    assert "counted_by" not in tm.model.compare(unprofiled, bandwidth_gbs=100)


def test_traffic_plot_draws_model_and_counted_bars(profiled):
    ax = tm.plot.traffic(profiled)
    heights = [p.get_height() for p in ax.patches]
    rows = [tm.model.compare(r, bandwidth_gbs=1.0) for r in profiled]
    assert heights == [r["model_bytes"] / 1e6 for r in rows] + \
        [r["counted_sector_bytes"] / 1e6 for r in rows]
    assert ax.lines[0].get_ydata()[0] == 3 * 64 * 64 * 4 / 1e6
