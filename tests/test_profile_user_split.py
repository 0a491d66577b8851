"""profile=True on tm.compile kernels split at their barriers (issue 34): a user kernel's profile
build holds its split (compile_emu._compile_here; barrier-free loops not interchanged there)
where SplitPlan.profile_reason allows, as the registry's reductions do in tiledmm._emu_profile.
Its counts must be the fibers' own, counter by counter: each kernel is counted twice, with
TILEDMM_EMU_SPLIT=1 and =0 (read at each call, a build of its own each). Every launch has a time
limit (TIMEOUT_S)."""
import os

import numpy as np
import pytest

import tiledmm as tm

pytestmark = pytest.mark.skipif(not tm.profile.available(),
                                reason="tiledmm._emu_profile not built (TILEDMM_NO_PROFILE=1?)")

TIMEOUT_S = 120
HERE = os.path.dirname(os.path.abspath(__file__))


def _kernel_file(name):
    with open(os.path.join(HERE, "kernels", name)) as f:
        return f.read()


# A grid-stride loop (rounds on the thread loops), a block sum, one atomic per block.
STRIDE_ATOMIC = r"""
__global__ void stride_sum(const float *x, float *out, long long n)
{
    __shared__ float s[128];
    float v = 0.0f;
    for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v += x[i];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int d = 64; d > 0; d >>= 1) {
        if (threadIdx.x < d) s[threadIdx.x] += s[threadIdx.x + d];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
"""

# The tile loop's bound read from memory once per block: block-level code that may touch
# counted memory, which profile mode keeps on fibers (SplitPlan.profile_reason).
BLOCK_LEVEL_READ = r"""
__global__ void rounds(const float *x, float *y, const int *count)
{
    __shared__ float s[64];
    for (int r = 0; r < count[0]; ++r) {
        s[threadIdx.x] = x[r * blockDim.x + threadIdx.x];
        __syncthreads();
        y[r * blockDim.x + threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
        __syncthreads();
    }
}
"""


def _rng(seed):
    return np.random.default_rng(seed)


def _tiled():
    m, n, k = 37, 45, 29   # none a multiple of the tile: partial tiles and idle threads
    a, b = _rng(1).standard_normal((m, k), np.float32), _rng(2).standard_normal((k, n), np.float32)
    return (((n + 15) // 16, (m + 15) // 16), (16, 16),
            [a, b, np.zeros((m, n), np.float32), m, n, k])


def _tree():
    n = 5003
    return ((n + 255) // 256, 256, [_rng(3).standard_normal(n, np.float32),
                                    np.zeros((n + 255) // 256, np.float32), n])


def _last_warp():
    n = 3001
    return ((n + 255) // 256, 256, [_rng(4).standard_normal(n, np.float32),
                                    np.zeros((n + 255) // 256, np.float32), n])


def _stride():
    n = 40009
    return (7, 128, [_rng(5).standard_normal(n, np.float32), np.zeros(1, np.float32), n])


def _block_level_read():
    return (1, 64, [_rng(6).standard_normal(3 * 64, np.float32), np.zeros(3 * 64, np.float32),
                    np.array([3], np.int32)])


CASES = [   # (source, kernel, launch, path of the profile build)
    pytest.param(_kernel_file("tiled16.cu"), "tiled", _tiled, "thread loops", id="tiled16"),
    pytest.param(_kernel_file("tree256.cu"), "tree", _tree, "thread loops", id="tree"),
    pytest.param(_kernel_file("last_warp.cu").replace("LANES", "32"), "tail_sum", _last_warp,
                 "thread loops", id="last_warp"),
    pytest.param(STRIDE_ATOMIC, "stride_sum", _stride, "thread loops", id="grid_stride_atomic"),
    pytest.param(BLOCK_LEVEL_READ, "rounds", _block_level_read, "fibers",
                 id="block_level_read"),
]


def _counts(source, name, launch, split):
    old = os.environ.get("TILEDMM_EMU_SPLIT")
    os.environ["TILEDMM_EMU_SPLIT"] = "1" if split else "0"
    try:
        kernel = tm.compile(source, name, backend="emu")
        grid, block, args = launch()
        res = kernel(grid, block, *args, profile=True, warmup=0, repeat=1, timeout=TIMEOUT_S)
        build = kernel._compiled("emu", False, profile=True).split
        counts = {k: v for k, v in res.profile.as_dict().items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return counts, build
    finally:
        if old is None:
            del os.environ["TILEDMM_EMU_SPLIT"]
        else:
            os.environ["TILEDMM_EMU_SPLIT"] = old


@pytest.mark.parametrize("source,name,launch,path", CASES)
def test_a_user_kernels_split_profile_counts_as_its_fibers(source, name, launch, path):
    split, build = _counts(source, name, launch, True)
    assert build["path"] == path, build
    if path == "fibers":
        assert build["reason"].startswith("profile mode: "), build
    fibers, fibers_build = _counts(source, name, launch, False)
    assert fibers_build["path"] == "fibers"
    assert fibers["launches"] == 1 and fibers["barriers"] > 0
    assert fibers["global_load_requests"] > 0 and fibers["shared_load_requests"] > 0
    differ = {k: (fibers[k], split[k]) for k in fibers
              if not (fibers[k] == split[k] or (fibers[k] != fibers[k] and split[k] != split[k]))}
    assert not differ, f"{name}: (fibers, thread loops) differ: {differ}"
