"""tm.model: the lectures' traffic and roofline arithmetic."""
import numpy as np
import pytest

import tiledmm as tm
from tiledmm import model


def test_lecture_bandwidth_bounds_exactly():
    # Lecture 000: 150 GB/s -> 37.5 GFLOP/s naive, 600 with 16x16 tiles, 1,200 with 32x32.
    assert model.bandwidth_bound_gflops(150) == 37.5
    assert model.bandwidth_bound_gflops(150, tile=16) == 600
    assert model.bandwidth_bound_gflops(150, tile=32) == 1200
    # Lecture 003: G80 at 86.4 GB/s, 16x16 tiles: (86.4/4)*16.
    assert model.bandwidth_bound_gflops(86.4, tile=16) == pytest.approx(345.6)
    # The same through intensity x bandwidth.
    assert model.lecture_intensity() == 0.25
    assert model.roofline(model.lecture_intensity(16), None, 150) == 600
    assert model.roofline(model.lecture_intensity(32), 1000, 150) == 1000   # compute-bound
    assert model.ridge_point(1000, 150) == pytest.approx(1000 / 150)


def test_lecture_load_counts():
    N = 1024
    assert model.flops(N) == 2 * N**3
    assert model.loads_naive(N) == 2 * N**3                   # lecture 001 strawman
    for T in (8, 16, 32):
        assert model.loads_tiled(N, tile=T) == 2 * N**3 // T  # 2N^3/L
    for V in (2, 4, 8):
        assert model.loads_regtile(N, V=V) == 2 * N**3 // V   # 2N^3/V


def test_rectangular_loads():
    M, N, K, T = 100, 70, 33, 16
    assert model.loads_naive(M, N, K) == 2 * M * N * K
    # A is re-read once per block-column of C, B once per block-row.
    assert model.loads_tiled(M, N, K, tile=T) == M * K * 5 + K * N * 7
    assert model.traffic_bytes("tiled", M, N, K, tile=T) == 4 * (M * K * 5 + K * N * 7 + M * N)
    assert model.traffic_bytes("tiled", M, N, K, itemsize=8, stores=False, tile=T) == \
        8 * (M * K * 5 + K * N * 7)
    assert model.flops(M, N, K) == 2 * M * N * K
    with pytest.raises(ValueError):
        model.loads_naive(-1, 2, 3)


def test_traffic_model_matches_every_registered_kernel():
    """tm.model and the registry's C model (res.model_bytes) agree for every matmul kernel and
    parameter value, on shapes that are not multiples of any tile."""
    sms = tm.device_info(backend="emu")["multiprocessors"]
    rng = np.random.default_rng(0)
    M, N, K = 70, 45, 33
    A = rng.random((M, K), dtype=np.float32)
    B = rng.random((K, N), dtype=np.float32)
    checked = 0
    for spec in tm.kernels("matmul"):
        if spec.name in tm._registry.CUDA_ONLY:   # GPU libraries: not on the emulator
            continue
        for p in (spec.params or [None]):
            for value in (p.values if p else [None]):
                params = {p.name: value} if p else {}
                res = tm.matmul(A, B, kernel=spec.name, backend="emu", **params)
                expected = model.traffic_bytes(spec.name, M, N, K, multiprocessors=sms,
                                               **res.params)
                assert expected == res.model_bytes, (spec.name, res.params)
                checked += 1
    assert checked >= 4


def test_predicted_and_compare():
    row = model.predicted("tiled", 1024, bandwidth_gbs=150, tile=16)
    assert row["bound_by"] == "memory"
    assert row["intensity"] == pytest.approx(model.arithmetic_intensity("tiled", 1024, tile=16))
    # With the stores of C counted the bound is a little under the lecture's 600.
    assert 550 < row["bound_gflops"] < 600
    gm = model.predicted("naive", 512, device="GM204")
    assert gm["bandwidth_gbs"] == tm.occupancy.PRESETS["GM204"]["bandwidth_gbs"]
    assert gm["bound_by"] == "memory"

    A = np.ones((64, 64), np.float32)
    res = tm.matmul(A, A, kernel="tiled", tile=16, backend="emu")
    c = model.compare(res, bandwidth_gbs=10.0)
    assert c["measured_gflops"] == res.gflops
    assert c["intensity"] == pytest.approx(res.flops / res.model_bytes)
    assert c["bound_gflops"] == pytest.approx(c["intensity"] * 10.0)
    assert c["fraction_of_bound"] == pytest.approx(res.gflops / c["bound_gflops"])
    table = model.compare_table([res, res], bandwidth_gbs=10.0)
    assert len(table) == 2


def test_measure_bandwidth_is_positive():
    assert model.measure_bandwidth(1 << 12, backend="emu") > 0
