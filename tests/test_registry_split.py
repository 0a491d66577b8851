"""The registry's kernels split at their barriers on emu (issue 34): setup.py runs
tiledmm/toolchain/split/transform.registry_source over cuda/*.cu, and tm_launch takes the thread
loops for the instances it made. Which kernels take them, that `res.launch.path` says so, and
that their results equal the fibers' (TILEDMM_EMU_SPLIT=0) bit for bit and NumPy's (float64,
tolerance growing with K).

Every launch here is a registry kernel on small problems; the emulator's own launch checks
bound them (no kernel here loops on data)."""
import os

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.toolchain.split.transform import registry_source
from tiledmm.toolchain.source import cindex

pytestmark = pytest.mark.skipif(cindex() is None, reason="libclang is not importable here")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MATMUL_SPLIT = [("tiled", {"tile": 8}), ("tiled", {"tile": 16}), ("tiled", {"tile": 32}),
                ("naive", {"block": 16}), ("naive_uncoalesced", {"block": 16}),
                ("colmajor_b", {"corner": 1, "tile": 16}), ("colmajor_b", {"corner": 0, "tile": 16}),
                ("regtile", {"dims": 1}), ("regtile", {"dims": 2}),
                ("coarse", {"coarsen": 4, "tile": 16}), ("coarse", {"coarsen": 8, "tile": 8})]
REDUCE_SPLIT = ["per_level", "single_block", "multi_pass", "shared", "vectorized"]
# the reduce_steps ladder: barriers under `if (STEP == ...)` (a template parameter: uniform),
# a helper reading threadIdx (load_per_thread)
STEPS_SPLIT = ["interleaved_divergent", "interleaved_bank_conflicts", "sequential", "first_add"]
# a lambda (fast), tm_block_sum's result declared const from a nested call (shuffle): fibers
KEEP_FIBERS = [("matmul", "fast"), ("reduce", "shuffle")]


def _both_paths(call):
    """(result on the thread loops, result on fibers) of the same call."""
    split = call()
    os.environ["TILEDMM_EMU_SPLIT"] = "0"
    try:
        fibers = call()
    finally:
        del os.environ["TILEDMM_EMU_SPLIT"]
    return split, fibers


@pytest.mark.parametrize("kernel,params", MATMUL_SPLIT)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n,k", [(37, 53, 29), (64, 16, 100)])
def test_matmul_kernels_run_as_thread_loops_with_the_fibers_bits(kernel, params, dtype, m, n, k):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    A = rng.standard_normal((m, k)).astype(dtype)
    B = rng.standard_normal((k, n)).astype(dtype)
    split, fibers = _both_paths(lambda: tm.matmul(A, B, kernel=kernel, backend="emu", warmup=0,
                                                  repeat=1, **params))
    assert split.launch.path == "thread loops" and fibers.launch.path == "fibers"
    # the runtime's reason for refusing the split (emu/cuda_emu.h tm_emu_launch_pair)
    assert (split.launch.path_reason, fibers.launch.path_reason) == ("", "TILEDMM_EMU_SPLIT=0")
    np.testing.assert_array_equal(split.out, fibers.out)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(split.out, ref, rtol=0, atol=4 * eps * k * np.abs(ref).max() + eps)


@pytest.mark.parametrize("kernel", REDUCE_SPLIT)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 1000, 70001])
def test_reductions_run_as_thread_loops_with_the_fibers_bits(kernel, dtype, n):
    x = np.random.default_rng(n).standard_normal(n).astype(dtype)
    split, fibers = _both_paths(lambda: tm.reduce(x, kernel=kernel, backend="emu", warmup=0,
                                                  repeat=1))
    assert split.launch.path == "thread loops" and fibers.launch.path == "fibers"
    assert split.out.tobytes() == fibers.out.tobytes()
    ref = x.astype(np.float64).sum()
    assert abs(float(split.out) - ref) <= 1e-6 * np.log2(n + 1) * np.abs(x).sum() + 1e-6


@pytest.mark.parametrize("kernel", STEPS_SPLIT)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,block", [(1, 128), (1000, 256), (70001, 128), (100003, 512)])
def test_reduce_steps_run_as_thread_loops_with_the_fibers_bits(kernel, dtype, n, block):
    x = np.random.default_rng(n + block).standard_normal(n).astype(dtype)
    split, fibers = _both_paths(lambda: tm.reduce(x, kernel=kernel, block=block, backend="emu",
                                                  warmup=0, repeat=1))
    assert split.launch.path == "thread loops" and fibers.launch.path == "fibers"
    assert split.out.tobytes() == fibers.out.tobytes()
    ref = x.astype(np.float64).sum()
    eps = np.finfo(dtype).eps
    assert abs(float(split.out) - ref) <= 4 * eps * np.log2(n + 1) * np.abs(x).sum() + eps


