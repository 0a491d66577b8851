"""Every reduction kernel against NumPy's float64 sum, on every backend: all kernels x every
`block` value x lengths around powers of two, primes, 1 and 3, in float32 and float64; NaN and
infinities; any shape, any layout; the lecture's wrong kernel shown wrong where it is wrong;
more than 2^31 elements on the GPU."""
import math

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.testing import assert_sum_close

DEMO = "demo_wrong_block_sync"
SPECS = {k.name: k for k in tm.kernels("reduce")}
CORRECT = [name for name in SPECS if name != DEMO]
BLOCKS = SPECS["shuffle"].params[0].values
LENGTHS = [1, 2, 3, 31, 32, 33, 255, 256, 257, 1000, 4093, 65536, 65537]
GPU_LENGTHS = [10**6]  # too slow for the emulator's per-thread fibers in a test run
DTYPES = [np.float32, np.float64]
FAST = ["shuffle", "vectorized", "atomic"]  # the kernels the > 2^31 test runs


def values(rng, n, dtype):
    """Random in [-1, 1): cancellation makes a lost or doubled element show."""
    return (rng.random(n) * 2 - 1).astype(dtype)


def test_registry_rows():
    assert {"per_level", "single_block", "multi_pass", "shared", "interleaved_divergent",
            "interleaved_bank_conflicts", "sequential", "first_add", "unroll_last_warp",
            "multi_element", "shuffle", "vectorized", "atomic", DEMO} <= set(SPECS)
    for spec in SPECS.values():
        assert spec.dtypes == ("float32", "float64")
        assert spec.params[0].name == "block" and spec.params[0].default == 256
        assert spec.lecture and spec.summary
    assert "WRONG" in SPECS[DEMO].summary


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("n", LENGTHS + GPU_LENGTHS)
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("kernel", CORRECT)
def test_sum(backend, rng, kernel, block, n, dtype):
    if n in GPU_LENGTHS and backend != "cuda":
        pytest.skip("long sums run on the GPU only")
    x = values(rng, n, dtype)
    res = tm.reduce(x, kernel=kernel, block=block, backend=backend, warmup=0, repeat=1)
    assert res.out.shape == () and res.out.dtype == dtype
    assert_sum_close(res.out, x)
    assert res.launch.block == (block, 1, 1) and res.launch.launches >= 1


@pytest.mark.parametrize("per_thread", SPECS["multi_element"].params[1].values)
@pytest.mark.parametrize("n", [1, 257, 4093, 65537])
def test_multi_element_per_thread(backend, rng, per_thread, n):
    x = values(rng, n, np.float32)
    res = tm.reduce(x, kernel="multi_element", per_thread=per_thread, backend=backend)
    assert_sum_close(res.out, x)
    assert res.launch.grid[0] == math.ceil(n / (256 * per_thread))


@pytest.mark.parametrize("kernel", CORRECT)
def test_repeated_launches_agree(backend, rng, kernel):
    """Warm-up and repeats reuse scratch, tickets and the output: every launch is complete."""
    x = values(rng, 70001, np.float64)
    res = tm.reduce(x, kernel=kernel, backend=backend, warmup=2, repeat=3)
    assert_sum_close(res.out, x)
    assert len(res.timing.samples_ms) == 3


def test_default_kernel_is_shuffle(backend, rng):
    x = values(rng, 1000, np.float32)
    res = tm.reduce(x, backend=backend)
    assert res.kernel == "shuffle" and res.launch.launches == 1
    assert_sum_close(res.out, x)
    assert res.gbps > 0 and "GB/s" in repr(res)


@pytest.mark.parametrize("n", [1, 2, 3, 1000, 65537])
def test_launch_counts(backend, n):
    x = np.ones(n, np.float32)
    per_level = tm.reduce(x, kernel="per_level", backend=backend)
    assert per_level.launch.launches == max(1, math.ceil(math.log2(n)))
    multi = tm.reduce(x, kernel="multi_pass", block=128, backend=backend)
    assert multi.launch.launches == max(1, math.ceil(math.log(n, 128) - 1e-9))
    assert float(per_level.out) == float(multi.out) == n


