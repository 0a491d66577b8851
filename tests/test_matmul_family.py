"""The matmul ladder's specifics: cublas on cuda (and its clear refusal on emu), fast's float32
only policy and edge paths, coarse with every factor, colmajor_b's two variants, regtile's two
shapes. tests/test_matmul.py already runs every kernel and parameter combination over shapes."""
import numpy as np
import pytest

import tiledmm as tm
from tiledmm.testing import assert_matmul_close, exact_integer_matrix
from conftest import HAVE_GPU, random_matrix

gpu = pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA device")


def test_cublas_is_registered_without_parameters():
    spec = {k.name: k for k in tm.kernels("matmul")}["cublas"]
    assert spec.params == () and set(spec.dtypes) == {"float32", "float64"}


def test_cublas_on_emu_raises_not_supported(rng):
    A, B = random_matrix(rng, (4, 5)), random_matrix(rng, (5, 3))
    with pytest.raises(RuntimeError, match="NotSupported|not supported") as info:
        tm.matmul(A, B, kernel="cublas", backend="emu")
    # the message says which backend runs it, not only the CUDA error's name
    assert "runs on the cuda backend only" in str(info.value)
    assert "backend='cuda'" in str(info.value)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (17, 33, 9), (256, 128, 512), (300, 7, 1000)])
def test_cublas_matches_numpy(rng, dtype, M, N, K):
    A, B = random_matrix(rng, (M, K), dtype), random_matrix(rng, (K, N), dtype)
    res = tm.matmul(A, B, kernel="cublas", backend="cuda")
    assert res.out.dtype == dtype and res.out.shape == (M, N)
    assert_matmul_close(res.out, A, B)


@pytest.mark.gpu
@gpu
def test_cublas_float32_is_not_tf32(rng):
    # TF32 keeps 10 mantissa bits: small integers times 1 + 2^-12 would round. FP32 keeps them.
    A = np.full((64, 64), 1 + 2.0 ** -12, np.float32)
    B = np.eye(64, dtype=np.float32)
    C = tm.matmul(A, B, kernel="cublas", backend="cuda").out
    np.testing.assert_array_equal(C, A)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kernel", ["fast", "regtile", "coarse", "tiled"])
def test_agrees_with_cublas(rng, kernel):
    A, B = random_matrix(rng, (513, 700)), random_matrix(rng, (700, 259))
    ref = tm.matmul(A, B, kernel="cublas", backend="cuda").out
    got = tm.matmul(A, B, kernel=kernel, backend="cuda").out
    assert_matmul_close(got, A, B)
    assert np.max(np.abs(got - ref)) < 1e-3


def test_fast_refuses_float64(backend, rng):
    A, B = random_matrix(rng, (8, 8), np.float64), random_matrix(rng, (8, 8), np.float64)
    with pytest.raises(TypeError, match="float64"):
        tm.matmul(A, B, kernel="fast", backend=backend)


# Shapes that exercise each of fast's paths: whole 64/128 tiles with aligned rows (float4 loads
# and stores), K and N not multiples of 4 (scalar guarded loads), partial tiles at every edge.
FAST_SHAPES = [(64, 64, 64), (128, 128, 16), (130, 67, 33), (65, 129, 17), (1, 260, 5),
               (200, 4, 3), (96, 100, 101)]


@pytest.mark.parametrize("config", [0, 1, 2, 3])
@pytest.mark.parametrize("M,N,K", FAST_SHAPES, ids=str)
def test_fast_every_config_and_edge(backend, rng, config, M, N, K):
    A, B = exact_integer_matrix(rng, (M, K)), exact_integer_matrix(rng, (K, N))
    C = tm.matmul(A, B, kernel="fast", backend=backend, config=config).out
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


def test_fast_misaligned_device_views_fall_back(backend, rng):
    # Row lengths that are multiples of 4 but the data starting 1 element into a buffer: the
    # launcher must see the misaligned base and use scalar loads (here through a strided view,
    # which the glue copies; the alignment check itself is covered on cuda by device arrays).
    big = exact_integer_matrix(rng, (33, 65))
    A, B = big[:, 1:], exact_integer_matrix(rng, (64, 36))
    C = tm.matmul(A, B, kernel="fast", backend=backend).out
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


@pytest.mark.parametrize("coarsen", [1, 2, 4, 8])
@pytest.mark.parametrize("tile", [8, 16, 32])
def test_coarse_every_factor_on_partial_strips(backend, rng, coarsen, tile):
    # N chosen so the last strip has a partial last tile and some empty tiles: the lecture's
    # listing would write out of bounds (and to the wrong columns) here.
    M, K = tile + 3, 2 * tile + 1
    N = tile * coarsen + tile // 2 + 1
    A, B = exact_integer_matrix(rng, (M, K)), exact_integer_matrix(rng, (K, N))
    res = tm.matmul(A, B, kernel="coarse", backend=backend, coarsen=coarsen, tile=tile)
    np.testing.assert_array_equal(res.out, A.astype(np.int64) @ B.astype(np.int64))
    assert res.launch.grid[0] == -(-N // (tile * coarsen))
    assert tuple(res.launch.block[:2]) == (tile, tile)


def test_coarse_float64_large_strip(backend, rng):
    # float64, tile 32, coarsen 8: a 64 KiB B strip, over the 48 KiB default (opt-in path).
    A, B = random_matrix(rng, (40, 70), np.float64), random_matrix(rng, (70, 300), np.float64)
    C = tm.matmul(A, B, kernel="coarse", backend=backend, tile=32, coarsen=8).out
    assert np.max(np.abs(C - A @ B)) < 1e-12 * 70


@pytest.mark.parametrize("corner", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_colmajor_b_both_variants(backend, rng, corner, dtype):
    A, B = random_matrix(rng, (45, 70), dtype), random_matrix(rng, (70, 39), dtype)
    res = tm.matmul(A, B, kernel="colmajor_b", backend=backend, corner=corner)
    assert_matmul_close(res.out, A, B)
    assert res.launch.launches == 2  # the transpose of B into scratch, then the matmul


def test_colmajor_b_tall_k_transpose(backend, rng):
    # K large enough that the transpose's grid-stride loop runs more than one tile-row per block
    # on a grid capped at 65535 rows would need K > 2M; here: several tiles, odd sizes.
    A, B = exact_integer_matrix(rng, (5, 1031)), exact_integer_matrix(rng, (1031, 37))
    C = tm.matmul(A, B, kernel="colmajor_b", backend=backend, corner=1, tile=8).out
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


@pytest.mark.parametrize("dims,threads", [(1, 512), (2, 256)])
def test_regtile_shapes(backend, rng, dims, threads):
    A, B = exact_integer_matrix(rng, (130, 19)), exact_integer_matrix(rng, (19, 131))
    res = tm.matmul(A, B, kernel="regtile", backend=backend, dims=dims)
    np.testing.assert_array_equal(res.out, A.astype(np.int64) @ B.astype(np.int64))
    assert res.launch.block[0] == threads


def test_the_ladder_is_registered():
    names = [k.name for k in tm.kernels("matmul")]
    for rung in ("naive", "naive_uncoalesced", "tiled", "coarse", "colmajor_b", "regtile", "fast",
                 "cublas"):
        assert rung in names
