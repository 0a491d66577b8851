"""matmul kernels against numpy.matmul in float64, over shapes, tiles, dtypes and layouts."""

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.testing import assert_matmul_close, exact_integer_matrix
from conftest import random_matrix

MATMUL_KERNELS = [k.name for k in tm.kernels("matmul")]
SPECS = {k.name: k for k in tm.kernels("matmul")}
# Kernels that exist on the GPU only (cuBLAS, CUTLASS, tf32x3's mma.sync): the emulator says so
# with RuntimeError (tests/test_matmul_family.py checks that).
CUDA_ONLY = tm._registry.CUDA_ONLY
_BUILT = {}


def cutlass_built(backend):
    """Whether this cuda build has the `cutlass` kernel (setup.py builds it only where it finds
    CUTLASS's headers); an unbuilt one refuses with cudaErrorNotYetImplemented."""
    if backend not in _BUILT:
        one = np.ones((1, 1), np.float32)
        try:
            tm.matmul(one, one, kernel="cutlass", backend=backend, warmup=0, repeat=1)
            _BUILT[backend] = True
        except RuntimeError as exc:
            if "NotYetImplemented" not in str(exc):
                raise
            _BUILT[backend] = False
    return _BUILT[backend]


def skip_unsupported(backend, kernel, dtype=None):
    if backend == "emu" and kernel in CUDA_ONLY:
        pytest.skip(f"{kernel} runs on the cuda backend only")
    if kernel == "cutlass" and not cutlass_built(backend):
        pytest.skip("cutlass was not built (no CUTLASS headers found by setup.py)")
    if dtype is not None and np.dtype(dtype).name not in SPECS[kernel].dtypes:
        pytest.skip(f"{kernel} supports {'/'.join(SPECS[kernel].dtypes)} only")

# 1x1, tiny, non-multiples of every tile, tall, wide, long K, and one multiple of 32.
SHAPES = [(1, 1, 1), (1, 7, 1), (3, 5, 2), (17, 33, 9), (33, 17, 65), (64, 64, 64),
          (100, 3, 1), (2, 200, 3), (5, 1, 130), (31, 29, 37)]


def kernel_param_cases():
    """(kernel, params) for every kernel and every combination of its parameters' values."""
    for spec in tm.kernels("matmul"):
        for params in spec.param_combinations():
            ident = "-".join([spec.name] + [f"{k}{v}" for k, v in params.items()])
            yield pytest.param(spec.name, params, id=ident)


@pytest.mark.parametrize("kernel,params", list(kernel_param_cases()))
@pytest.mark.parametrize("M,N,K", SHAPES, ids=lambda s: str(s))
def test_shapes_float32(backend, rng, kernel, params, M, N, K):
    skip_unsupported(backend, kernel)
    A, B = random_matrix(rng, (M, K)), random_matrix(rng, (K, N))
    C, timing = tm.matmul(A, B, kernel=kernel, backend=backend, **params)
    assert C.dtype == np.float32 and C.shape == (M, N)
    assert_matmul_close(C, A, B, kernel=kernel)


@pytest.mark.parametrize("kernel", MATMUL_KERNELS)
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (19, 23, 41), (70, 33, 5)])
def test_float64_runs_as_float64(backend, rng, kernel, M, N, K):
    skip_unsupported(backend, kernel, np.float64)
    A, B = random_matrix(rng, (M, K), np.float64), random_matrix(rng, (K, N), np.float64)
    C = tm.matmul(A, B, kernel=kernel, backend=backend).out
    assert C.dtype == np.float64
    assert_matmul_close(C, A, B)
    # float64 accuracy, not float32's: far tighter than a float32 tolerance would allow.
    assert np.max(np.abs(C - A @ B)) < 1e-12 * K


