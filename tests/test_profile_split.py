"""Profile mode on kernels split at their barriers (issue 34): the profile build compiles the
registry's reduction and element-wise files split (setup.py's PROFILE_SPLIT_FILES, unless built with
TILEDMM_PROFILE_SPLIT=0) with the hooks of emu/profile/split_hooks.h, and runs their kernels as
thread loops. Its counts must be the fibers' own, counter by counter: the same build counts each
case twice, once on the thread loops and once on the fibers (TILEDMM_EMU_SPLIT=0, read at each
launch). A build made with TILEDMM_PROFILE_SPLIT=0 fails here: set TILEDMM_PROFILE_SPLIT_OFF_OK=1
to skip instead."""
import ctypes
import faulthandler
import os

import numpy as np
import pytest

from tiledmm import profile as tmprof

try:
    from tiledmm import _emu_profile
except ImportError:   # TILEDMM_NO_PROFILE=1 builds: every test here is skipped
    _emu_profile = None

pytestmark = pytest.mark.skipif(not tmprof.available(),
                                reason="tiledmm._emu_profile not built (TILEDMM_NO_PROFILE=1?)")

TIME_LIMIT_S = 120   # each case counts twice at sizes that take well under a second


def split_stat(name):
    """tm_profile_split_launches: profiled launches the profile build ran as thread loops so
    far; tm_profile_split_uncounted: intervals in which such a launch accessed counted memory
    outside any thread's turn (lost counts); tm_profile_split_misplaced: turns whose end did not
    find the thread loop's own block last in the trace (a path with a block too many)."""
    fn = getattr(ctypes.CDLL(_emu_profile.__file__), name)
    fn.restype = ctypes.c_longlong
    return fn()


def counts(family, kernel, inputs, params, split):
    old = os.environ.get("TILEDMM_EMU_SPLIT")
    os.environ["TILEDMM_EMU_SPLIT"] = "1" if split else "0"
    try:
        return tmprof.count(family, kernel, *inputs, **params).as_dict()
    finally:
        if old is None:
            del os.environ["TILEDMM_EMU_SPLIT"]
        else:
            os.environ["TILEDMM_EMU_SPLIT"] = old


CASES = [   # odd sizes: partial last blocks; several block sizes (4 to 32 warps)
    ("sequential", {"block": 256}, 70001),
    ("sequential", {"block": 128}, 5003),
    ("interleaved_divergent", {"block": 128}, 9999),
    ("interleaved_divergent", {"block": 1024}, 33333),
    ("interleaved_bank_conflicts", {"block": 1024}, 7777),
    ("first_add", {"block": 512}, 40001),
    ("multi_pass", {"block": 256}, 70001),
    ("shared", {"block": 128}, 12345),
    ("single_block", {"block": 512}, 20000),
    ("per_level", {"block": 256}, 30011),
    ("demo_wrong_block_sync", {"block": 256}, 20001),
    # warp granularity: the last warp's __syncwarp()s (split_hooks.h's TM_SPLIT_WARP_SYNC)
    ("unroll_last_warp", {"block": 256}, 70001),
    ("unroll_last_warp", {"block": 128}, 4099),
    ("multi_element", {"block": 128, "per_thread": 4}, 50001),
    # no barrier: a whole block is one thread loop (cuda/elementwise.cu)
    ("vec_add", {"block": 128}, 70001),
    ("mat_add", {"block": 8}, (333, 517)),
    ("mat_add", {"block": 32}, (100, 1000)),
]
NO_BARRIER = {"per_level", "vec_add", "mat_add"}   # per_level: a return, no barrier


@pytest.mark.parametrize("kernel,params,n", CASES)
def test_split_counts_are_the_fibers(kernel, params, n):
    faulthandler.dump_traceback_later(TIME_LIMIT_S, exit=True)
    try:
        rng = np.random.default_rng(np.prod(n))
        family = "elementwise" if kernel in ("vec_add", "mat_add") else "reduce"
        inputs = [rng.standard_normal(n).astype(np.float32)
                  for _ in range(2 if family == "elementwise" else 1)]
        before = split_stat("tm_profile_split_launches")
        lost = split_stat("tm_profile_split_uncounted")
        misplaced = split_stat("tm_profile_split_misplaced")
        split = counts(family, kernel, inputs, params, True)
        assert split_stat("tm_profile_split_uncounted") == lost
        assert split_stat("tm_profile_split_misplaced") == misplaced
        if split_stat("tm_profile_split_launches") == before:
            if os.environ.get("TILEDMM_PROFILE_SPLIT_OFF_OK") == "1":
                pytest.skip(f"{kernel}: the profile build runs it on fibers")
            pytest.fail(f"{kernel}: the profile build ran it on fibers (built with "
                        "TILEDMM_PROFILE_SPLIT=0? rebuild without it)")
        fibers = counts(family, kernel, inputs, params, False)
        assert fibers["launches"] > 0
        assert fibers["barriers"] > 0 or kernel in NO_BARRIER
        assert fibers["shared_load_requests"] + fibers["global_load_requests"] > 0
        differ = {k: (fibers[k], split[k]) for k in fibers
                  if not (fibers[k] == split[k] or (fibers[k] != fibers[k] and split[k] != split[k]))}
        assert not differ, f"{kernel} {params} n={n}: (fibers, thread loops) differ: {differ}"
    finally:
        faulthandler.cancel_dump_traceback_later()


