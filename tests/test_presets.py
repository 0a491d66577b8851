"""The device presets people have (issue 28): H200, L4, A10G, RTX 4090, RTX 3090 in
tm.occupancy and in profile mode's predict(), and predict()'s default device: the running GPU's
preset on a GPU, the H100 without one."""
import dataclasses
import math

import numpy as np
import pytest

import tiledmm as tm
from tiledmm import _backend, _device
from tiledmm.profiling import time_model
from tiledmm.occupancy import PRESETS, preset_for

from conftest import HAVE_GPU, random_matrix

NEW = ("H200", "L4", "A10G", "RTX4090", "RTX3090")


@pytest.fixture(scope="module")
def tiled_profile():
    rng = np.random.default_rng(28)
    A = random_matrix(rng, (64, 48))
    B = random_matrix(rng, (48, 80))
    return tm.matmul(A, B, kernel="tiled", tile=16, backend="emu", profile=True).profile


# Hand-computed from the compute-capability tables: cc 9.0 has 2,048 threads, 32 blocks and
# 228 KB of shared memory per SM; cc 8.6 and 8.9 have 1,536 threads, 100 KB, and 16 (8.6) or 24
# (8.9) blocks; 1 KB per block is reserved from cc 8.0 on.
@pytest.mark.parametrize("device, threads, shared, blocks, limit", [
    ("H200", 256, 48 * 1024, 4, "shared_memory"),      # 228 // 49 = 4; threads allow 8
    ("L4", 256, 48 * 1024, 2, "shared_memory"),        # 100 // 49 = 2; threads allow 6
    ("L4", 32, 0, 24, "blocks"),                       # threads allow 48
    ("RTX4090", 32, 0, 24, "blocks"),
    ("A10G", 32, 0, 16, "blocks"),
    ("RTX3090", 32, 0, 16, "blocks"),
    ("A10G", 512, 0, 3, "threads"),                    # 1536 // 512
    ("H200", 512, 0, 4, "threads"),                    # 2048 // 512
])
def test_occupancy_on_new_presets(device, threads, shared, blocks, limit):
    occ = tm.occupancy(threads_per_block=threads, shared_bytes=shared, device=device)
    assert (occ.blocks_per_sm, occ.limited_by) == (blocks, limit)


def test_preset_names_as_people_write_them():
    assert tm.occupancy.preset("rtx 4090")["name"] == "RTX4090"
    assert tm.occupancy.preset("RTX-3090")["multiprocessors"] == 82
    assert PRESETS["H200"]["l2_bytes"] == 62_914_560
    assert PRESETS["H200"]["multiprocessors"] == 132
    assert PRESETS["H200"]["bandwidth_gbs"] > PRESETS["H100"]["bandwidth_gbs"]
    with pytest.raises(ValueError, match="H200"):   # the error lists the presets
        tm.occupancy.preset("GTX 480")


@pytest.mark.parametrize("name, cc, expected", [
    ("NVIDIA H200", (9, 0), "H200"),
    ("NVIDIA H100 80GB HBM3", (9, 0), "H100"),
    ("NVIDIA A100-SXM4-80GB", (8, 0), "A100"),
    ("NVIDIA A10G", (8, 6), "A10G"),
    ("NVIDIA A10", (8, 6), None),                  # not an A10G, not an A100
    ("NVIDIA L4", (8, 9), "L4"),
    ("NVIDIA GeForce RTX 4090", (8, 9), "RTX4090"),
    ("NVIDIA GeForce RTX 3090", (8, 6), "RTX3090"),
    ("Tesla T4", (7, 5), "T4"),
    ("NVIDIA H200", (8, 0), None),                 # the name alone is not enough
])
def test_preset_for_a_real_gpu(name, cc, expected):
    assert preset_for(name, cc) == expected


@pytest.mark.parametrize("device", NEW)
def test_predict_on_new_presets(tiled_profile, device):
    pred = tiled_profile.predict(device)
    assert pred.device == device and math.isfinite(pred.ms) and pred.ms > 0


def test_more_bandwidth_predicts_a_faster_memory_bound_call(tiled_profile):
    # A call whose compulsory traffic dominates: the H200's 4.8 TB/s against the H100's 3.35.
    p = dataclasses.replace(tiled_profile, min_bytes=4e9)
    h100, h200 = p.predict("H100"), p.predict("H200")
    assert h100.bound == h200.bound == "DRAM"
    assert h200.ms / h100.ms == pytest.approx(3350 / 4800, rel=0.02)


@pytest.mark.skipif(HAVE_GPU, reason="the default without a GPU")
def test_predict_defaults_to_h100_without_a_gpu_and_says_so(tiled_profile):
    pred = tiled_profile.predict()
    assert pred.device == "H100"
    assert "no GPU" in pred.device_chosen_because and "no GPU" in repr(pred)


@pytest.mark.parametrize("name, cc, expected, why", [
    ("NVIDIA H200", (9, 0), "H200", "running GPU"),
    ("NVIDIA GeForce RTX 4090", (8, 9), "RTX4090", "running GPU"),
    ("NVIDIA B200", (10, 0), "H100", "no preset matches"),
])
def test_predict_picks_the_running_gpus_preset(monkeypatch, tiled_profile, name, cc, expected,
                                                why):
    monkeypatch.setattr(_backend, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(_device, "device_info",
                        lambda backend=None: {"name": name, "compute_capability": cc})
    pred = tiled_profile.predict()
    assert pred.device == expected and why in pred.device_chosen_because
    assert pred.ms == pytest.approx(tiled_profile.predict(expected).ms)



def test_lesson_table_predicts_for_the_running_gpu_by_default(monkeypatch):
    """lesson_table(device=None) chooses as predict() does (issue 33: it said "H100" always)."""
    monkeypatch.setattr(_backend, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(_device, "device_info",
                        lambda backend=None: {"name": "NVIDIA GeForce RTX 4090",
                                              "compute_capability": (8, 9)})
    cases = [("tiled", {"tile": 8})]
    rows = tm.profile.lesson_table("matmul", cases, size=48, measure_size=16, backend="emu")
    h100 = tm.profile.lesson_table("matmul", cases, size=48, measure_size=16, backend="emu",
                                   device="H100")
    assert rows[0]["device"] == "RTX4090" and h100[0]["device"] == "H100"
    assert rows[0]["predicted_ms"] != pytest.approx(h100[0]["predicted_ms"])

@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA device")
def test_on_a_gpu_predict_names_this_gpu(tiled_profile):
    info = _device.device_info("cuda")
    key = preset_for(info["name"], tuple(info["compute_capability"]))
    assert time_model.default_device()[0] == (key or time_model.DEFAULT_DEVICE)
    assert tiled_profile.predict().device == (key or "H100")


def test_a_missing_metric_shows_as_n_a(tiled_profile):
    p = dataclasses.replace(tiled_profile, global_atomics=math.nan, shared_load_requests=math.nan)
    text = repr(p)
    assert "atomics n/a" in text and "shared ld n/a" in text and "nan" not in text