LAYOUTS = {
    "fortran": lambda x: np.asfortranarray(x),
    "transposed_view": lambda x: np.ascontiguousarray(x.T).T,
    "strided": lambda x: np.repeat(np.repeat(x, 2, axis=0), 3, axis=1)[::2, ::3],
    "negative_strides": lambda x: np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1],
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kernel", MATMUL_KERNELS)
def test_layouts(backend, rng, kernel, layout):
    skip_unsupported(backend, kernel)
    A, B = random_matrix(rng, (21, 13)), random_matrix(rng, (13, 18))
    A_view, B_view = LAYOUTS[layout](A), LAYOUTS[layout](B)
    assert np.array_equal(A_view, A) and np.array_equal(B_view, B)
    C = tm.matmul(A_view, B_view, kernel=kernel, backend=backend).out
    assert C.flags.c_contiguous
    assert_matmul_close(C, A, B, kernel=kernel)


def test_mixed_float32_float64_promotes_to_float64(backend, rng):
    A, B = random_matrix(rng, (4, 5)), random_matrix(rng, (5, 3), np.float64)
    C = tm.matmul(A, B, backend=backend).out
    assert C.dtype == np.result_type(A, B) == np.float64
    assert_matmul_close(C, A, B)


def test_array_likes(backend):
    C = tm.matmul([[1.0, 2.0], [3.0, 4.0]], [[5.0], [6.0]], backend=backend).out
    np.testing.assert_array_equal(C, np.array([[17.0], [39.0]]))


@pytest.mark.parametrize("kernel", MATMUL_KERNELS)
@pytest.mark.parametrize("M,N,K", [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0)])
def test_empty_shapes_like_numpy(backend, kernel, M, N, K):
    A, B = np.ones((M, K), np.float32), np.ones((K, N), np.float32)
    res = tm.matmul(A, B, kernel=kernel, backend=backend)
    expected = A @ B
    assert res.out.shape == expected.shape and res.out.dtype == expected.dtype
    np.testing.assert_array_equal(res.out, expected)  # K = 0: zeros, as NumPy gives
    assert res.launch.launches == 0


# Kernels whose blocks cover more than 8 rows at their smallest parameters: the parameters to
# use and the rows one block covers (the grid test then needs 65536 + 1000 of them).
GRID_LARGE_BLOCKS = {"regtile": ({"dims": 1}, 64), "fast": ({"config": 3}, 64),
                     "wmma": ({"precision": 1}, 32)}


@pytest.mark.parametrize("kernel", MATMUL_KERNELS)
def test_grid_larger_than_grid_dimension_limit(backend, rng, kernel):
    # 600000 rows (or columns) in 8-wide blocks need 75000 blocks: more than gridDim.y's 65535
    # whichever dimension a kernel maps to y, so its launcher must loop around the kernel
    # (lecture 003) for the tall or for the wide problem.
    skip_unsupported(backend, kernel)
    params = {p.name: min(p.values) for p in SPECS[kernel].params}
    rows = 600000
    cases = ("tall", "wide")
    if kernel in GRID_LARGE_BLOCKS:
        if backend == "emu":  # 65536 blocks of 128-512 fibers: ~30 s on a CI-class CPU
            pytest.skip(f"{kernel}: the row-chunk loop is run on cuda (emu: too slow)")
        params, rows_per_block = GRID_LARGE_BLOCKS[kernel]
        rows, cases = (65535 + 1000) * rows_per_block, ("tall",)  # these map M to y
    problems = {"tall": (random_matrix(rng, (rows, 4)), random_matrix(rng, (4, 4))),
                "wide": (random_matrix(rng, (4, 4)), random_matrix(rng, (4, rows)))}
    launches = []
    for A, B in (problems[c] for c in cases):
        res = tm.matmul(A, B, kernel=kernel, backend=backend, **params)
        assert_matmul_close(res.out, A, B, kernel=kernel)
        assert res.launch.grid[1] <= 65535
        launches.append(res.launch.launches)
    if kernel not in CUDA_ONLY:  # cuBLAS makes its own grids, in one call
        assert max(launches) >= 2


