"""profile=True on tm.compile kernels (emu): the student's kernel is counted by its own profile
build exactly as registry kernels are (tiledmm/_profile_build.py), isolated or in process."""
import ast
import os
import runpy

import numpy as np
import pytest

import tiledmm as tm
from tiledmm import _profile_build

pytestmark = pytest.mark.skipif(not tm.profile.available(),
                                reason="tiledmm._emu_profile not built (TILEDMM_NO_PROFILE=1?)")
ISOLATE = [pytest.param(True, id="isolated"), pytest.param(False, id="in_process")]

GATHER = r'''
__global__ void gather(const float *x, float *y, int n, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[(i * stride) % n];
}'''


@pytest.mark.parametrize("isolate", ISOLATE)
def test_coalesced_and_strided_loads(isolate):
    # 1,024 threads = 32 warps, one load and one store each. Stride 1: a warp reads 128
    # contiguous bytes (4 sectors). Stride 32: lane l reads x[32 l mod 1024], 128 bytes apart,
    # 32 sectors. The stores are coalesced in both: 4 sectors.
    k = tm.compile(GATHER, backend="emu", isolate=isolate)
    x = np.random.default_rng(3).standard_normal(1024).astype(np.float32)
    for stride, sectors in ((1, 128), (32, 1024)):
        y = np.full_like(x, np.nan)
        p = k(8, 128, x, y, 1024, stride, profile=True).profile
        assert (p.global_load_requests, p.global_load_sectors) == (32, sectors)
        assert (p.global_store_requests, p.global_store_sectors) == (32, 128)
        assert p.launches == 1 and p.source == "emu" and p.kernel == "gather"
        np.testing.assert_array_equal(y, x[(np.arange(1024) * stride) % 1024])


@pytest.mark.parametrize("isolate", ISOLATE)
def test_two_way_bank_conflict(isolate):
    # One warp: s[tid] (one word per bank) then s[2 tid mod 64]: words 0, 2, ..., 62 put two
    # different words in each even bank: 2 wavefronts, 1 conflict, in one load request.
    src = r'''
    __global__ void pairs(const float *x, float *y) {
        __shared__ float s[64];
        s[threadIdx.x] = x[threadIdx.x];
        s[threadIdx.x + 32] = -x[threadIdx.x];
        __syncthreads();
        y[threadIdx.x] = s[(2 * threadIdx.x) % 64];
    }'''
    x = np.arange(1, 33, dtype=np.float32)
    y = np.zeros(32, np.float32)
    p = tm.compile(src, backend="emu", isolate=isolate)(1, 32, x, y, profile=True).profile
    assert (p.shared_store_requests, p.shared_store_bank_conflicts) == (2, 0)
    assert (p.shared_load_requests, p.shared_load_bank_conflicts) == (1, 1)
    np.testing.assert_array_equal(y[:16], x[0:32:2])


@pytest.mark.parametrize("isolate", ISOLATE)
def test_a_students_naive_matmul_counts_as_the_registry_kernel(isolate):
    src = r'''
    __global__ void mm(const float *A, const float *B, float *C, int M, int N, int K) {
        int row = blockIdx.y * blockDim.y + threadIdx.y;
        int col = blockIdx.x * blockDim.x + threadIdx.x;
        if (row >= M || col >= N) return;
        float sum = 0;
        for (int k = 0; k < K; ++k) sum += A[row * K + k] * B[k * N + col];
        C[row * N + col] = sum;
    }'''
    rng = np.random.default_rng(5)
    M, N, K = 48, 40, 24
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C = np.zeros((M, N), np.float32)
    # cuda/matmul_naive.cu: row from y, col from x, block (16, 16), grid (ceil(N/16), ceil(M/16))
    mine = tm.compile(src, backend="emu", isolate=isolate)(
        (3, 3), (16, 16), A, B, C, M, N, K, profile=True, flops=2 * M * N * K).profile
    theirs = tm.profile.count("matmul", "naive", A, B, block=16)
    for counter in ("global_load_requests", "global_load_sectors", "global_store_requests",
                    "global_store_sectors", "divergent_branches"):
        assert getattr(mine, counter) == getattr(theirs, counter), counter
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    assert mine.predict("H100").ms > 0


def test_counting_does_not_run_an_accumulating_kernel_twice_on_the_outputs():
    src = r'''
    __global__ void accumulate(const float *x, float *y) { y[threadIdx.x] += x[threadIdx.x]; }'''
    x = np.arange(32, dtype=np.float32)
    y = np.ones(32, np.float32)
    tm.compile(src, backend="emu")(1, 32, x, y, profile=True)
    np.testing.assert_array_equal(y, 1 + x)


def test_refusals():
    k = tm.compile(GATHER, backend="emu")
    x = np.arange(32, dtype=np.float32)
    with pytest.raises(ValueError, match="check=True"):
        k(1, 32, x, x.copy(), 32, 1, profile=True, check=True)
    with pytest.raises(RuntimeError, match="emu backend|not built|no CUDA"):
        k(1, 32, x, x.copy(), 32, 1, profile=True, backend="cuda")


