"""The result object: output, timing, launch facts, rates, unpacking, repr."""
import math

import numpy as np
import pytest

import tiledmm as tm
from conftest import random_matrix


def test_unpacks_as_output_and_timing(backend, rng):
    A, B = random_matrix(rng, (40, 30)), random_matrix(rng, (30, 20))
    C, t = tm.matmul(A, B, kernel="tiled", tile=16, backend=backend)
    assert isinstance(C, np.ndarray) and isinstance(t, tm.Timing)


def test_timing_is_median_of_repeats(backend, rng):
    A, B = random_matrix(rng, (64, 64)), random_matrix(rng, (64, 64))
    res = tm.matmul(A, B, kernel="tiled", backend=backend, warmup=1, repeat=5)
    t = res.timing
    assert len(t.samples_ms) == 5 and t.warmup == 1
    assert all(s > 0 for s in t.samples_ms)
    assert t.kernel_ms == sorted(t.samples_ms)[2]
    assert t.kernel_ms_min == min(t.samples_ms)
    assert t.h2d_ms >= 0 and t.d2h_ms >= 0
    assert t.total_ms == pytest.approx(t.h2d_ms + t.kernel_ms + t.d2h_ms)
    assert t.h2d_bytes == 2 * 64 * 64 * 4 and t.d2h_bytes == 64 * 64 * 4
    assert t.clock == ("CUDA events" if backend == "cuda" else "CPU time (emulator)")


def test_rates_follow_from_time(backend, rng):
    M, N, K = 48, 40, 24
    A, B = random_matrix(rng, (M, K)), random_matrix(rng, (K, N))
    res = tm.matmul(A, B, kernel="naive", backend=backend)
    assert res.flops == 2 * M * N * K
    assert res.gflops == pytest.approx(res.flops / (res.timing.kernel_ms * 1e6))
    assert res.tflops == pytest.approx(res.gflops / 1e3)
    assert res.min_bytes == 4 * (M * K + K * N + M * N)
    # The lectures' traffic model: naive loads 2MNK elements and stores MN.
    assert res.model_bytes == 4 * (2 * M * N * K + M * N)


def test_tiled_traffic_model_divides_by_tile(backend, rng):
    n = 64
    A, B = random_matrix(rng, (n, n)), random_matrix(rng, (n, n))
    naive = tm.matmul(A, B, kernel="naive", backend=backend).model_bytes
    for tile in (8, 16, 32):
        tiled = tm.matmul(A, B, kernel="tiled", tile=tile, backend=backend).model_bytes
        loads = tiled / 4 - n * n
        assert loads == pytest.approx(2 * n**3 / tile)
        assert tiled < naive


@pytest.mark.parametrize("tile", [8, 16, 32])
def test_launch_facts(backend, rng, tile):
    M, N, K = 70, 50, 20
    A, B = random_matrix(rng, (M, K)), random_matrix(rng, (K, N))
    res = tm.matmul(A, B, kernel="tiled", tile=tile, backend=backend)
    launch = res.launch
    assert launch.block == (tile, tile, 1)
    assert launch.grid == (math.ceil(N / tile), math.ceil(M / tile), 1)
    assert launch.shared_bytes == 2 * tile * tile * 4
    assert launch.launches == 1
    assert launch.blocks_per_sm >= 1
    assert 0 < launch.occupancy <= 1
    if backend == "cuda":
        assert launch.registers and launch.registers > 0
    else:
        assert launch.registers is None  # the emulator cannot tell


def test_repr_is_one_readable_line(backend, rng):
    A, B = random_matrix(rng, (8, 8)), random_matrix(rng, (8, 8))
    text = repr(tm.matmul(A, B, kernel="tiled", tile=8, backend=backend))
    assert "\n" not in text
    for part in ("tiled", "tile=8", backend, "float32[8x8]", "GFLOP/s", "ms"):
        assert part in text
    assert "\n" not in repr(tm.matmul(A, B, backend=backend).timing)


def test_result_reports_backend_and_params(backend, rng):
    A, B = random_matrix(rng, (5, 5)), random_matrix(rng, (5, 5))
    res = tm.matmul(A, B, kernel="naive", block=32, backend=backend)
    assert res.backend == backend and res.kernel == "naive" and res.params == {"block": 32}