@pytest.mark.parametrize("kernel", MATMUL_KERNELS)
def test_nan_and_inf_propagate_like_numpy(backend, rng, kernel):
    skip_unsupported(backend, kernel)
    A, B = random_matrix(rng, (9, 6)), random_matrix(rng, (6, 11))
    A[2, 3] = np.nan
    A[5, 0] = np.inf
    B[1, 7] = -np.inf
    C = tm.matmul(A, B, kernel=kernel, backend=backend).out
    assert_matmul_close(C, A, B, kernel=kernel)
    assert np.isnan(C[2]).all()


def test_inputs_are_not_modified(backend, rng):
    A, B = random_matrix(rng, (10, 12)), random_matrix(rng, (12, 7))
    A0, B0 = A.copy(), B.copy()
    tm.matmul(A, B, backend=backend)
    assert np.array_equal(A, A0) and np.array_equal(B, B0)


def test_larger_square_all_tiles(backend, rng):
    n = 96 if backend == "emu" else 1000
    A, B = random_matrix(rng, (n, n)), random_matrix(rng, (n, n))
    for tile in (8, 16, 32):
        assert_matmul_close(tm.matmul(A, B, kernel="tiled", tile=tile, backend=backend).out, A, B)


@pytest.mark.parametrize("kernel,params", list(kernel_param_cases()))
def test_exact_on_small_integers(backend, rng, kernel, params):
    skip_unsupported(backend, kernel)
    # |partial sums| <= K * 64 < 2**24: every order of additions gives the exact result, so an
    # element read twice, skipped or taken from the wrong place cannot hide in a tolerance.
    M, N, K = 37, 45, 71
    A, B = exact_integer_matrix(rng, (M, K)), exact_integer_matrix(rng, (K, N))
    C = tm.matmul(A, B, kernel=kernel, backend=backend, **params).out
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


# fast's cp.async configs (6: B by cp.async; 7: CUTLASS's SIMT structure, both operands by
# cp.async into 4 stages, the partial K step first): whole and partial 128 x 256 tiles, K not a
# multiple of 8 or 32, N not a multiple of 4 (4-byte copies of B), K = 1 and a single row.
CP_ASYNC_SHAPES = [(128, 256, 64), (257, 513, 97), (130, 250, 13), (1, 260, 5), (300, 7, 1),
                   (64, 1030, 17), (200, 3, 40), (129, 257, 8)]


@pytest.mark.parametrize("config", [6, 7])
@pytest.mark.parametrize("M,N,K", CP_ASYNC_SHAPES, ids=str)
def test_fast_cp_async_configs_exact_on_every_edge(backend, rng, config, M, N, K):
    A, B = exact_integer_matrix(rng, (M, K)), exact_integer_matrix(rng, (K, N))
    C = tm.matmul(A, B, kernel="fast", backend=backend, config=config).out
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


@pytest.mark.parametrize("config", [6, 7])
def test_fast_cp_async_configs_on_misaligned_views(backend, rng, config):
    # rows a multiple of 4 long but starting 1 element into their buffer (the glue copies the
    # strided view; B's 260 columns take the 16-byte copies, N = 261 in the shapes above not)
    big = exact_integer_matrix(rng, (131, 65))
    A, B = big[:, 1:], exact_integer_matrix(rng, (64, 260))
    C = tm.matmul(A, B, kernel="fast", backend=backend, config=config).out
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


def test_cutlass_is_a_cuda_only_float32_reference():
    spec = SPECS["cutlass"]
    assert spec.dtypes == ("float32",) and spec.params == ()
    assert "cutlass" in tm._registry.CUDA_ONLY


def test_cutlass_on_emu_says_it_runs_on_cuda_only(rng):
    A, B = random_matrix(rng, (4, 3)), random_matrix(rng, (3, 5))
    with pytest.raises(RuntimeError, match="cuda backend only"):
        tm.matmul(A, B, kernel="cutlass", backend="emu")
