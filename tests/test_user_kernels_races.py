"""Check mode's shared-memory race detection on the emulator (tm.compile(..., check=True)):
a read of a __shared__ element that another thread of the block wrote since the last
__syncthreads() (and a write over another thread's read or write in the same interval) fails the
launch with tm.KernelError naming the array, the element, both threads and the block."""
import re

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.toolchain import check_rewrite as check_mode

from test_user_kernels import RECT, SQUARE, SUM

pytestmark = pytest.mark.filterwarnings("ignore")

SECOND_BARRIER = """        for (int k = 0; k < TILE; ++k) sum += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
"""
NO_SECOND_BARRIER = SQUARE.replace(SECOND_BARRIER, SECOND_BARRIER.splitlines()[0] + "\n")

# A block reduction whose tree reads its neighbour's partial sum without a barrier per step.
SUM_NO_BARRIER = SUM.replace("""        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();""", """        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];""")

# Every thread reads only what it wrote itself: no barrier needed.
OWN = r"""
__global__ void own(const float *x, float *y, int n)
{
    __shared__ float buf[128];
    __shared__ int count[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? x[i] : 0.0f;
    count[threadIdx.x] = 0;
    for (int r = 0; r < 3; ++r) {
        buf[threadIdx.x] *= 2.0f;
        count[threadIdx.x]++;
    }
    if (i < n) y[i] = buf[threadIdx.x] + count[threadIdx.x];
}
"""

# Static shared arrays in a reduction, a shared scalar, min/max, printf-free helpers, atomics on
# shared memory, a shared index and a raw pointer: all compile in check mode and give the same
# results as without it.
MIXED = r"""
#define N 64
__device__ float twice(float v) { return 2.0f * v; }
__global__ void mixed(const float *x, float *out, int *hits, int n)
{
    __shared__ __align__(16) float s[N], m[N];
    __shared__ int count, order[N];
    __shared__ float total;
    int t = threadIdx.x, i = blockIdx.x * N + t;
    if (t == 0) { count = 0; total = 0.0f; }
    s[t] = i < n ? x[i] : 0.0f;
    m[t] = s[t];
    order[t] = N - 1 - t;
    __syncthreads();
    atomicAdd(&count, 1);
    for (int stride = N / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            s[t] += s[t + stride];
            m[t] = max(m[t], m[t + stride]);
        }
        __syncthreads();
    }
    float *raw = s;
    float lane0 = __shfl_sync(0xffffffffu, s[t & ~31], 0);   // a proxy shuffled: its value
    if (lane0 != s[t & ~31]) raw[0] = -1.0f;
    if (t == 0) total = twice(raw[0]) / 2.0f;
    __syncthreads();
    if (t == 0) {
        out[2 * blockIdx.x] = total;
        out[2 * blockIdx.x + 1] = m[order[N - 1]] + (s[0] == total ? 0.0f : 100.0f);
        hits[blockIdx.x] = count;
    }
}
"""

# Warp-synchronous tail of a reduction: lanes of one warp ordered by __syncwarp().
WARP = r"""
__global__ void warp_sum(const float *x, float *out)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * 64 + t];
    __syncthreads();
    if (t < 32) {
        float v = s[t] + s[t + 32];
        __syncwarp();
        s[t] = v;
        __syncwarp();
        for (int off = 16; off > 0; off >>= 1) {
            if (t < off) v += s[t + off];
            __syncwarp();
            s[t] = v;
            __syncwarp();
        }
        if (t == 0) out[blockIdx.x] = v;
    }
}
"""


def _race(kernel, *args, **kwargs):
    with pytest.raises(tm.KernelError) as info:
        kernel(*args, backend="emu", check=True, **kwargs)
    return str(info.value)