@pytest.mark.parametrize("kernel,params", [("unroll_last_warp", {}),
                                           ("multi_element", {"per_thread": 4}),
                                           ("multi_element", {"per_thread": 2})])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,block", [(1, 128), (1000, 256), (30001, 128), (100003, 512),
                                     (300007, 1024)])
def test_reduce_steps_reaching_the_last_warp_split_at_warp_granularity(kernel, params, dtype, n,
                                                                        block):
    """STEP 4 and 5: `if (tid < 32) last_warp_sum(partial, tid);` (the helper inlined, its
    __syncwarp()s splitting the last warp's stretches) take the thread loops, with the fibers'
    bits."""
    x = np.random.default_rng(n + block).standard_normal(n).astype(dtype)
    split, fibers = _both_paths(lambda: tm.reduce(x, kernel=kernel, block=block, backend="emu",
                                                  warmup=0, repeat=1, **params))
    assert split.launch.path == "thread loops" and fibers.launch.path == "fibers"
    assert split.out.tobytes() == fibers.out.tobytes()
    eps = np.finfo(dtype).eps
    assert abs(float(split.out) - x.astype(np.float64).sum()) <= \
        4 * eps * np.log2(n + 1) * np.abs(x).sum() + eps


@pytest.mark.parametrize("workers", [2, 3])
def test_many_small_blocks_each_run_once_in_chunks(workers):
    """Blocks go to the workers in chunks (scheduler.cpp, issue 46: grid / (64 x workers) per
    grab): 8,193 blocks, a last chunk short, every element written once and right."""
    from tiledmm import _emu
    before = _emu.threads()
    _emu.threads(workers)
    try:
        rng = np.random.default_rng(workers)
        n = 8192 * 128 + 5
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        res = tm.vec_add(x, y, block=128, backend="emu", warmup=0, repeat=1)
    finally:
        _emu.threads(before)
    assert res.launch.path == "thread loops"
    np.testing.assert_array_equal(res.out, x + y)


@pytest.fixture
def one_emu_thread():
    """Blocks in order on one OS thread: `atomic`'s per-block atomicAdds then come in one order
    on both paths (several threads add them in any order, as a GPU does)."""
    from tiledmm import _emu
    before = _emu.threads()
    _emu.threads(1)
    yield
    _emu.threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,block", [(1, 128), (17, 128), (31, 256), (1000, 256),
                                     (70001, 128), (100003, 1024), (4099, 512), (33, 1024)])
def test_atomic_runs_as_thread_loops_with_the_fibers_bits(one_emu_thread, dtype, n, block):
    """`atomic`: a grid-stride loop (rounds), tm_block_sum from reduce_common.h inlined (its
    __syncthreads, tm_warp_sum's shuffles, the `if (warp == 0)` at warp granularity), one
    atomicAdd per block. n < 32, and blocks with more warps than data (the registry allows
    blocks of 128-1024 threads)."""
    x = np.random.default_rng(n + block).standard_normal(n).astype(dtype)
    split, fibers = _both_paths(lambda: tm.reduce(x, kernel="atomic", block=block,
                                                  backend="emu", warmup=0, repeat=1))
    assert split.launch.path == "thread loops", split.launch.path_reason
    assert fibers.launch.path == "fibers"
    assert split.out.tobytes() == fibers.out.tobytes()
    eps = np.finfo(dtype).eps
    assert abs(float(split.out) - x.astype(np.float64).sum()) <= \
        4 * eps * np.log2(n + 1) * np.abs(x).sum() + eps


def test_atomic_registry_source_inlines_the_header_helpers():
    text, reasons = registry_source(open(os.path.join(ROOT, "cuda", "reduce_atomic.cu")).read(),
                                    "cuda/reduce_atomic.cu")
    assert reasons["reduce_atomic_kernel"] == ""
    assert text.count("tm_emu::split_shfl(tm_emu::OP_SHFL_DOWN") == 2   # two tm_warp_sums
    assert "tm_wp_0_[tm_row_ + tm_x_] = (tm_wl0_warp == 0);" in text   # the helper's warp
    assert "for (bool tm_more_" in text   # the grid-stride loop as rounds


@pytest.mark.parametrize("family,kernel", KEEP_FIBERS)
def test_kernels_the_transform_refuses_keep_the_fibers(family, kernel):
    rng = np.random.default_rng(7)
    if family == "matmul":
        A, B = (rng.standard_normal((40, 40)).astype(np.float32) for _ in range(2))
        res = tm.matmul(A, B, kernel=kernel, backend="emu", warmup=0, repeat=1)
        ref = A.astype(np.float64) @ B.astype(np.float64)
        np.testing.assert_allclose(res.out, ref, rtol=0, atol=1e-5 * 40 * np.abs(ref).max())
    else:
        x = rng.standard_normal(5000).astype(np.float32)
        res = tm.reduce(x, kernel=kernel, backend="emu", warmup=0, repeat=1)
        assert abs(float(res.out) - x.astype(np.float64).sum()) <= 1e-4 * np.abs(x).sum()
    assert res.launch.path == "fibers"


