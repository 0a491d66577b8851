"""tm.compile kernels split at their barriers (tiledmm/toolchain/split/transform.py, issue 34): which
kernels take the thread loops, which keep the fibers, and that both give the same results as
NumPy (float64, tolerance growing with K) and as each other."""
import os
import re

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.toolchain.split.transform import STRIP_THREADS, split_kernel

# Every launch here has tm.compile's kernel time limit (60 s by default): a hang fails.

# the lecture's tiled kernel, shared with benchmarks/emu_speed.py
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels", "tiled16.cu")) as _f:
    TILED = _f.read()

# A local array live across barriers, a uniform local in the loop bound, an early return after
# the last barrier.
REGTILE = r"""
#define T 8
__global__ void regtile(const float *A, const float *B, float *C, int m, int n, int k)
{
    __shared__ float As[T][T];
    __shared__ float Bs[T][2 * T];
    const int steps = (k + T - 1) / T;
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * T + ty;
    int col = blockIdx.x * 2 * T + tx;
    float acc[2] = {0.0f, 0.0f};
    for (int s = 0; s < steps; ++s) {
        As[ty][tx] = (row < m && s * T + tx < k) ? A[row * k + s * T + tx] : 0.0f;
        for (int j = 0; j < 2; ++j)
            Bs[ty][tx + j * T] = (col + j * T < n && s * T + ty < k) ? B[(s * T + ty) * n + col + j * T] : 0.0f;
        __syncthreads();
        for (int i = 0; i < T; ++i)
            for (int j = 0; j < 2; ++j)
                acc[j] += As[ty][i] * Bs[i][tx + j * T];
        __syncthreads();
    }
    if (row >= m)
        return;
    for (int j = 0; j < 2; ++j)
        if (col + j * T < n)
            C[row * n + col + j * T] = acc[j];
}
"""