def test_tiled_matmul_without_the_second_barrier_is_reported(rng):
    W = 48
    A = rng.random((W, W)).astype(np.float32)
    B = rng.random((W, W)).astype(np.float32)
    kernel = tm.compile(NO_SECOND_BARRIER, backend="emu", check=True)
    text = _race(kernel, (W // 16, W // 16), (16, 16), A, B, np.zeros((W, W), np.float32), W)
    assert "shared-memory race" in text and "As[" in text, text
    threads = re.findall(r"thread \((\d+,\d+,\d+)\)", text)
    assert len(threads) == 2 and threads[0] != threads[1], text
    assert "block (0,0,0)" in text and "__syncthreads()" in text, text


def test_correct_tiled_matmul_passes_check_mode_with_the_same_results(rng):
    for source, args in ((SQUARE, lambda A, B, C, M, N, K: (A, B, C, N)),
                         (RECT, lambda A, B, C, M, N, K: (A, B, C, M, N, K))):
        kernel = tm.compile(source, backend="emu", check=True)
        M, N, K = (48, 48, 48) if source is SQUARE else (33, 17, 40)
        A = rng.random((M, K)).astype(np.float32)
        B = rng.random((K, N)).astype(np.float32)
        grid = ((N + 15) // 16, (M + 15) // 16)
        plain, checked = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32)
        kernel(grid, (16, 16), *args(A, B, plain, M, N, K), backend="emu", check=False)
        kernel(grid, (16, 16), *args(A, B, checked, M, N, K), backend="emu", check=True)
        assert np.array_equal(plain, checked)
        tm.testing.assert_matmul_close(checked, A, B)


def test_reduction_reading_a_neighbour_without_a_barrier_is_reported(rng):
    x = rng.random(1000).astype(np.float32)
    kernel = tm.compile(SUM_NO_BARRIER, backend="emu", check=True)
    text = _race(kernel, 4, 256, x, np.zeros(4, np.float32), x.size, shared_bytes=256 * 4)
    assert "shared-memory race" in text and "s[" in text and "block (0,0,0)" in text, text
    good = tm.compile(SUM, backend="emu", check=True)   # the barrier per step fixes it
    partial = np.zeros(4, np.float32)
    good(4, 256, x, partial, x.size, shared_bytes=256 * 4, backend="emu", check=True)
    tm.testing.assert_sum_close(partial.astype(np.float64).sum(), x)
    # too little dynamic shared memory for the block: the first index past it is reported
    text = _race(good, 4, 256, x, partial, x.size, shared_bytes=128 * 4)
    assert "out-of-bounds write of s[128] of TM_DYNAMIC_SHARED s: 128 elements in " \
           "shared_bytes=512" in text and "thread (128,0,0) of block (0,0,0)" in text, text


def test_reading_ones_own_writes_is_not_a_race(rng):
    x = rng.random(300).astype(np.float32)
    y = np.zeros_like(x)
    tm.compile(OWN, backend="emu", check=True)(3, 128, x, y, x.size, backend="emu", check=True)
    np.testing.assert_allclose(y, 8 * x + 3, rtol=1e-6)


def test_scalars_atomics_min_max_and_raw_pointers_compile_and_agree(rng):
    n = 200
    x = rng.random(n).astype(np.float32)
    kernel = tm.compile(MIXED, backend="emu")
    blocks = (n + 63) // 64
    outs = []
    for check in (False, True):
        out, hits = np.zeros(2 * blocks, np.float32), np.zeros(blocks, np.int32)
        kernel(blocks, 64, x, out, hits, n, backend="emu", check=check)
        outs.append((out, hits))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
    assert np.all(outs[1][1] == 64)
    xp = np.zeros(blocks * 64, np.float32)
    xp[:n] = x
    np.testing.assert_allclose(outs[1][0][0::2], xp.reshape(blocks, 64).sum(1), rtol=1e-5)
    np.testing.assert_allclose(outs[1][0][1::2], xp.reshape(blocks, 64).max(1))


def test_shared_scalar_written_by_one_thread_and_read_by_others_without_a_barrier():
    source = MIXED.replace("if (t == 0) { count = 0; total = 0.0f; }",
                           "if (t == 0) { count = 0; total = 0.0f; }\n    float early = total;")
    kernel = tm.compile(source, backend="emu", check=True)
    text = _race(kernel, 1, 64, np.ones(64, np.float32), np.zeros(2, np.float32),
                 np.zeros(1, np.int32), 64)
    assert "on total (__shared__ total)" in text, text
    assert "thread (1,0,0) reads it after thread (0,0,0) wrote it" in text, text


def test_write_after_read_is_reported():
    source = r"""
__global__ void shift(float *y)
{
    __shared__ float s[32];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    float right = s[(threadIdx.x + 1) % 32];
    s[threadIdx.x] = right;   // overwrites what the previous thread still has to read
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x];
}
"""
    kernel = tm.compile(source, backend="emu", check=True)
    text = _race(kernel, 1, 32, np.zeros(32, np.float32))
    # after the barrier thread 31 runs first (it opened it) and reads s[0]; thread 0 then
    # overwrites s[0]
    assert "write after read" in text and "on s[0]" in text, text
    assert "thread (0,0,0) writes it after thread (31,0,0) read it" in text, text


def test_warp_synchronous_code_with_syncwarp_is_not_a_race(rng):
    x = rng.random(128).astype(np.float32)
    kernel = tm.compile(WARP, backend="emu", check=True)
    out = np.zeros(2, np.float32)
    kernel(2, 64, x, out, backend="emu", check=True)
    np.testing.assert_allclose(out, x.reshape(2, 64).sum(1), rtol=1e-5)
    # without the __syncwarp() calls the same lanes race
    racy = tm.compile(WARP.replace("__syncwarp();", ""), backend="emu", check=True)
    assert "shared-memory race" in _race(racy, 2, 64, x, np.zeros(2, np.float32))


def test_out_of_bounds_shared_index_is_reported():
    source = r"""
__global__ void over(float *y)
{
    __shared__ float s[4][8];
    s[threadIdx.y][threadIdx.x] = 1.0f;
    __syncthreads();
    y[threadIdx.y * 9 + threadIdx.x] = s[threadIdx.y][threadIdx.x + 1];
}
"""
    kernel = tm.compile(source, backend="emu", check=True)
    text = _race(kernel, 1, (8, 4), np.zeros(36, np.float32))
    assert re.search(r"out-of-bounds read of s\[(\d)\]\[8\] of __shared__ s\[4\]\[8\] .*"
                     r"by thread \(7,\1,0\) of block \(0,0,0\)", text), text


def test_rewrite_keeps_line_numbers_and_leaves_other_declarations():
    source = ("__global__ void k(float *y)\n{\n    __shared__ float a[2][3], b;\n"
              "    extern __shared__ float dyn[];\n    __shared__ float2 v[4];\n"
              "    __shared__ float c[\n        4];\n}\n")
    out = check_mode.checked_shared(source)
    assert out.count("\n") == source.count("\n")
    lines = out.splitlines()
    assert "tm_sh_array<float, tm_shn_a, (long long)(2), (long long)(3)> a;" in lines[2]
    assert "tm_sh_scalar<float, tm_shn_b> b;" in lines[2]
    assert lines[3] == "    extern __shared__ float dyn[];" and lines[4] == "    __shared__ float2 v[4];"
    assert "tm_sh_array<float, tm_shn_c, (long long)(4)> c;" in lines[5] and lines[6] == ""