def test_setup_builds_with_the_same_profile_flags():
    # setup.py reads tiledmm/_profile_build.py, so registry and user kernels are counted alike.
    setup = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")
    text = open(setup).read()
    assert '"tiledmm", "_profile_build.py"' in text and "PROFILE_KERNEL_FLAGS = [" not in text
    assert "-fno-tree-sra" in _profile_build.PROFILE_KERNEL_FLAGS
    assert runpy.run_path(_profile_build.__file__)["PROFILE_WRAPPED"] == \
        _profile_build.PROFILE_WRAPPED


REDUCE = r"""
__global__ void block_sum(const float *x, float *out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = 1; stride < blockDim.x; stride *= 2) {
        if (t % (2 * stride) == 0) s[t] += s[t + stride];   // divergent
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, s[0]);
}"""


def _counters(p):
    return {k: v for k, v in p.as_dict().items() if k not in ("params", "hardware")}


def test_same_counts_isolated_and_in_process():
    x = np.random.default_rng(7).standard_normal(1000).astype(np.float32)
    profiles = []
    for isolate in (True, False):
        out = np.zeros(1, np.float32)
        res = tm.compile(REDUCE, backend="emu", isolate=isolate)(4, 256, x, out, x.size,
                                                                 profile=True, flops=x.size)
        np.testing.assert_allclose(out[0], x.sum(dtype=np.float64), rtol=1e-4)
        profiles.append(res.profile)
    isolated, in_process = map(_counters, profiles)
    assert isolated == in_process
    p = profiles[0]
    # 4 blocks of 8 warps: one coalesced load each (1,000 floats: the last warp's 8 lanes in
    # range, x[992..999], read 1 sector); 9 barriers per warp (one, then stride 1..128).
    assert (p.global_load_requests, p.global_load_sectors) == (32, 4 * 31 + 1)
    assert p.barriers == 4 * 8 * 9 and p.global_atomics == 4
    # A warp's requests for one stride, if any lane of it is active: two loads and a store.
    # Strides 1..16 leave lanes active in all 8 warps, 32 in warps 0,2,4,6, 64 in 0,4, 128 in
    # 0: 47 per block, plus s[0] read by thread 0 and the 8 first stores. Consecutive words
    # (half of them skipped): no bank conflicts.
    assert (p.shared_load_requests, p.shared_store_requests) == (4 * (2 * 47 + 1), 4 * (47 + 8))
    assert p.shared_load_bank_conflicts == 0 and p.divergent_branches > 0


def test_predict_needs_flops_and_takes_min_bytes():
    k = tm.compile(GATHER, backend="emu")
    x = np.arange(256, dtype=np.float32)
    y = np.zeros_like(x)
    res = k(2, 128, x, y, 256, 1, profile=True)
    assert res.profile.global_load_requests == 8          # counted all the same
    with pytest.raises(ValueError, match="flops="):
        res.profile.predict("H100")
    with pytest.raises(ValueError, match="flops="):
        tm.model.compare(res)
    res = k(2, 128, x, y, 256, 1, profile=True, flops=0)
    assert res.profile.min_bytes == res.min_bytes == 2 * x.nbytes
    fast = res.profile.predict("H100").ms
    res = k(2, 128, x, y, 256, 1, profile=True, flops=0, min_bytes=1 << 30)
    assert res.profile.min_bytes == res.min_bytes == 1 << 30
    assert res.profile.predict("H100").ms > 10 * fast    # a GiB of DRAM traffic dominates
    for bad in (-1, "10", True):
        with pytest.raises(ValueError, match="flops"):
            k(2, 128, x, y, 256, 1, profile=True, flops=bad)
        with pytest.raises(ValueError, match="min_bytes"):
            k(2, 128, x, y, 256, 1, profile=True, flops=0, min_bytes=bad)


def test_device_array_arguments_are_counted_on_copies():
    k = tm.compile(GATHER, backend="emu")
    x = np.arange(64, dtype=np.float32) * 3 + 1
    dx, dy = tm.to_device(x, "emu"), tm.to_device(np.zeros_like(x), "emu")
    p = k(1, 64, dx, dy, 64, 2, profile=True).profile
    # stride 2: lanes 0..15 read x[0..30] (4 sectors), lanes 16..31 x[32..62] (4 more)
    assert (p.global_load_requests, p.global_load_sectors) == (2, 16)
    np.testing.assert_array_equal(dy.get(), x[(np.arange(64) * 2) % 64])


def test_setup_py_assigns_the_packages_profile_lists():
    # The AST of setup.py: PROFILE_KERNEL_FLAGS / _HOOK_FLAGS / _WRAPPED are read from
    # tiledmm/_profile_build.py (runpy), not written out again, so they cannot drift apart.
    setup = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")
    assigned = {node.targets[0].id: node.value for node in ast.parse(open(setup).read()).body
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    source = assigned["_PROFILE_BUILD"]
    assert ast.unparse(source.func) == "runpy.run_path"
    assert {c.value for c in ast.walk(source) if isinstance(c, ast.Constant)} >= \
        {"tiledmm", "_profile_build.py"}
    for name in ("PROFILE_KERNEL_FLAGS", "PROFILE_HOOK_FLAGS", "PROFILE_WRAPPED"):
        assert ast.unparse(assigned[name]) == f"_PROFILE_BUILD[{name!r}]"