def _matmul(kernel, tile, m, n, k, grid_x_scale=1, **call):
    rng = np.random.default_rng(m * 131 + n * 7 + k)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    C = np.full((m, n), np.nan, np.float32)
    grid = (-(-n // (tile * grid_x_scale)), -(-m // tile))
    res = kernel(grid, (tile, tile), A, B, C, np.int32(m), np.int32(n), np.int32(k), **call)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    tol = 1e-6 * k * np.abs(A).max() * np.abs(B).max() * 4
    np.testing.assert_allclose(C, ref, rtol=0, atol=tol)
    return res, C


@pytest.mark.parametrize("m,n,k", [(37, 53, 29), (16, 16, 16), (65, 17, 100), (1, 33, 47)])
def test_tiled_matches_numpy_and_fibers(m, n, k):
    split = tm.compile(TILED, backend="emu")
    res, got = _matmul(split, 16, m, n, k)
    assert res.launch.path == "thread loops", res.launch.path_reason
    checked = tm.compile(TILED, backend="emu", check=True)   # check mode: the fibers
    res_f, want = _matmul(checked, 16, m, n, k)
    assert res_f.launch.path == "fibers" and "check" in res_f.launch.path_reason
    np.testing.assert_array_equal(got, want)   # the same sums in the same order


# NVIDIA's matrixMul declares its tiles inside the tile loop (issue 46: it ran on fibers)
TILES_IN_LOOP = TILED.replace("    __shared__ float As[TILE][TILE];\n    __shared__ float Bs[TILE][TILE];\n", "") \
    .replace("++t) {\n", "++t) {\n        __shared__ float As[TILE][TILE];\n"
                        "        __shared__ float Bs[TILE][TILE];\n", 1)


@pytest.mark.parametrize("m,n,k", [(37, 53, 29), (16, 16, 40)])
def test_shared_declared_inside_the_barrier_loop_splits(m, n, k):
    assert TILES_IN_LOOP.count("__shared__") == 2 and "++t) {\n        __shared__" in TILES_IN_LOOP
    split = tm.compile(TILES_IN_LOOP, backend="emu")
    res, got = _matmul(split, 16, m, n, k)
    assert res.launch.path == "thread loops", res.launch.path_reason
    res_f, want = _matmul(tm.compile(TILES_IN_LOOP, backend="emu", check=True), 16, m, n, k)
    assert res_f.launch.path == "fibers"
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("m,n,k", [(23, 41, 19), (8, 16, 8)])
def test_local_array_live_across_barriers_and_return_after_them(m, n, k):
    kernel = tm.compile(REGTILE, backend="emu")
    res, _ = _matmul(kernel, 8, m, n, k, grid_x_scale=2)
    assert res.launch.path == "thread loops", res.launch.path_reason
    plan = split_kernel(REGTILE, "regtile")
    assert plan.frame >= 2 * 4 and plan.regions >= 3


def _fallback_reason(src, name):
    plan = split_kernel(src, name)
    assert plan.text is None
    return plan.reason


@pytest.mark.parametrize("body,why", [
    ("int i = 0;\n    while (i < 4) { __syncthreads(); ++i; }", "a barrier inside a while loop (line 6)"),
    ("{\n        __syncthreads();\n    }", "a barrier inside a nested { } block (line 5)"),
    ("switch (n) { case 1: __syncthreads(); }", "a barrier inside a switch (line 5)"),
    ("if (threadIdx.x < n) __syncthreads();",
     "a barrier inside an if whose condition may differ between threads (line 5"),
    ("if (n > 1) __syncthreads();\n    if (threadIdx.x % 2 == 0) __syncthreads();",
     "a barrier inside an if whose condition may differ between threads (line 6"),
])
def test_each_kernel_on_fibers_says_which_construct_holds_its_barrier(body, why):
    """The reason names the statement around the barrier and its line (issue 46: a reason
    named a loop where the code had an if)."""
    src = "__global__ void k(float *out, int n)\n{\n    out[threadIdx.x] = 0.0f;\n" \
          f"    {body}\n    out[threadIdx.x] = 1.0f;\n}}\n"
    assert why in _fallback_reason("\n" + src, "k")


def test_barrier_in_thread_dependent_loop_falls_back_and_is_reported_divergent():
    src = r"""
__global__ void diverge(float *out)
{
    for (int i = 0; i < (int)threadIdx.x; ++i) {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}
"""
    assert "differ between threads" in _fallback_reason(src, "diverge")
    out = np.zeros(64, np.float32)
    with pytest.raises(tm.KernelError, match="barrier|__syncthreads"):
        tm.compile(src, backend="emu")(1, 64, out)


def test_early_return_before_a_barrier_falls_back_with_the_same_results():
    src = r"""
__global__ void early(const float *x, float *out, int n)
{
    __shared__ float s[64];
    int i = blockIdx.x * 64 + threadIdx.x;
    if (i >= n) return;
    s[threadIdx.x] = x[i] * 2.0f;
    __syncthreads();
    out[i] = s[threadIdx.x] + s[(threadIdx.x + 1) % 64];
}
"""
    assert "return before a barrier" in _fallback_reason(src, "early")
    n = 128
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    res = tm.compile(src, backend="emu")(2, 64, x, out, np.int32(n))
    assert res.launch.path == "fibers"
    want = (2.0 * x).reshape(2, 64)
    want = (want + np.roll(want, -1, axis=1)).ravel()
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_syncthreads_count_and_or_fall_back_and_keep_their_values():
    src = r"""
__global__ void votes(const int *flags, int *out)
{
    int f = flags[threadIdx.x];
    int c = __syncthreads_count(f);
    int a = __syncthreads_and(f);
    int o = __syncthreads_or(f);
    if (threadIdx.x == 0) { out[0] = c; out[1] = a; out[2] = o; }
}
"""
    assert "__syncthreads_count" in _fallback_reason(src, "votes")
    flags = (np.arange(96) % 3 == 0).astype(np.int32)
    out = np.zeros(3, np.int32)
    res = tm.compile(src, backend="emu")(1, 96, flags, out)
    assert res.launch.path == "fibers"
    assert out.tolist() == [32, 0, 1]


def test_shuffles_between_barriers_split_with_the_fibers_bits():
    src = r"""
__global__ void shuf(const float *x, float *out)
{
    __shared__ float s[64];
    float v = x[threadIdx.x];
    v += __shfl_down_sync(0xffffffffu, v, 1);
    s[threadIdx.x] = v;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
}
"""
    assert split_kernel(src, "shuf").text is not None
    x = np.random.default_rng(5).standard_normal(64).astype(np.float32)
    outs = []
    for check in (False, True):   # check mode: the fibers
        out = np.zeros(64, np.float32)
        res = tm.compile(src, backend="emu", check=check)(1, 64, x, out)
        assert res.launch.path == ("fibers" if check else "thread loops"), res.launch.path_reason
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    lanes = x.reshape(2, 32)
    down = np.concatenate([lanes[:, 1:], lanes[:, 31:]], axis=1)   # the last lane keeps its own
    want = (lanes + down).ravel()[::-1]
    np.testing.assert_allclose(outs[0], want, rtol=1e-6)


# Every shuffle kind and vote with a full mask (a literal or a const variable): a warp sum in a
# block-uniform loop, widths below 32, lane arguments that differ per thread or leave the warp
# or the segment, a partial last warp.
SHUFFLES = r"""
__global__ void shuffles(const float *x, float *sums, float *mixed, unsigned *votes, int n)
{
    const unsigned FULL = 0xffffffffu;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    const float own = v;
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        v += __shfl_down_sync(FULL, v, offset);
    unsigned b = __ballot_sync(0xffffffff, own > 0.0f);
    float w = __shfl_sync(FULL, own, threadIdx.x * 7 + 3, 8);
    float u = __shfl_up_sync(FULL, w, 3, 16) - __shfl_xor_sync(FULL, own, 21);
    const float far = __shfl_sync(FULL, own, 45) + __shfl_down_sync(FULL, own, 31, 4);
    int a = __all_sync(FULL, own > -100.0f) + 2 * __any_sync(FULL, own > 2.5f);
    if (i < n) {
        sums[i] = v;
        mixed[i] = w + u * 3.0f + far;
        votes[i] = b ^ (unsigned)a;
    }
}
"""


# the same in double (8-byte values through the exchange), under a block-uniform if
SHUFFLES_F64 = re.sub(r"(\d\.\d+)f\b", r"\1", SHUFFLES.replace("float", "double")).replace(
    "    for (int offset", "    if (n > 0) for (int offset")


def _shuffles(src, dtype, n, block, check):
    x = np.random.default_rng(n + block).standard_normal(n).astype(dtype)
    outs = [np.full(n, np.nan, dtype), np.full(n, np.nan, dtype), np.zeros(n, np.uint32)]
    res = tm.compile(src, backend="emu", check=check)(-(-n // block), block, x, *outs,
                                                      np.int32(n))
    return res, x, outs


@pytest.mark.parametrize("src,dtype", [(SHUFFLES, np.float32), (SHUFFLES_F64, np.float64)])
@pytest.mark.parametrize("n,block", [(1, 32), (20, 32), (1000, 96), (70, 48), (4099, 1024),
                                     (33, 33), (5, 1)])
def test_each_shuffle_and_vote_splits_with_the_fibers_bits(src, dtype, n, block):
    assert split_kernel(src, "shuffles").text is not None
    res, x, outs = _shuffles(src, dtype, n, block, check=False)
    assert res.launch.path == "thread loops", res.launch.path_reason
    fib, _, fib_outs = _shuffles(src, dtype, n, block, check=True)   # check mode: the fibers
    assert fib.launch.path == "fibers"
    for a, b in zip(outs, fib_outs):
        np.testing.assert_array_equal(a, b)
    # lane 0 of each whole warp holds the warp's sum (a thread past n adds 0; in a partial
    # last warp a lane whose source does not exist adds its own value, as on fibers)
    starts = [blk * block + w for blk in range(-(-n // block))
              for w in range(0, block, 32)]
    for s0 in starts:
        end = min(s0 + 32, (s0 // block + 1) * block, n)
        if s0 < n and s0 + 32 <= (s0 // block + 1) * block:
            want = x[s0:end].astype(np.float64).sum()
            eps = np.finfo(dtype).eps
            assert abs(outs[0][s0] - want) <= 8 * eps * 6 * np.abs(x[s0:end]).sum() + eps
            bal = sum(1 << k for k in range(end - s0) if x[s0 + k] > 0)
            if end - s0 == min(32, (s0 // block + 1) * block - s0):   # every lane exists in x
                any_ = int((x[s0:end] > 2.5).any())
                assert outs[2][s0] == bal ^ (1 + 2 * any_)


def _fibers_error(src, name, *args):
    errors = []
    for check in (False, True):
        with pytest.raises(tm.KernelError, match="no thread can proceed") as exc:
            tm.compile(src, backend="emu", check=check)(*args)
        errors.append(str(exc.value))
    return errors


DIVERGENT_SHUFFLE = r"""
__global__ void half(float *x)
{
    float v = x[threadIdx.x];
    if (threadIdx.x < 16) v += __shfl_down_sync(0xffffffffu, v, 1);
    x[threadIdx.x] = v;
}
"""


@pytest.mark.parametrize("src,name,why", [
    (DIVERGENT_SHUFFLE.replace("threadIdx.x < 16", "v > 0.0f"), "half",
     "condition reads more than the thread's index"),
    (DIVERGENT_SHUFFLE.replace("if (threadIdx.x < 16)", "if (threadIdx.x < 16) {} else"), "half",
     "a warp shuffle or vote inside an if whose condition may differ between threads (line 5"),
    (DIVERGENT_SHUFFLE.replace("if (threadIdx.x < 16) v +=", "for (int r = 0; r < (int)threadIdx.x % 2; ++r) v +="),
     "half", "trip count"),
    (DIVERGENT_SHUFFLE.replace("if (threadIdx.x < 16) v += __shfl_down_sync(0xffffffffu, v, 1);",
                               "v = threadIdx.x & 1 ? __shfl_xor_sync(0xffffffffu, v, 1) : v;"),
     "half", "warp operation"),
    (DIVERGENT_SHUFFLE.replace("if (threadIdx.x < 16) v +=", "if (x[0] > 1e30f) return;\n    v +="),
     "half", "return"),
    (DIVERGENT_SHUFFLE.replace("0xffffffffu, v, 1", "0x0000ffffu, v, 1"), "half", "warp operation"),
])
def test_shuffles_a_lane_might_skip_keep_the_fibers(src, name, why):
    assert why in _fallback_reason(src, name)


def test_a_shuffle_under_a_thread_dependent_if_fails_as_on_fibers():
    """Lanes 16-31 never arrive at the full-mask shuffle: the split (a warp if) finds warp 0's
    lanes disagreeing and reports it as the fibers do: the shuffle, its line, the lanes."""
    assert split_kernel(DIVERGENT_SHUFFLE, "half").text is not None
    errors = _fibers_error(DIVERGENT_SHUFFLE, "half", 1, 32, np.arange(32, dtype=np.float32))
    assert all("__shfl_down_sync()" in e and "0xffff0000" in e and "kernel.cu:5" in e
               for e in errors), errors


def test_barrier_free_kernel_with_return_runs_as_one_thread_loop():
    src = r"""
__global__ void axpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = a * x[i] + y[i];
}
"""
    n = 1000
    rng = np.random.default_rng(9)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    want = 1.5 * x.astype(np.float64) + y
    scale = np.abs(1.5 * x.astype(np.float64)) + np.abs(y)
    y_fibers = y.copy()
    res = tm.compile(src, backend="emu")(-(-n // 128), 128, np.float32(1.5), x, y, np.int32(n))
    assert res.launch.path == "thread loops", res.launch.path_reason
    assert np.all(np.abs(y - want) <= 2 * np.finfo(np.float32).eps * scale)
    tm.compile(src, backend="emu", check=True)(-(-n // 128), 128, np.float32(1.5), x, y_fibers,
                                               np.int32(n))
    np.testing.assert_array_equal(y, y_fibers)


def test_loop_variable_written_inside_the_loop_falls_back():
    src = r"""
__global__ void skip(float *out, int n)
{
    __shared__ float s[32];
    for (int t = 0; t < n; ++t) {
        s[threadIdx.x] = t;
        __syncthreads();
        if (t == 1) t += 1;
        out[threadIdx.x] += s[31 - threadIdx.x];
        __syncthreads();
    }
}
"""
    assert "changes its variable" in _fallback_reason(src, "skip")


def test_a_fault_in_thread_loops_names_the_thread_and_block():
    src = r"""
__global__ void trap(const float *x, float *out)
{
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    long long far = (threadIdx.x == 37 && blockIdx.x == 1) ? (1LL << 40) : 0;
    out[blockIdx.x * 64 + threadIdx.x + far] = s[63 - threadIdx.x];
}
"""
    assert split_kernel(src, "trap").text is not None
    kernel = tm.compile(src, backend="emu")
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(128, np.float32)
    with pytest.raises(tm.KernelError, match=r"by thread \(37,0,0\) of block \(1,0,0\)"):
        kernel(2, 64, x, out)


def test_a_fault_in_a_thread_loop_without_pointers_names_the_block():
    """A region that reads only shared memory and locals (the loops that vectorise) does not
    note each thread: its fault report names the block and says check=True names the thread."""
    src = r"""
__global__ void trap(float *out, int far)
{
    __shared__ float s[64];
    int i = threadIdx.x == 5 ? far : threadIdx.x;
    s[i] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
}
"""
    assert split_kernel(src, "trap").text is not None
    with pytest.raises(tm.KernelError, match=r"by a thread of block \(0,0,0\) \(the kernel "
                       r"ran as loops over the block's threads; check=True"):
        tm.compile(src, backend="emu")(1, 64, np.zeros(64, np.float32), np.int32(1 << 30))


@pytest.mark.parametrize("body,reason", [
    ("static int c; c += 1; __syncthreads(); o[threadIdx.x] = c;", "static local"),
    ("__shared__ float x[64]; float &r = x[threadIdx.x]; r = 1; __syncthreads(); "
     "o[threadIdx.x] = r;", "reference live across a barrier"),
    ("if (threadIdx.x < 32) { __syncthreads(); } o[threadIdx.x] = 1;",
     "an if whose condition may differ between threads"),
    ("int i = 0; while (i < 3) { __syncthreads(); ++i; } o[threadIdx.x] = i;", "a while loop"),
    ("int i = 0; again: if (++i < 3) goto again; __syncthreads(); o[threadIdx.x] = i;", "goto"),
    ("for (int t = 0; t < 4; ++t) { __syncthreads(); if (t == threadIdx.x) break; } "
     "o[threadIdx.x] = 1;", "break of a loop with barriers"),
])
def test_what_keeps_the_fibers(body, reason):
    src = "__global__ void k(float *o)\n{\n" + body + "\n}\n"
    assert reason in _fallback_reason(src, "k")


def test_template_kernel_keeps_the_fibers():
    src = "template <int N> __global__ void k(float *o) { __syncthreads(); o[threadIdx.x] = N; }\n"
    assert "template" in _fallback_reason(src, "k")


def test_a_large_local_array_keeps_the_fibers_and_their_stack_overflow_report():
    src = r"""
__global__ void big(float *y, int n)
{
    float buf[1 << 20];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[i % 7] = i;
    y[i % n] = buf[(i * 3) % 7];
}
"""
    assert "bytes of local variables" in _fallback_reason(src, "big")
    with pytest.raises(tm.KernelError, match="stack overflow"):
        tm.compile(src, backend="emu")(1, 32, np.zeros(32, np.float32), np.int32(32))


@pytest.mark.parametrize("isolate", [True, False])
def test_tiledmm_emu_split_set_between_calls_of_one_kernel_changes_its_path(monkeypatch, isolate):
    """TILEDMM_EMU_SPLIT is read at each call, in this process: the same Kernel object takes
    the fibers once it is 0 and the thread loops again after (the worker, started before, holds
    no copy of it; the kernel caches key on it). Same bits either way."""
    kernel = tm.compile(TILED, backend="emu", isolate=isolate)
    rng = np.random.default_rng(5)
    A, B = (rng.standard_normal((48, 48)).astype(np.float32) for _ in range(2))
    outs, paths = [], []
    for value in (None, "0", None):
        if value is None:
            monkeypatch.delenv("TILEDMM_EMU_SPLIT", raising=False)
        else:
            monkeypatch.setenv("TILEDMM_EMU_SPLIT", value)
        C = np.zeros((48, 48), np.float32)
        res = kernel((3, 3), (16, 16), A, B, C, *(np.int32(48),) * 3)
        outs.append(C)
        paths.append((res.launch.path, res.launch.path_reason))
    assert paths == [("thread loops", ""), ("fibers", "TILEDMM_EMU_SPLIT=0"), ("thread loops", "")]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    ref = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(outs[0], ref, rtol=0, atol=1e-5 * 48 * np.abs(ref).max())


@pytest.mark.parametrize("threads,path", [(256, "thread loops"), (1024, "fibers")])
def test_per_thread_arrays_too_large_for_the_block_run_on_fibers(threads, path):
    """1 KiB of per-thread arrays: 256 threads fit the 512 KiB frame, 1024 do not (the
    launcher and res.launch.path decide alike); the sums are right either way."""
    src = r"""
__global__ void wide(const float *x, float *out)
{
    __shared__ float s[1024];
    float acc[256];
    for (int j = 0; j < 256; ++j)
        acc[j] = x[threadIdx.x] * j;
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    float total = 0.0f;
    for (int j = 0; j < 256; ++j)
        total += acc[j] * s[blockDim.x - 1 - threadIdx.x];
    out[threadIdx.x] = total;
}
"""
    plan = split_kernel(src, "wide")
    assert plan.text is not None and plan.frame >= 1024
    x = np.random.default_rng(11).standard_normal(threads).astype(np.float32)
    out = np.zeros(threads, np.float32)
    res = tm.compile(src, backend="emu")(1, threads, x, out)
    assert res.launch.path == path, res.launch.path_reason
    # the runtime's reason (emu/cuda_emu.h tm_emu_launch_pair), with this block's bytes
    assert res.launch.path_reason == ("" if threads == 256 else
                                      f"per-thread arrays of {threads * plan.frame} bytes per "
                                      "block (more than 524288)")
    want = x.astype(np.float64) * x[::-1] * np.arange(256).sum()
    tol = 1e-6 * 256 * 256 * np.abs(x).max() ** 2
    np.testing.assert_allclose(out, want, rtol=0, atol=tol)


def test_lecture_tree_reduction_runs_as_thread_loops():
    """The lecture's shared-memory reduction: a barrier in a loop whose bound is blockDim.x."""
    src = r"""
__global__ void block_sums(const float *x, float *out, int n)
{
    extern __shared__ float sdata[];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x * 2 + threadIdx.x;
    float v = 0.0f;
    if (i < n) v = x[i];
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        out[blockIdx.x] = sdata[0];
}
"""
    n, threads = 100_003, 128
    blocks = -(-n // (2 * threads))
    x = np.random.default_rng(13).standard_normal(n).astype(np.float32)
    out = np.zeros(blocks, np.float32)
    res = tm.compile(src, backend="emu")(blocks, threads, x, out, np.int32(n),
                                         shared_bytes=threads * 4)
    assert res.launch.path == "thread loops", res.launch.path_reason
    padded = np.zeros(blocks * 2 * threads)
    padded[:n] = x
    want = padded.reshape(blocks, 2 * threads).sum(axis=1)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-6 * 2 * threads * np.abs(x).max() * 8)


# A helper reading threadIdx (the thread loop stores each thread's index where the emulator's
# threadIdx reads it) and barriers under a block-uniform `if` (a parameter the kernel never
# writes: every thread takes the same branch; the thread loops go inside it).
UNIFORM_IF = r"""
__device__ float load_mine(const float *x, int n, int per)
{
    float s = 0.0f;
    for (int j = 0; j < per; ++j) {
        int i = (blockIdx.x * per + j) * blockDim.x + threadIdx.x;
        if (i < n) s += x[i];
    }
    return s;
}

__global__ void tree(const float *x, float *out, int n, int per, int sequential)
{
    __shared__ float s[256];
    unsigned tid = threadIdx.x;
    s[tid] = load_mine(x, n, per);
    __syncthreads();
    if (sequential) {
        for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
            if (tid < h) s[tid] += s[tid + h];
            __syncthreads();
        }
    } else {
        for (unsigned st = 1; st < blockDim.x; st *= 2) {
            if (tid % (2 * st) == 0) s[tid] += s[tid + st];
            __syncthreads();
        }
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}
"""


@pytest.mark.parametrize("n,per,sequential", [(1, 1, 1), (1000, 2, 0), (70001, 3, 1),
                                              (4099, 1, 0)])
def test_uniform_if_around_barriers_and_a_helper_reading_threadIdx_run_as_thread_loops(
        n, per, sequential):
    plan = split_kernel(UNIFORM_IF, "tree")
    assert plan.text is not None, plan.reason
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    blocks = -(-n // (256 * per))
    outs = []
    for check in (False, True):   # check mode: the fibers
        out = np.full(blocks, np.nan, np.float32)
        res = tm.compile(UNIFORM_IF, backend="emu", check=check)(
            blocks, 256, x, out, np.int32(n), np.int32(per), np.int32(sequential))
        assert res.launch.path == ("fibers" if check else "thread loops"), res.launch.path_reason
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    ref = np.add.reduceat(np.pad(x.astype(np.float64), (0, blocks * 256 * per - n)),
                          np.arange(0, blocks * 256 * per, 256 * per))
    np.testing.assert_allclose(outs[0], ref, rtol=0, atol=1e-6 * 9 * np.abs(x).sum() + 1e-6)


def test_a_barrier_under_an_if_on_a_written_parameter_falls_back():
    src = ("__global__ void k(float *o, int n)\n{\n__shared__ float s[64];\nn += threadIdx.x;\n"
           "if (n > 3) { __syncthreads(); }\no[threadIdx.x] = s[0];\n}\n")
    # (a written parameter keeps the fibers before the if is looked at: issue 34)
    assert "parameter n is written" in _fallback_reason(src, "k")


# A grid-stride load loop (`for (i = tid; i < n; i += blockDim.x)`: the thread only in its start,
# a bound of the data's size) runs as rounds over the threads: each thread's iterations keep
# their order, so its sum is the fibers' bit for bit.
STRIDE_SUM = r"""
__global__ void stride_sum(const float *x, float *out, int n)
{
    __shared__ float s[128];
    const int TILE = 4;
    float mine = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        mine += x[i] * x[i];
    for (int r = threadIdx.x; r < TILE; r += 2)
        mine += 0.0f;
    s[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int j = 0; j < blockDim.x; ++j) t += s[j];
        out[blockIdx.x] = t;
    }
}
"""


@pytest.mark.parametrize("n,blocks", [(1, 1), (1000, 3), (70001, 5)])
def test_grid_stride_loop_runs_as_rounds_with_the_fibers_bits(n, blocks):
    plan = split_kernel(STRIDE_SUM, "stride_sum")
    assert plan.text is not None, plan.reason
    assert plan.text.count("for (bool tm_more_") == 1   # the data-size loop, not `r < TILE`
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    outs = []
    for check in (False, True):   # check mode: the fibers
        out = np.full(blocks, np.nan, np.float32)
        res = tm.compile(STRIDE_SUM, backend="emu", check=check)(blocks, 128, x, out, np.int32(n))
        assert res.launch.path == ("fibers" if check else "thread loops"), res.launch.path_reason
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    x2 = x.astype(np.float64) ** 2
    assert abs(outs[0].astype(np.float64).sum() - x2.sum()) <= 1e-6 * np.log2(n + 1) * x2.sum() + 1e-6


# Warp granularity: the last warp of a tree reduction, its __syncwarp()s in a helper of the same
# file (inlined by the transform) under `if (tid < 32)`; the stretches between them run as
# thread loops over the threads whose predicate holds.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels", "last_warp.cu")) as _f:
    LAST_WARP = _f.read()


def _tail_sum(src, n, check=False):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    blocks = -(-n // 256)
    out = np.full(blocks, np.nan, np.float32)
    res = tm.compile(src, backend="emu", check=check)(blocks, 256, x, out, np.int32(n))
    return res, x, out


@pytest.mark.parametrize("n", [1, 1000, 70001])
def test_syncwarp_in_a_warp_uniform_if_runs_as_thread_loops_with_the_fibers_bits(n):
    src = LAST_WARP.replace("LANES", "32")
    plan = split_kernel(src, "tail_sum")
    assert plan.text is not None, plan.reason
    res, x, out = _tail_sum(src, n)
    assert res.launch.path == "thread loops", res.launch.path_reason
    fib, _, out_fibers = _tail_sum(src, n, check=True)   # check mode: the fibers
    assert fib.launch.path == "fibers"
    np.testing.assert_array_equal(out, out_fibers)
    blocks = len(out)
    ref = np.add.reduceat(np.pad(x.astype(np.float64), (0, blocks * 256 - n)),
                          np.arange(0, blocks * 256, 256))
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6 * 9 * np.abs(x).sum() + 1e-6)


def test_a_divergent_syncwarp_is_reported_as_the_fibers_report_it():
    """`tid < 16`: half of warp 0 waits at __syncwarp for lanes that never come. The split
    checks each warp's predicates before the first stretch and raises the fibers' error."""
    src = LAST_WARP.replace("LANES", "16")
    assert split_kernel(src, "tail_sum").text is not None
    errors = []
    for check in (False, True):   # check mode: the fibers
        with pytest.raises(tm.KernelError, match="no thread can proceed") as exc:
            _tail_sum(src, 600, check=check)
        errors.append(str(exc.value))
    first = next(i for i, ln in enumerate(src.splitlines(), 1) if "__syncwarp();" in ln)
    assert all(f"__syncwarp() (kernel.cu:{first})" in e and "warp 0" in e and "0xffff0000" in e
               for e in errors), errors


def test_syncwarp_under_a_condition_on_shared_memory_or_in_a_loop_keeps_the_fibers():
    on_shared = LAST_WARP.replace("LANES", "32 && s[0] > -1e30f")
    assert "__syncwarp" in _fallback_reason(on_shared, "tail_sum")
    in_loop = LAST_WARP.replace("if (tid < LANES) warp_tail(s, tid);",
                                "for (int r = 0; r < 1; ++r) if (tid < 32) warp_tail(s, tid);")
    assert "__syncwarp" in _fallback_reason(in_loop, "tail_sum")
    res, x, out = _tail_sum(in_loop, 1000)
    assert res.launch.path == "fibers"
    np.testing.assert_allclose(out, [x[:256].sum(dtype=np.float64), x[256:512].sum(dtype=np.float64),
                                     x[512:768].sum(dtype=np.float64), x[768:].sum(dtype=np.float64)],
                               rtol=0, atol=1e-5 * np.abs(x).sum())


# __syncwarp() written in the kernel's own `if`, a block of 48 threads: warp 1 has 16 lanes.
PARTIAL_WARP = r"""
__global__ void pw(const float *x, float *out)
{
    __shared__ float s[64];
    const unsigned t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    if (t < LANES) {
        float v = s[t] + s[t + 16];
        __syncwarp();
        s[t] = v;
        __syncwarp();
        out[t] = s[t] + s[31 - t % 32];
    }
}
"""


def test_a_partial_last_warp_that_skips_the_branch_splits_and_one_that_diverges_fails():
    x = np.random.default_rng(17).standard_normal(48).astype(np.float32)
    src = PARTIAL_WARP.replace("LANES", "32")
    outs = []
    for check in (False, True):   # check mode: the fibers
        out = np.full(48, np.nan, np.float32)
        res = tm.compile(src, backend="emu", check=check)(1, 48, x, out)
        assert res.launch.path == ("fibers" if check else "thread loops"), res.launch.path_reason
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    v = x[:32].astype(np.float64) + x[16:48]
    np.testing.assert_allclose(outs[0][:32], v + v[::-1], rtol=0, atol=1e-5 * np.abs(x).max())
    assert np.isnan(outs[0][32:]).all()
    # lanes 32-39 of warp 1 take the branch, 40-47 do not
    src = PARTIAL_WARP.replace("LANES", "40")
    assert split_kernel(src, "pw").text is not None   # the split checks at run time
    for check in (False, True):
        with pytest.raises(tm.KernelError, match=r"no thread can proceed(.|\n)*warp 1: .*"
                                                 r"lanes 0x0000ff00 never arrive"):
            tm.compile(src, backend="emu", check=check)(1, 48, x, np.zeros(48, np.float32))


@pytest.mark.parametrize("change,why", [
    # the helper reads a global the kernel redeclares as a local: inlined, it would read the local
    (("__device__ __forceinline__ void warp_tail",
      "__device__ float bias = 0.0f;\n__device__ __forceinline__ void warp_tail"),
     ("volatile float *p = s;", "volatile float *p = s; p[t] += bias;")),
    # a helper that returns a value is not a statement the transform inlines
    (("__device__ __forceinline__ void warp_tail(float *s, unsigned t)",
      "__device__ __forceinline__ int warp_tail(float *s, unsigned t)"),
     ("__syncwarp(); p[t] = v;\n}", "__syncwarp(); p[t] = v;\n    return 0;\n}")),
])
def test_a_syncwarp_helper_that_cannot_be_inlined_as_is_keeps_the_fibers(change, why):
    src = LAST_WARP.replace("LANES", "32").replace(*change).replace(*why)
    if "bias" in src:
        src = src.replace("const unsigned tid = threadIdx.x;",
                          "const unsigned tid = threadIdx.x;\n    float bias = 1.0f; (void)bias;")
    assert src != LAST_WARP
    reason = _fallback_reason(src, "tail_sum")
    assert "__syncwarp" in reason, reason
    res, x, out = _tail_sum(src, 700)
    assert res.launch.path == "fibers"
    sums = [x[i:i + 256].astype(np.float64).sum() for i in range(0, 700, 256)]
    np.testing.assert_allclose(out, sums, rtol=0, atol=1e-5 * np.abs(x).sum())


# A block sum as reduce_common.h's tm_block_sum writes it, with same-file helpers: `v =
# warp_sum(v);` is inlined (a non-void helper whose one return ends it), the shuffles of the
# first warp sum run for every warp, those of the second under `if (warp == 0)` at warp
# granularity (each warp's lanes checked to agree, then only the warps taking it).
BLOCK_SUM = r"""
__device__ float warp_sum(float v)
{
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}
__global__ void block_sum(const float *x, float *out, int n)
{
    __shared__ float warp_sums[32];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    v = warp_sum(v);
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (WARP_COND) {
        v = lane < (blockDim.x + 31) / 32 ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
    }
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}
"""


def _block_sum(src, n, block, check=False):
    x = np.random.default_rng(n + block).standard_normal(n).astype(np.float32)
    out = np.full(-(-n // block), np.nan, np.float32)
    res = tm.compile(src, backend="emu", check=check)(len(out), block, x, out, np.int32(n))
    return res, x, out


@pytest.mark.parametrize("n,block", [(1, 32), (31, 64), (1000, 256), (70001, 1024), (999, 96)])
def test_a_block_sum_with_shuffles_in_helpers_and_a_warp_if_splits_with_the_fibers_bits(n, block):
    src = BLOCK_SUM.replace("WARP_COND", "warp == 0")
    plan = split_kernel(src, "block_sum")
    assert plan.text is not None, plan.reason
    assert plan.text.count("tm_emu::split_shfl(tm_emu::OP_SHFL_DOWN") == 2
    res, x, out = _block_sum(src, n, block)
    assert res.launch.path == "thread loops", res.launch.path_reason
    fib, _, out_fibers = _block_sum(src, n, block, check=True)   # check mode: the fibers
    assert fib.launch.path == "fibers"
    np.testing.assert_array_equal(out, out_fibers)
    ref = np.add.reduceat(np.pad(x.astype(np.float64), (0, len(out) * block - n)),
                          np.arange(0, len(out) * block, block))
    if block % 32 == 0:   # (a partial warp's shuffles add a lane's own value for missing ones)
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6 * 11 * np.abs(x).sum() + 1e-6)


def test_a_shuffle_in_a_divergent_warp_if_is_reported_as_the_fibers_report_it():
    """`threadIdx.x < 16`: lanes 0-15 of warp 0 wait at the helper's shuffle for lanes 16-31,
    which skip the if and exit. Both paths fail naming the shuffle, its line in the helper, the
    warp and the missing lanes."""
    src = BLOCK_SUM.replace("WARP_COND", "threadIdx.x < 16")
    assert split_kernel(src, "block_sum").text is not None
    errors = []
    for check in (False, True):   # check mode: the fibers
        with pytest.raises(tm.KernelError, match="no thread can proceed") as exc:
            _block_sum(src, 200, 64, check=check)
        errors.append(str(exc.value))
    assert all("__shfl_down_sync() (kernel.cu:5)" in e and "warp 0" in e and "0xffff0000" in e
               for e in errors), errors


def test_a_shuffle_after_a_warp_if_keeps_the_fibers():
    """Lanes skipping the warp if would meet it on fibers (a group of different operations)."""
    src = BLOCK_SUM.replace("WARP_COND", "warp == 0").replace(
        "    if (threadIdx.x == 0) out", "    v += __shfl_xor_sync(0xffffffffu, v, 1);\n"
        "    if (threadIdx.x == 0) out")
    assert "after an if holding warp operations" in _fallback_reason(src, "block_sum")
    res, x, out = _block_sum(src, 1000, 128)
    assert res.launch.path == "fibers"
    assert np.isfinite(out).all()


def test_a_warp_if_whose_first_shuffle_may_not_be_reached_keeps_the_fibers():
    """The split checks a warp's lanes before the branch; a disagreeing warp is stuck on fibers
    only if its lanes reach a warp operation: a loop of data-dependent trip count (n may be 0)
    before it keeps the fibers, which report only what happens."""
    src = BLOCK_SUM.replace("WARP_COND", "threadIdx.x < 16").replace(
        "v = warp_sum(v);\n    }",
        "for (int k = 0; k < n - 1000; ++k) v += __shfl_down_sync(0xffffffffu, v, 1);\n    }")
    assert "shuffle or vote inside an if whose condition may differ" in \
        _fallback_reason(src, "block_sum")
    res, x, out = _block_sum(src, 1000, 64)   # no iteration: no lane waits, no error
    assert res.launch.path == "fibers"
    # thread 0 holds its warp's shuffled sum; the if's branch then reads warp sums 0 and 1
    assert np.isfinite(out).all() and out[0] != 0.0


# A block's cooperative group (cg::thread_block) used by its own calls: sync() both ways,
# thread_rank() and size(), which the split writes as the built-ins (split/inline.py,
# lower_block_groups). A tile or a group passed to a helper keeps the fibers.
GROUP_REVERSE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void group_reverse(const float *x, float *y, int n)
{
    cg::thread_block block = cg::this_thread_block();
    __shared__ float s[256];
    const unsigned r = block.thread_rank();
    const unsigned i = blockIdx.x * block.size() + r;
    s[r] = i < n ? x[i] : 0.0f;
    block.sync();
    float v = s[block.size() - 1 - r];
    cg::sync(block);
    s[r] = v * 2.0f;
    block.sync();
    if (i < n) y[i] = s[r] + s[(r + 1) % block.size()];
}
"""


def _group_reverse_expected(x, block):
    y = np.empty_like(x)
    for b in range(0, len(x), block):
        chunk = np.zeros(block, np.float32)
        chunk[:min(block, len(x) - b)] = x[b:b + block]
        t = 2.0 * chunk[::-1]
        y[b:b + block] = (t + np.roll(t, -1))[:min(block, len(x) - b)]
    return y


@pytest.mark.parametrize("block", [64, 256])
def test_a_block_group_splits_at_its_syncs(block):
    kern = tm.compile(GROUP_REVERSE, backend="emu")
    x = np.random.default_rng(block).standard_normal(1000).astype(np.float32)
    y = np.zeros_like(x)
    res = kern((-(-1000 // block),), (block,), x, y, np.int32(1000))
    assert res.launch.path == "thread loops", res.launch.path_reason
    np.testing.assert_array_equal(y, _group_reverse_expected(x, block))
    fib = tm.compile(GROUP_REVERSE, backend="emu", check=True)   # check mode: the fibers
    y2 = np.zeros_like(x)
    assert fib((-(-1000 // block),), (block,), x, y2, np.int32(1000)).launch.path == "fibers"
    np.testing.assert_array_equal(y2, y)


def test_a_void_helper_that_synchronises_is_inlined_with_the_block_group_passed_to_it():
    """`wait_for(block);` of a void helper taking the group (by value or by reference) whose
    barrier is its own: inlined without braces, so its barrier is the kernel's and it splits."""
    for param in ("cg::thread_block g", "const cg::thread_block &g"):
        src = GROUP_REVERSE.replace(
            "__global__ void group_reverse",
            f"__device__ void wait_for({param}) {{ unsigned r = g.thread_rank(); (void)r; g.sync(); }}\n"
            "__global__ void group_reverse", 1).replace("    cg::sync(block);\n",
                                                        "    wait_for(block);\n", 1)
        assert split_kernel(src, "group_reverse").reason == ""
        kern = tm.compile(src, backend="emu")
        x = np.random.default_rng(5).standard_normal(1000).astype(np.float32)
        y = np.zeros_like(x)
        res = kern((4,), (256,), x, y, np.int32(1000))
        assert res.launch.path == "thread loops", res.launch.path_reason
        np.testing.assert_array_equal(y, _group_reverse_expected(x, 256))


@pytest.mark.parametrize("edits,reason", [
    # the group passed to a helper that synchronises and cannot be inlined (a return in it):
    # its barrier would run inside one thread's turn
    ([("__global__ void group_reverse",
       "__device__ void wait_for(cg::thread_block g) { if (g.size() == 0) return; g.sync(); }\n"
       "__global__ void group_reverse"),
      ("    cg::sync(block);\n", "    wait_for(block);\n")],
     "helper function wait_for uses __syncthreads"),
    # a helper that takes the block's group itself (and cannot be inlined)
    ([("__global__ void group_reverse",
       "__device__ void wait_all() { if (blockDim.x == 0) return; cg::this_thread_block().sync(); }\n"
       "__global__ void group_reverse"),
      ("    cg::sync(block);\n", "    wait_all();\n")],
     "helper function wait_all uses __syncthreads"),
    # the group kept in another variable
    ([("    const unsigned r", "    cg::thread_block other = block;\n    const unsigned r")],
     "a cooperative group passed on or copied (line 8)"),
])
def test_a_block_group_used_otherwise_keeps_the_fibers_and_says_why(edits, reason):
    src = GROUP_REVERSE
    for old, new in edits:
        assert old in src
        src = src.replace(old, new, 1)
    plan = split_kernel(src, "group_reverse")
    assert plan.text is None and reason in plan.reason, plan.reason
    assert split_kernel(GROUP_REVERSE, "group_reverse").text is not None


# Helpers that synchronise, called in declarations and inside expressions, three deep, with the
# block's group passed down and locals named as the kernel's (an exclusive scan of each block's
# values, Hillis-Steele in shared memory): inlined into the kernel, so it splits
# (split/inline.py: _assigned_call, _synchronises, the helpers' own names renamed).
NESTED_SCAN = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__device__ float inclusive_step(float v, volatile float *s, unsigned n, cg::thread_block g)
{
    unsigned pos = g.thread_rank();
    s[pos] = v;
    for (unsigned offset = 1; offset < n; offset <<= 1) {
        g.sync();
        float t = pos >= offset ? s[pos - offset] : 0.0f;
        cg::sync(g);
        s[pos] += t;
    }
    g.sync();
    return s[pos];
}
__device__ float exclusive_step(float v, volatile float *s, unsigned n, cg::thread_block g)
{
    return inclusive_step(v, s, n, g) - v;
}
__device__ float scaled_exclusive(float v, volatile float *s, unsigned n, cg::thread_block g)
{
    float pos = 2.0f * exclusive_step(v, s, n, g);
    return pos;
}
__global__ void nested_scan(const float *x, float *y, int count)
{
    cg::thread_block block = cg::this_thread_block();
    __shared__ float s[256];
    const int pos = blockIdx.x * blockDim.x + threadIdx.x;
    float v = pos < count ? x[pos] : 0.0f;
    float out = scaled_exclusive(v, s, block.size(), block) + 1.0f;
    if (pos < count) y[pos] = out;
}
"""


@pytest.mark.parametrize("block", [32, 256])
def test_helpers_that_synchronise_are_inlined_through_declarations_and_expressions(block):
    plan = split_kernel(NESTED_SCAN, "nested_scan")
    assert plan.text is not None, plan.reason
    kern = tm.compile(NESTED_SCAN, backend="emu")
    x = np.random.default_rng(block).integers(-8, 9, 1000).astype(np.float32)   # exact sums
    y = np.zeros_like(x)
    res = kern((-(-1000 // block),), (block,), x, y, np.int32(1000))
    assert res.launch.path == "thread loops", res.launch.path_reason
    padded = np.zeros(-(-1000 // block) * block, np.float32)
    padded[:1000] = x
    per_block = padded.reshape(-1, block)
    expected = (2.0 * (np.cumsum(per_block, axis=1) - per_block) + 1.0).ravel()[:1000]
    np.testing.assert_array_equal(y, expected)


# Tiles and the grid (reductionMultiBlockCG's groups): what the split lowers, and what keeps
# the fibers with the reason
TILE_SUM = """#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void tile_sum(const float *x, float *y, int n)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    float s = cg::reduce(tile, v, cg::plus<float>());
    if (tile.thread_rank() == 0) y[blockIdx.x * (blockDim.x / 32) + tile.meta_group_rank()] = s;
}
"""


def test_a_tile_reduce_splits_with_the_fibers_bits():
    plan = split_kernel(TILE_SUM, "tile_sum")
    assert plan.reason == "", plan.reason
    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    got = {}
    for check in (False, True):   # check mode: the fibers
        kern = tm.compile(TILE_SUM, backend="emu", check=check)
        y = np.zeros(4 * 256 // 32, np.float32)
        res = kern((4,), (256,), x, y, np.int32(1000))
        assert res.launch.path == ("fibers" if check else "thread loops"), res.launch.path_reason
        got[check] = y
    np.testing.assert_array_equal(got[False], got[True])
    padded = np.zeros(1024, np.float64)
    padded[:1000] = x
    np.testing.assert_allclose(got[False], padded.reshape(-1, 32).sum(axis=1), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("old,new,reason", [
    ("cg::plus<float>()", "cg::less<float>()", "the split lowers cg::plus"),
    ("thread_block_tile<32> tile = cg::tiled_partition<32>",
     "thread_block_tile<64> tile = cg::tiled_partition<64>", "a tile of 64 threads"),
    ("    float s = cg::reduce", "    if (i < n) v += 1.0f;\n    float s = i < n ? 1.0f : cg::reduce",
     "under ?:, && or ||"),
])
def test_a_tile_use_the_split_does_not_lower_says_why(old, new, reason):
    assert old in TILE_SUM
    src = TILE_SUM.replace(old, new, 1)
    if "less" in new:
        src = src.replace("namespace cg", "namespace cooperative_groups { template <class T> "
                          "struct less {}; }\nnamespace cg", 1)
    plan = split_kernel(src, "tile_sum")
    assert plan.text is None and reason in plan.reason, plan.reason


# A loop with barriers whose variables an inner loop steps in its header alone (NVIDIA's
# globalToShmemAsyncCopy fills its stages ahead: `for (; fetched <= t + 1; ++fetched)`), in a
# block of two rows: the inner loop runs once per block, its body per thread.
STEPPED = """
__global__ void stepped(const float *x, float *y, int tiles)
{
    __shared__ float stage[4][64];
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0, fetched = 0; t < tiles; ++t) {
        for (; fetched < tiles && fetched <= t + 1; ++fetched)
            stage[fetched % 4][tid] = x[(blockIdx.x * tiles + fetched) * 64 + tid];
        __syncthreads();
        acc += stage[t % 4][(tid + 1) % 64] * (float)(t + 1);
        __syncthreads();
    }
    y[blockIdx.x * 64 + tid] = acc;
}
"""


def _stepped_expected(x, blocks, tiles):
    t = x.reshape(blocks, tiles, 64).astype(np.float64)
    return (np.roll(t, -1, axis=2) * np.arange(1, tiles + 1)[None, :, None]).sum(axis=1)


@pytest.mark.parametrize("tiles", [1, 5])
def test_a_loop_stepped_by_an_inner_loops_header_splits(tiles):
    assert split_kernel(STEPPED, "stepped").reason == ""
    x = np.random.default_rng(tiles).standard_normal(3 * tiles * 64).astype(np.float32)
    got = {}
    for check in (False, True):   # check mode: the fibers
        y = np.zeros(3 * 64, np.float32)
        res = tm.compile(STEPPED, backend="emu", check=check)((3,), (32, 2), x, y, np.int32(tiles))
        assert res.launch.path == ("fibers" if check else "thread loops"), res.launch.path_reason
        got[check] = y
    np.testing.assert_array_equal(got[False], got[True])
    np.testing.assert_allclose(got[False], _stepped_expected(x, 3, tiles).ravel(), rtol=1e-5,
                               atol=1e-5)


def test_an_inner_loop_that_steps_from_its_body_keeps_the_fibers():
    src = STEPPED.replace("for (; fetched < tiles && fetched <= t + 1; ++fetched)\n",
                          "for (; fetched < tiles && fetched <= t + 1;)\n").replace(
        "+ tid];\n", "+ tid], ++fetched;\n", 1)
    assert "++fetched;" in src
    plan = split_kernel(src, "stepped")
    assert plan.text is None and "changes its variable inside its body" in plan.reason, \
        plan.reason


# A row of dot products from shared memory: each thread's sum over k in a barrier-free loop the
# thread loops are interchanged with; it writes only the thread's own `acc`, so where a row holds
# two chunks of STRIP_THREADS or more (32, 48) the threads run it chunk by chunk (the sums stay in
# vector registers); other widths thread by thread.
ROW_DOTS = r"""
__global__ void row_dots(const float *a, const float *b, float *out, int k)
{
    __shared__ float as[64], bs[64][48];
    const int tx = threadIdx.x;
    for (int i = tx; i < 64; i += blockDim.x)
        as[i] = a[blockIdx.x * 64 + i];
    for (int i = 0; i < 64; ++i)
        bs[i][tx] = b[(blockIdx.x * 64 + i) * 48 + tx];
    __syncthreads();
    float acc = 0.5f;
    for (int j = 0; j < k; ++j)
        acc = acc * 0.75f + as[j] * bs[j][tx];
    out[blockIdx.x * 48 + tx] = acc;
}
"""


@pytest.mark.parametrize("width", [8, 24, 32, 48])
def test_a_loop_that_writes_only_its_threads_state_runs_in_chunks_with_the_fibers_bits(width):
    assert "tm_x0_ += %d" % STRIP_THREADS in split_kernel(ROW_DOTS, "row_dots").text
    rng = np.random.default_rng(width)
    a = rng.standard_normal(3 * 64).astype(np.float32)
    b = rng.standard_normal(3 * 64 * 48).astype(np.float32)
    got = {}
    for check in (False, True):   # check mode: the fibers
        out = np.full(3 * 48, np.nan, np.float32)
        res = tm.compile(ROW_DOTS, backend="emu", check=check)((3,), (width,), a, b, out,
                                                                np.int32(61))
        assert res.launch.path == ("fibers" if check else "thread loops"), res.launch.path_reason
        got[check] = out
    np.testing.assert_array_equal(got[False], got[True])
    want = np.full((3, width), 0.5)
    A, B = a.reshape(3, 64).astype(np.float64), b.reshape(3, 64, 48).astype(np.float64)
    for j in range(61):
        want = want * 0.75 + A[:, j, None] * B[:, j, :width]
    np.testing.assert_allclose(got[False].reshape(3, 48)[:, :width], want, rtol=1e-5, atol=1e-5)


def test_a_loop_that_writes_shared_memory_is_not_run_in_chunks():
    # each thread's step j reads its neighbour's step j - 1: thread by thread within each j, as
    # the interchange runs it, never a chunk's threads through all their steps first
    src = ROW_DOTS.replace("acc = acc * 0.75f + as[j] * bs[j][tx];",
                           "bs[j + 1][tx] += bs[j][tx ^ 1];")
    text = split_kernel(src, "row_dots").text
    assert text is not None and "tm_x0_" not in text


@pytest.mark.parametrize("loop,chunked", [
    ("float part[2] = {0.f, 0.f}; for (int j = 0; j < k; ++j) part[1] += as[j] * bs[j][tx];"
     " acc = part[0] + part[1];", True),   # a local array of its own: the thread's state
    ("for (int j = 0; j < k; ++j) as[j & 63] += bs[j][tx];", False),   # shared memory
    ("float part[64]; for (int j = 0; j < k; ++j) part[j] = as[j] * bs[j][tx]; acc = part[3];",
     False),   # nothing carried from one iteration to the next
])
def test_which_loops_run_in_chunks(loop, chunked):
    src = ROW_DOTS.replace("    for (int j = 0; j < k; ++j)\n        acc = acc * 0.75f + as[j] * bs[j][tx];",
                           "    " + loop)
    assert src != ROW_DOTS
    assert ("tm_x0_" in split_kernel(src, "row_dots").text) == chunked
