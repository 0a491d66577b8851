"""tm.model: the lectures' traffic and roofline arithmetic."""
import itertools

import numpy as np
import pytest

import tiledmm as tm
from tiledmm import _backend, _emu, model


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


def _every_param_combination(spec):
    """Every combination of a kernel's allowed parameter values, as keyword dicts."""
    return [dict(zip([p.name for p in spec.params], values))
            for values in itertools.product(*[p.values for p in spec.params])]


# Shapes where the tile widths give different block counts: 8/16/32 (tiled), 64/128/256
# (regtile, fast, coarse strips): 300 -> 5/3/2 blocks of 64/128/256, 270 -> 34/17/9 of 8/16/32;
# then odd sizes with remainders everywhere, and the old 70 x 45 x 33. K stays small: the
# emulator runs every launch.
SEPARATING_SHAPES = [(300, 270, 20), (129, 257, 9), (70, 45, 33)]


def test_traffic_model_is_the_launched_model_for_every_kernel_and_parameter():
    """tm.model.traffic_bytes and a call's res.model_bytes come from one C function: equal for
    every matmul kernel and every combination of its parameters, at shapes that separate the
    tile widths."""
    rng = np.random.default_rng(0)
    checked = set()
    for M, N, K in SEPARATING_SHAPES:
        A = rng.standard_normal((M, K)).astype(np.float32)
        B = rng.standard_normal((K, N)).astype(np.float32)
        for spec in tm.kernels("matmul"):
            if spec.name in tm._registry.CUDA_ONLY:   # GPU libraries: not on the emulator
                continue
            for params in _every_param_combination(spec):
                res = tm.matmul(A, B, kernel=spec.name, backend="emu", **params)
                assert res.model_bytes > 0
                assert model.traffic_bytes(spec.name, M, N, K, backend="emu", **params) == \
                    res.model_bytes, (spec.name, params, (M, N, K))
                checked.add((spec.name, tuple(sorted(params.items()))))
    expected = sum(len(_every_param_combination(s)) for s in tm.kernels("matmul")
                   if s.name not in tm._registry.CUDA_ONLY)
    assert len(checked) == expected >= 30


def test_traffic_model_distinguishes_the_tile_widths():
    """At 300 x 270 x 20 every tile width gives another figure, so a model with the wrong tile
    cannot pass the test above."""
    M, N, K = SEPARATING_SHAPES[0]
    by_tile = {t: model.traffic_bytes("tiled", M, N, K, tile=t) for t in (8, 16, 32)}
    assert len(set(by_tile.values())) == 3
    fast = {c: model.traffic_bytes("fast", M, N, K, config=c) for c in (1, 3, 4)}
    assert len(set(fast.values())) == 3   # 128 x 128, 64 x 64, 128 x 256


