"""The tensor-core rungs in the time model and the roofline (issue 47): device presets carry dense
tensor-core peaks, and `wmma` (FP16 or TF32 inputs) and `tf32x3` (three TF32 products per
multiply-add) are bounded by them, not by the FP32 FFMA peak."""
import dataclasses

import numpy as np
import pytest

import tiledmm as tm
from tiledmm import model
from tiledmm.occupancy import PRESETS

from conftest import random_matrix

HUGE_BANDWIDTH = 1e12   # GB/s: takes the memory roof out, leaving the compute roof


def test_tensor_presets_follow_the_data_sheets_shape():
    for name in ("V100", "T4", "A100", "H100", "H200", "L4", "A10G", "RTX4090", "RTX3090"):
        p = PRESETS[name]
        # at least twice FFMA (GeForce boards, FP32 accumulate at half rate: twice exactly)
        assert p["tensor_fp16_gflops"] > 1.9 * p["peak_gflops"], name
        if p["tensor_tf32_gflops"] is not None:                       # TF32: half FP16's rate
            assert p["tensor_tf32_gflops"] == pytest.approx(p["tensor_fp16_gflops"] / 2, rel=0.02)
    assert PRESETS["T4"]["tensor_tf32_gflops"] is None                # Turing has no TF32
    assert PRESETS["V100"]["tensor_tf32_gflops"] is None
    for name in ("G80", "GM107", "GM204"):                             # no tensor cores at all
        assert PRESETS[name]["tensor_fp16_gflops"] is None
    assert tm.occupancy.preset_for("Tesla V100-SXM2-16GB", (7, 0)) == "V100"


@pytest.mark.parametrize("kernel, params, key, products", [
    ("wmma", {"precision": 1}, "tensor_fp16_gflops", 1),
    ("wmma", {}, "tensor_fp16_gflops", 1),                  # the registry's default: FP16
    ("wmma", {"precision": 0}, "tensor_tf32_gflops", 1),
    ("tf32x3", {}, "tensor_tf32_gflops", 3),
])
@pytest.mark.parametrize("device", ["H100", "A100", "H200"])
def test_tensor_rungs_are_bounded_by_the_tensor_peak(kernel, params, key, products, device):
    row = model.predicted(kernel, 8192, device=device, bandwidth_gbs=HUGE_BANDWIDTH, **params)
    assert row["bound_by"] == "compute"
    assert row["bound_gflops"] == pytest.approx(PRESETS[device][key] / products)
    assert row["bound_gflops"] > PRESETS[device]["peak_gflops"]     # not the FFMA roof


def test_ffma_kernels_keep_the_fp32_peak():
    row = model.predicted("tiled", 8192, device="H100", bandwidth_gbs=HUGE_BANDWIDTH, tile=32)
    assert row["bound_gflops"] == PRESETS["H100"]["peak_gflops"]


def test_a_device_without_the_tensor_cores_has_no_compute_roof_for_them():
    # A T4 has FP16 tensor cores but no TF32: the roof is unknown, so only memory bounds.
    row = model.predicted("wmma", 4096, device="T4", precision=0)
    assert row["peak_gflops"] is None and row["bound_by"] == "memory"
    assert model.predicted("wmma", 4096, device="T4", precision=1)["peak_gflops"] == 65000.0


@pytest.fixture(scope="module")
def wmma_profiles():
    rng = np.random.default_rng(47)
    A, B = random_matrix(rng, (64, 64)), random_matrix(rng, (64, 64))
    return {p: tm.matmul(A, B, kernel="wmma", precision=p, backend="emu", profile=True).profile
            for p in (0, 1)}


@pytest.mark.parametrize("precision, pipe, key", [
    (1, "FP16 tensor cores", "tensor_fp16_gflops"),
    (0, "TF32 tensor cores", "tensor_tf32_gflops"),
])
def test_time_model_bounds_wmma_by_its_tensor_cores(wmma_profiles, precision, pipe, key):
    p = wmma_profiles[precision]
    pred = p.predict("H100")
    assert "FP32 issue" in pred.times_ms and pipe in pred.times_ms
    # 64^3 in 32 x 32 tiles: 4 blocks of 4 warps on 4 of the 132 SMs, each SM's four tensor
    # cores busy: the flops at the peak's share of 4 SMs.
    lim = PRESETS["H100"]
    expected_s = p.flops / (lim[key] * 1e9 * 4 / lim["multiprocessors"])
    assert pred.times_ms[pipe] == pytest.approx(expected_s * 1e3)
    # The same counts as an FFMA kernel's: the flops go to FP32 issue, one warp FFMA per 64.
    as_ffma = dataclasses.replace(p, kernel="tiled", params={"tile": 16}).predict("H100")
    assert pipe not in as_ffma.times_ms
    issue_rate = 4 / 4 / lim["warps_to_fill_scheduler"]   # 4 warps an SM
    ffma_s = p.flops / 64 / (4 * issue_rate * 4 * lim["clock_ghz"] * 1e9)
    assert as_ffma.times_ms["FP32 issue"] - pred.times_ms["FP32 issue"] == \
        pytest.approx(ffma_s * 1e3)


def test_time_model_refuses_a_device_without_the_rungs_tensor_cores(wmma_profiles):
    # A device given as a dict of limits has no tensor-core peaks unless it says so.
    custom = {"name": "mine", "bandwidth_gbs": 3350.0}
    with pytest.raises(ValueError, match="TF32 tensor cores.*'mine'.*H100"):
        wmma_profiles[0].predict(custom)
    pred = wmma_profiles[0].predict(dict(custom, tensor_tf32_gflops=1000.0))
    assert pred.times_ms["TF32 tensor cores"] > 100 * wmma_profiles[0].predict("H100").times_ms[
        "TF32 tensor cores"]