@pytest.mark.parametrize("kernel", SPECS)
def test_empty_is_zero(backend, kernel):
    for dtype in DTYPES:
        res = tm.reduce(np.zeros(0, dtype), kernel=kernel, backend=backend)
        assert float(res.out) == 0.0 and res.out.dtype == dtype


@pytest.mark.parametrize("kernel", CORRECT)
def test_nan_and_inf_propagate(backend, rng, kernel):
    n = 4093
    cases = [({0: np.nan}, "nan"), ({n - 1: np.inf}, np.inf), ({n // 2: -np.inf}, -np.inf),
             ({1: np.inf, n - 2: -np.inf}, "nan")]
    for where, expected in cases:
        x = values(rng, n, np.float32)
        for position, value in where.items():
            x[position] = value
        got = float(tm.reduce(x, kernel=kernel, backend=backend).out)
        assert (np.isnan(got) if expected == "nan" else got == expected), (where, got)


@pytest.mark.parametrize("kernel", ["shuffle", "sequential", "per_level"])
def test_any_shape_is_flattened(backend, rng, kernel):
    for shape in [(), (7, 11, 13), (1, 1, 1, 5), (300, 7)]:
        x = values(rng, shape, np.float64)
        res = tm.reduce(x, kernel=kernel, backend=backend)
        assert res.out.shape == ()
        assert_sum_close(res.out, x)


@pytest.mark.parametrize("kernel", ["shuffle", "vectorized", "unroll_last_warp", "atomic"])
def test_non_contiguous_inputs(backend, rng, kernel):
    base = values(rng, (401, 37), np.float32)
    for x in (base[::3], base[:, 5], base.T, np.asfortranarray(base), base[::-1, ::-2],
              base.ravel()[1:]):
        res = tm.reduce(x, kernel=kernel, backend=backend)
        assert_sum_close(res.out, x)


def test_integers_are_refused(backend):
    with pytest.raises(TypeError, match="float32 or float64"):
        tm.reduce(np.ones(10, np.int64), backend=backend)


@pytest.mark.parametrize("block", BLOCKS)
def test_demo_wrong_block_sync_is_right_in_one_block(backend, rng, block):
    for n in (1, 3, block // 2 + 1, block):
        x = values(rng, n, np.float64)
        assert_sum_close(tm.reduce(x, kernel=DEMO, block=block, backend=backend).out, x)


@pytest.mark.parametrize("block", BLOCKS)
def test_demo_wrong_block_sync_is_wrong_across_blocks(backend, rng, block):
    """The lecture's Idea 2: __syncthreads does not wait for other blocks, so once the tree's
    stride passes blockDim.x a block adds values other blocks have not computed (here: have not
    even loaded, as the grid is far larger than what the device holds at once)."""
    n = (1 << 22) + 1 if backend == "cuda" else 64 * block + 1
    x = (rng.random(n) + 0.5).astype(np.float64)  # all positive: a missing part cannot cancel
    got = float(tm.reduce(x, kernel=DEMO, block=block, backend=backend, warmup=0, repeat=1).out)
    exact = float(x.sum())
    assert abs(got - exact) > 1e-3 * exact, "the block-sync demonstration happened to be right"


def test_above_2_31_elements(backend):
    """More than 2^31 float32 elements: 64-bit indexing everywhere. A repeating random pattern
    of small integers (exact float32 partial sums), so the float64 sum is known blockwise; the
    part past 2^31 holds larger values, so skipping or wrapping it cannot go unnoticed."""
    if backend != "cuda":
        pytest.skip("needs a GPU with > 9 GB of memory")
    n = (1 << 31) + (1 << 20) + 3
    period = (1 << 20) + 7
    pattern = np.random.default_rng(31).integers(0, 4, period).astype(np.float32)
    x = np.resize(pattern, n)
    x[1 << 31:] = 3.0
    full, rest = divmod(1 << 31, period)
    exact = (full * pattern.sum(dtype=np.float64) + pattern[:rest].sum(dtype=np.float64)
             + 3.0 * (n - (1 << 31)))
    for kernel in FAST:
        got = float(tm.reduce(x, kernel=kernel, backend=backend, warmup=0, repeat=1).out)
        assert abs(got - exact) <= 1e-4 * exact, (kernel, got, exact)