def _fast_bytes(M, N, K, bm, bn):
    """Hand-derived: A read once per block-column, B once per block-row, C written once."""
    return 4 * (M * K * -(-N // bn) + K * N * -(-M // bm) + M * N)


@pytest.mark.parametrize("shape, params, expected", [
    # issue 33's figures: the launcher's 128 x 256 tiles for configs 4, 5, 6, 7
    ((1024, 1024, 1024), dict(config=4), 54_525_952),
    ((640, 384, 96), dict(config=4), 2_211_840),
    ((1024, 1024, 1024), dict(config=7), 4 * (1024**2 * 4 + 1024**2 * 8 + 1024**2)),
    ((1024, 1024, 1024), dict(config=1), 4 * 17 * 1024**2),             # 128 x 128
    ((1024, 1024, 1024), dict(config=3), 4 * 33 * 1024**2),             # 64 x 64
    ((1000, 1000, 999), dict(config=5), _fast_bytes(1000, 1000, 999, 128, 256)),
    ((1000, 1000, 999), dict(config=2), _fast_bytes(1000, 1000, 999, 128, 128)),
])
def test_fast_traffic_at_large_sizes_against_hand_derived_figures(shape, params, expected):
    assert model.traffic_bytes("fast", *shape, sm_count=132, **params) == expected


@pytest.mark.parametrize("kernel, params, expected", [
    ("tiled", dict(tile=16), 4 * (2 * 1024**3 // 16 + 1024**2)),
    ("coarse", dict(coarsen=4, tile=32), 4 * (1024**3 // 128 + 1024**3 // 32 + 1024**2)),
    ("regtile", dict(dims=1), 4 * (2 * 1024**3 // 64 + 1024**2)),
    ("colmajor_b", dict(corner=0, tile=8), 4 * (2 * 1024**2 + 2 * 1024**3 + 1024**2)),
    ("cublas", {}, 4 * 3 * 1024**2),
])
def test_other_kernels_at_1024_against_hand_derived_figures(kernel, params, expected):
    assert model.traffic_bytes(kernel, 1024, **params) == expected


def test_fast_config_0_follows_the_sm_count_without_launching():
    # 1024^3: 32 tiles of 128 x 256 and 64 of 128 x 128. With 132 SMs (an H100) config 0 takes
    # 64 x 64 tiles (config 3); with 64 SMs, 2 x 32 >= 64, CUTLASS's 128 x 256 (config 7).
    h100 = model.traffic_bytes("fast", 1024, sm_count=132)
    assert h100 == model.traffic_bytes("fast", 1024, config=3) == 4 * 33 * 1024**2
    assert model.traffic_bytes("fast", 1024, sm_count=64) == \
        model.traffic_bytes("fast", 1024, config=7) == 54_525_952
    # the older keyword still works, and agrees
    assert model.traffic_bytes("fast", 1024, multiprocessors=132) == h100
    with pytest.raises(ValueError, match="disagree"):
        model.traffic_bytes("fast", 1024, sm_count=64, multiprocessors=132)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="sm_count"):
            model.traffic_bytes("fast", 1024, sm_count=bad)


@pytest.fixture
def emu_threads():
    """Set the emulator's worker threads (its multiprocessor count) for a test, then restore."""
    before = _emu.threads()
    yield _emu.threads
    _emu.threads(before)


def test_fast_config_0_launch_and_model_pick_by_the_emulators_sm_count(emu_threads):
    """256 x 256: 2 tiles of 128 x 256. With 4 multiprocessors config 0 launches config 7
    (2 x 2 >= 4, 128 x 256 tiles), with 5 config 3 (64 x 64); the call's model_bytes and
    tm.model's default (the running device's count) follow."""
    M, N, K = 256, 256, 12
    rng = np.random.default_rng(1)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    got = {}
    for sms in (4, 5):
        emu_threads(sms)
        assert tm.device_info(backend="emu")["multiprocessors"] == sms
        res = tm.matmul(A, B, kernel="fast", backend="emu")
        np.testing.assert_allclose(res.out, A.astype(np.float64) @ B, rtol=1e-5,
                                   atol=1e-5 * K)
        assert res.model_bytes == model.traffic_bytes("fast", M, N, K, backend="emu")
        assert res.model_bytes == model.traffic_bytes("fast", M, N, K, sm_count=sms)
        got[sms] = res.model_bytes
    assert got[4] == _fast_bytes(M, N, K, 128, 256)
    assert got[5] == _fast_bytes(M, N, K, 64, 64)


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (640, 384, 96), (300, 270, 20),
                                   (129, 257, 9)])
@pytest.mark.parametrize("sms", [8, 132])
def test_block_tile_and_traffic_agree_with_the_lectures_count(shape, sms):
    """The registry's block tile (the tile column of tables) and its traffic model, against the
    lecture's count of a blocked matmul (loads_blocked, written here in Python). The libraries'
    traffic is the minimum (each input read once), not a blocked count."""
    M, N, K = shape
    for spec in tm.kernels("matmul"):
        if spec.name in ("cublas", "cutlass"):   # the libraries (tf32x3 is a blocked kernel)
            assert model.traffic_bytes(spec.name, M, N, K) == 4 * (M * K + K * N + M * N)
            continue
        for params in _every_param_combination(spec):
            tile = model.block_tile(spec.name, M, N, K, sm_count=sms, **params)
            extra = 2 * K * N if spec.name == "colmajor_b" else 0
            assert 4 * (model.loads_blocked(M, N, K, *tile) + extra + M * N) == \
                model.traffic_bytes(spec.name, M, N, K, sm_count=sms, **params), \
                (spec.name, params)


@pytest.mark.parametrize("kernel, params, expected", [
    ("naive", {}, (1, 1)),
    ("naive_uncoalesced", dict(block=8), (1, 1)),
    ("tiled", dict(tile=8), (8, 8)),
    ("coarse", dict(coarsen=4, tile=32), (32, 128)),
    ("colmajor_b", dict(corner=0, tile=32), (1, 1)),
    ("colmajor_b", dict(corner=1, tile=32), (32, 32)),
    ("regtile", dict(dims=1), (64, 64)),
    ("regtile", dict(dims=2), (128, 128)),
    ("fast", dict(config=1), (128, 128)),
    ("fast", dict(config=2), (128, 128)),
    ("fast", dict(config=3), (64, 64)),
    ("fast", dict(config=4), (128, 256)),
    ("fast", dict(config=5), (128, 256)),
    ("fast", dict(config=6), (128, 256)),
    ("fast", dict(config=7), (128, 256)),
    ("fast", dict(config=0, sm_count=132), (64, 64)),     # 1024^3 on an H100: config 3
    ("fast", dict(config=0, sm_count=64), (128, 256)),    # ... on 64 SMs: config 7
    ("cutlass", {}, (128, 256)),
    ("cublas", {}, None),
])
def test_block_tile_as_the_kernel_files_launch_it(kernel, params, expected):
    assert model.block_tile(kernel, 1024, 1024, 1024, **params) == expected


def test_traffic_bytes_refuses_what_the_registry_refuses():
    with pytest.raises(ValueError, match="not allowed"):
        model.traffic_bytes("tiled", 64, tile=12)
    with pytest.raises(ValueError, match="no parameter"):
        model.traffic_bytes("tiled", 64, tiles=16)
    with pytest.raises(ValueError, match="reduce kernel"):
        model.traffic_bytes("shuffle", 64)
    with pytest.raises(ValueError, match="unknown kernel"):
        _emu.traffic_model("nope", 32, 1, 1, 1, (), 1)
    with pytest.raises(ValueError, match="float64"):
        _emu.traffic_model("fast", 64, 1, 1, 1, (0,), 1)
    with pytest.raises(ValueError, match=">= 0"):
        _emu.traffic_model("tiled", 32, -1, 1, 1, (16,), 1)
    with pytest.raises(ValueError, match="parameter"):
        _emu.traffic_model("tiled", 32, 1, 1, 1, (), 1)
    # itemsize scales, stores=False drops C's M*N stores
    assert model.traffic_bytes("tiled", 100, 70, 33, itemsize=8, tile=16) == \
        2 * model.traffic_bytes("tiled", 100, 70, 33, tile=16)
    assert model.traffic_bytes("fast", 100, 70, 33, stores=False, config=4) == \
        model.traffic_bytes("fast", 100, 70, 33, config=4) - 4 * 100 * 70


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


def test_profile_mode_counts_the_launch_the_modelled_device_would_make(emu_threads):
    """A profiled call on emu counts a second run in which launchers see the modelled GPU's
    132 multiprocessors (tiledmm/profile.py GRID_SMS): fast's config 0 there takes 64 x 64
    tiles, and the traffic it counts is the model's at sm_count=132, while the timed call (and
    its model_bytes) used the emulator's own count (here 2: 128 x 256 tiles)."""
    M, N, K = 256, 256, 8
    rng = np.random.default_rng(2)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    emu_threads(2)
    res = tm.matmul(A, B, kernel="fast", backend="emu", profile=True)
    np.testing.assert_allclose(res.out, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5 * K)
    assert res.model_bytes == model.traffic_bytes("fast", M, N, K, backend="emu") == \
        _fast_bytes(M, N, K, 128, 256)                      # 2 x 2 >= 2: config 7
    counted = res.profile.global_load_bytes + res.profile.global_store_bytes
    assert counted == model.traffic_bytes("fast", M, N, K, sm_count=132) == \
        _fast_bytes(M, N, K, 64, 64)                        # 4 < 132: config 3


@pytest.mark.skipif(_backend.cuda_device_count() > 0, reason="asks a machine without a GPU")
def test_cuda_model_without_a_device_needs_an_sm_count():
    try:
        _backend.module("cuda")
    except RuntimeError:
        pytest.skip("the cuda backend is not built here")
    # the model itself needs no device: with an SM count it answers as on emu
    assert model.traffic_bytes("fast", 1024, sm_count=132, backend="cuda") == \
        model.traffic_bytes("fast", 1024, sm_count=132, backend="emu") == 4 * 33 * 1024**2
    assert model.traffic_bytes("fast", 1024, sm_count=np.int64(64), backend="cuda") == 54_525_952
    with pytest.raises(RuntimeError, match="sm_count="):
        model.traffic_bytes("fast", 1024, backend="cuda")