def _transform():
    """tiledmm.toolchain.split.transform, skipping where it or libclang is not there."""
    barrier_split = pytest.importorskip("tiledmm.toolchain.split.transform")
    if barrier_split.cindex() is None:
        pytest.skip("libclang is not available")
    return barrier_split


def _assert_fibers_in_profile_build(text, name):
    """registry_source's `text` names the kernel's split pair only outside profile builds."""
    at = text.index(f"#define {name} tm_with_split_{name}")
    assert text.rfind("#ifndef TM_PROFILE_SPLIT", 0, at) > text.rfind("#endif", 0, at)


BLOCK_LEVEL_READ = r'''
template <typename T> __global__ void rounds(const T *x, T *y, const int *count) {
    __shared__ T s[256];
    for (int r = 0; r < count[0]; ++r) {   // the loop's header runs once per block: a global load
        s[threadIdx.x] = x[r * blockDim.x + threadIdx.x];
        __syncthreads();
        y[threadIdx.x] += s[blockDim.x - 1 - threadIdx.x];
        __syncthreads();
    }
}'''


def test_block_level_memory_access_keeps_fibers_in_profile_build():
    # The split runs the tile-loop header once per block, in no CUDA thread's turn: its load
    # of count[0] would be counted nowhere, so profile builds (TM_PROFILE_SPLIT) keep the
    # fibers for that kernel; plain builds still take the thread loops.
    barrier_split = _transform()
    plan = barrier_split.split_kernel(BLOCK_LEVEL_READ, "rounds", templates=True)
    assert plan.text is not None, plan.reason
    assert "line 4" in plan.profile_reason
    text, reasons = barrier_split.registry_source(BLOCK_LEVEL_READ, "cuda/rounds.cu")
    assert reasons["rounds"] == ""
    _assert_fibers_in_profile_build(text, "rounds")
    # the same kernel reading its round count from a parameter splits in profile builds too
    by_value = BLOCK_LEVEL_READ.replace("const int *count", "int count").replace("count[0]", "count")
    assert barrier_split.split_kernel(by_value, "rounds", templates=True).profile_reason == ""
    text, _ = barrier_split.registry_source(by_value, "cuda/rounds.cu")
    assert "#ifndef TM_PROFILE_SPLIT" not in text and "#define rounds tm_with_split_rounds" in text


EARLY_RETURN = r'''
template <typename T> __global__ void halves(const T *x, T *y) {
    __shared__ T s[256];
    if (threadIdx.x >= 64) return;   // warps 2..7 leave before the barrier
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = s[63 - threadIdx.x];
}'''


def test_early_return_before_a_barrier_keeps_fibers():
    # On fibers a warp whose threads all returned counts no barrier; the profile's barrier hook
    # (tm_profile_split_barrier) counts one for every thread of the block. That is right only
    # while the transform refuses a return before a barrier: if it ever accepts one, the
    # returning threads must tell the hooks (a TM_SPLIT_* macro at the return's jump) first.
    barrier_split = _transform()
    plan = barrier_split.split_kernel(EARLY_RETURN, "halves", templates=True)
    assert plan.text is None and "return before a barrier" in plan.reason
    after = EARLY_RETURN.replace("    if (threadIdx.x >= 64) return;   // warps 2..7 leave before the barrier\n", "") \
        .replace("y[threadIdx.x] = s", "if (threadIdx.x >= 64) return;\n    y[threadIdx.x] = s")
    assert barrier_split.split_kernel(after, "halves", templates=True).text is not None


SHUFFLE = r'''
template <typename T> __global__ void warp_then_block(const T *x, T *y) {
    __shared__ T s[32];
    T v = x[blockIdx.x * blockDim.x + threadIdx.x];
    v += __shfl_down_sync(0xffffffffu, v, 16);
    if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) y[blockIdx.x] = s[0];
}'''


def test_warp_shuffles_keep_fibers_in_profile_build():
    # Shuffles split at warp granularity in plain builds (tm_emu::split_shfl); the profile's
    # hooks count warp operations on fibers only, so profile builds keep the fibers there.
    barrier_split = _transform()
    plan = barrier_split.split_kernel(SHUFFLE, "warp_then_block", templates=True)
    assert plan.text is not None, plan.reason
    assert "shuffles" in plan.profile_reason
    text, _ = barrier_split.registry_source(SHUFFLE, "cuda/warp_then_block.cu")
    _assert_fibers_in_profile_build(text, "warp_then_block")