def test_profile_counts_come_from_the_fibers_build_on_either_path():
    """profile=True counts in tiledmm._emu_profile, built without the split (its counts are
    the fibers' own); the timed launch beside it may take the thread loops."""
    A = np.random.default_rng(3).standard_normal((48, 40)).astype(np.float32)
    split, fibers = _both_paths(lambda: tm.matmul(A, A.T.copy(), kernel="tiled", tile=16,
                                                  backend="emu", profile=True, warmup=0,
                                                  repeat=1))
    assert split.launch.path == "thread loops" and fibers.launch.path == "fibers"
    assert repr(split.profile) == repr(fibers.profile) and "global" in repr(split.profile)


def _reasons(path):
    with open(os.path.join(ROOT, path)) as f:
        return registry_source(f.read(), path)[1]


def test_registry_source_splits_the_tiled_template_and_names_each_instance():
    with open(os.path.join(ROOT, "cuda", "matmul_tiled.cu")) as f:
        text, reasons = registry_source(f.read(), "cuda/matmul_tiled.cu")
    assert reasons == {"matmul_tiled_kernel": ""}
    assert "template <typename T, int TILE, typename Index> TM_SPLIT_TARGETS static void " \
           "tm_split_matmul_tiled_kernel(" in text
    assert "tm_with_split_matmul_tiled_kernel = tm_emu_split_kernel<decltype(" \
           "&matmul_tiled_kernel<T, TILE, Index>)>{&matmul_tiled_kernel<T, TILE, Index>, " \
           "&tm_split_matmul_tiled_kernel<T, TILE, Index>" in text
    assert text.startswith('#line 1 "cuda/matmul_tiled.cu"')


@pytest.mark.parametrize("path,kernel,reason", [
    ("cuda/reduce_shuffle.cu", "reduce_shuffle_kernel", "tm_block_sum"),
])
def test_registry_source_says_why_a_kernel_keeps_the_fibers(path, kernel, reason):
    assert reason in _reasons(path)[kernel]


WARP_HELPER = r"""
template <typename T> __device__ T lane_sum(T v)
{
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
template <typename T>
__global__ void k(const T *x, T *out)
{
    __shared__ T s[32];
    s[threadIdx.x % 32] = x[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = lane_sum(s[threadIdx.x % 32]);
}
"""


def test_a_dependent_call_of_a_helper_with_shuffles_keeps_the_fibers():
    text, reasons = registry_source(WARP_HELPER, "cuda/x.cu")
    assert "__shfl_down_sync" in reasons["k"] and "tm_split_k" not in text


def test_registry_source_splits_every_step_and_the_last_warp_at_its_syncwarps():
    """reduce_steps: the split is a template over STEP, every instance takes it (no guard);
    last_warp_sum is inlined into the split (its parameters renamed) and its __syncwarp()s end
    the stretches of the warp `if`."""
    with open(os.path.join(ROOT, "cuda", "reduce_steps.cu")) as f:
        source = f.read()
    text, reasons = registry_source(source, "cuda/reduce_steps.cu")
    lines = source.splitlines()
    first_syncwarp = next(i for i, ln in enumerate(lines, 1) if "__syncwarp();" in ln)
    call = next(i for i, ln in enumerate(lines, 1) if "last_warp_sum(partial, tid);" in ln)
    assert reasons["reduce_step_kernel"] == ""
    assert "if constexpr" not in text and "tm_pick_split_" not in text
    assert "if (STEP == STEP_SEQUENTIAL || STEP == STEP_FIRST_ADD) {\nfor (unsigned half" in text
    assert "tm_wp_0_[tm_row_ + tm_x_] = (tid < 32);" in text
    assert text.count(f"/* __syncwarp() line {call} */") == 11
    assert f'tm_emu::split_warp_stuck("cuda/reduce_steps.cu", {first_syncwarp},' in text


def test_per_thread_arrays_of_template_dependent_size_are_declared_from_their_type():
    """regtile's `T acc[TM][TN]` live across barriers: one T[TM][TN] per thread, sized by
    sizeof of the type in each instance; its k-step loop nest stays inside the thread loop."""
    with open(os.path.join(ROOT, "cuda", "matmul_regtile.cu")) as f:
        text, reasons = registry_source(f.read(), "cuda/matmul_regtile.cu")
    assert reasons == {"matmul_regtile_kernel": ""}
    frame = text[text.index("constexpr size_t tm_split_frame_matmul_regtile_kernel = "):]
    assert "sizeof(std::remove_cv_t<T[TM][TN]>)" in frame[:frame.index(";")]
    assert "std::remove_cv_t<T[TM][TN]> tm_pt_acc_" in text and "tm_pt_a_" not in text
