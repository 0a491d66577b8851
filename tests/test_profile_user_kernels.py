"""profile=True on tm.compile kernels (emu): the student's kernel is counted by its own profile
build exactly as registry kernels are (tiledmm/_emu_build.py), isolated or in process."""
import os
import runpy

import numpy as np
import pytest

import tiledmm as tm
from tiledmm import _emu_build
from tiledmm.toolchain import compile_emu as _compile_emu

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


def test_a_students_naive_matmul_counts_as_the_registry_kernel():
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
    mine = tm.compile(src, backend="emu")((3, 3), (16, 16), A, B, C, M, N, K, profile=True,
                                          flops=2 * M * N * K).profile
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
    # setup.py reads tiledmm/_emu_build.py, so registry and user kernels are counted alike.
    setup = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")
    text = open(setup).read()
    assert '"tiledmm", "_emu_build.py"' in text and "PROFILE_KERNEL_FLAGS = [" not in text
    assert "-fno-tree-sra" in _emu_build.PROFILE_KERNEL_FLAGS
    assert runpy.run_path(_emu_build.__file__)["PROFILE_WRAPPED"] == \
        _emu_build.PROFILE_WRAPPED


def test_setup_and_tm_compile_share_the_emulator_flags_and_probe():
    # One list of the emulator's flags and one compiler probe (issue 33): setup.py spells none
    # of its own, and the runtime objects user kernels link against are built with them.
    setup = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")
    text = open(setup).read()
    assert "-fstack-clash-protection" not in text and "-std=c++17\", \"-O2\", \"-fPIC" not in text
    assert "def compiler_accepts" not in text and "omp_get_max_threads" not in text
    assert "EMU_FLAGS" in text and '_EMU_BUILD["accepts"]' in text
    cxx = _compile_emu.cxx_compiler()
    assert _compile_emu.kernel_build_flags() == _emu_build.build_flags(cxx)
    assert set(_compile_emu.kernel_build_flags()) <= set(_emu_build.EMU_FLAGS)
    assert "-fstack-clash-protection" in _compile_emu.kernel_build_flags()
    assert not _emu_build.accepts([cxx, "-x", "c++"], ["-fno-such-flag-anywhere"])
