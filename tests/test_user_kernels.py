"""tm.compile: user kernels compiled at run time (NVRTC on cuda, g++ on emu), launched on NumPy
and device arrays; compile errors with the user's line numbers; argument checks; the emulator's
reports (check mode's out-of-bounds access, a divergent barrier); the cache; the checker.
Compiles are cached on disk (TILEDMM_CACHE_DIR or ~/.cache/tiledmm), so reruns are quick."""
import time

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.user_kernels import kernel as user_kernels

SCALE = r"""
// y = a * x
__global__ void scale(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""

# The lecture's tiled kernel: Width x Width, Width a multiple of TILE.
SQUARE = r"""
#define TILE 16
__global__ void matmul_square(const float *A, const float *B, float *C, int Width)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int t = 0; t < Width / TILE; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * Width + t * TILE + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * Width + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) sum += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * Width + col] = sum;
}
"""

RECT = r"""
#define TILE 16
__global__ void matmul_rect(const float *A, const float *B, float *C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int a_col = t * TILE + threadIdx.x, b_row = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) sum += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = sum;
}
"""

SUM = r"""
__global__ void block_sum(const float *x, float *out, int n)
{
    TM_DYNAMIC_SHARED(float, s);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
"""


def tiles(M, N, K):
    return ((N + 15) // 16, (M + 15) // 16), (16, 16)


def test_correct_kernel_returns_a_result(backend, rng):
    kernel = tm.compile(SCALE, backend=backend)
    assert [p.name for p in kernel.params] == ["x", "y", "a", "n"]
    x = rng.random(1000).astype(np.float32)
    y = np.zeros_like(x)
    res = kernel((4,), (256,), x, y, 2.5, x.size, backend=backend, flops=x.size)
    assert res.out is y
    np.testing.assert_allclose(y, 2.5 * x, rtol=1e-6)
    assert res.launch.grid == (4, 1, 1) and res.launch.block == (256, 1, 1)
    assert res.timing.kernel_ms > 0 and res.timing.h2d_bytes == 8000
    assert res.timing.d2h_bytes == 4000 and res.backend == backend
    out, timing = res
    assert out is y and timing is res.timing
    assert "scale" in repr(res)


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_device_arrays_and_dynamic_shared_memory(backend, rng, isolate):
    kernel = tm.compile(SUM, backend=backend, isolate=isolate)
    x = rng.random(1000).astype(np.float32)
    dx = tm.to_device(x, backend=backend)
    partial = tm.to_device(np.full(4, np.nan, np.float32), backend=backend)
    res = kernel(4, 256, dx, partial, x.size, shared_bytes=256 * 4, backend=backend)
    # in this process the kernel reads device arrays in place; the worker process gets them
    # through its shared memory, and the timing counts those copies
    assert res.out is partial and res.timing.h2d_bytes == (4016 if isolate else 0)
    tm.testing.assert_sum_close(partial.get().astype(np.float64).sum(), x)


def test_bad_source_reports_the_users_line_numbers(backend):
    source = "__global__ void broken(float *y)\n{\n    y[0] = 1.0f\n    y[1] = undeclared;\n}\n"
    with pytest.raises(tm.CompileError) as info:
        tm.compile(source, backend=backend)
    text = str(info.value)
    assert "broken" in text
    assert "kernel.cu:3" in text or "kernel.cu(3)" in text or \
        "kernel.cu:4" in text or "kernel.cu(4)" in text, text
    assert isinstance(info.value, ValueError) and info.value.log


def test_signature_problems_are_reported_before_compiling():
    with pytest.raises(tm.CompileError, match="no `__global__"):
        tm.compile("int f(int x) { return x; }", backend="emu")
    with pytest.raises(tm.CompileError, match="not supported"):
        tm.compile("struct S { int a; };\n__global__ void k(S *p) {}", backend="emu")
    with pytest.raises(ValueError, match="choose one with name="):
        tm.compile("__global__ void a(int n) {}\n__global__ void b(int n) {}", backend="emu")


def test_wrong_argument_counts_and_types(backend):
    kernel = tm.compile(SCALE, backend=backend)
    x = np.ones(8, np.float32)
    y = np.zeros(8, np.float32)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        kernel(1, 8, x, y, 2.0, backend=backend)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        kernel(1, 8, x, y, 2.0, 8, 9, backend=backend)
    with pytest.raises(TypeError, match="float32"):
        kernel(1, 8, x.astype(np.float64), y, 2.0, 8, backend=backend)
    with pytest.raises(TypeError, match="NumPy array"):
        kernel(1, 8, [1.0] * 8, y, 2.0, 8, backend=backend)
    with pytest.raises(TypeError, match="number"):
        kernel(1, 8, x, y, "2", 8, backend=backend)
    with pytest.raises(TypeError, match="integer"):
        kernel(1, 8, x, y, 2.0, 8.5, backend=backend)
    with pytest.raises(ValueError, match="out of range"):
        kernel(1, 8, x, y, 2.0, 2**40, backend=backend)
    with pytest.raises(ValueError, match="writeable"):
        ro = np.zeros(8, np.float32)
        ro.flags.writeable = False
        kernel(1, 8, x, ro, 2.0, 8, backend=backend)
    with pytest.raises(TypeError, match="grid"):
        kernel("1", 8, x, y, 2.0, 8, backend=backend)
    res = kernel(1, 8, x, y, 2.0, 8, backend=backend)   # and the next call works
    assert np.array_equal(res.out, 2 * x)


def test_out_of_bounds_write_in_check_mode():
    source = SCALE.replace("if (i < n) y[i]", "y[i]").replace("a * x[i]", "a")
    kernel = tm.compile(source, backend="emu")
    y = np.zeros(1000, np.float32)
    with pytest.raises(tm.KernelError) as info:
        kernel(4, 256, np.zeros(1000, np.float32), y, 1.0, 1000, backend="emu", check=True)
    text = str(info.value)
    assert "y[1000]" in text and "1000 elements" in text, text
    assert "thread (232,0,0) of block (3,0,0)" in text, text
    assert np.all(y == 0)   # a failed launch copies nothing back
    y = np.zeros(1024, np.float32)   # with a big enough buffer it is correct
    kernel(4, 256, np.zeros(1000, np.float32), y, 1.0, 1000, backend="emu", check=True)
    assert np.all(y == 1)


def test_divergent_barrier_is_reported():
    source = r"""
__global__ void diverge(float *y)
{
    if (threadIdx.x < 16)
        __syncthreads();
    y[threadIdx.x] = 1.0f;
}
"""
    kernel = tm.compile(source, backend="emu")
    with pytest.raises(tm.KernelError) as info:
        kernel(1, 32, np.zeros(32, np.float32), backend="emu")
    text = str(info.value)
    assert "__syncthreads() at kernel.cu:5" in text and "block (0,0,0)" in text, text
    res = kernel(1, 16, np.zeros(32, np.float32), backend="emu")   # the emulator still works
    assert res.out[:16].sum() == 16


def test_compiled_code_is_cached(backend):
    source = SCALE.replace("y = a * x", f"cache test {time.time()}")  # new source: compiled once
    before = user_kernels.cache_info()
    tm.compile(source, backend=backend)
    assert user_kernels.cache_info()["compiled"] == before["compiled"] + 1
    start = time.perf_counter()
    tm.compile(source, backend=backend)
    assert time.perf_counter() - start < 0.1
    assert user_kernels.cache_info()["memory_hits"] == before["memory_hits"] + 1
    user_kernels.clear_cache()            # a new process: found on disk, not recompiled
    tm.compile(source, backend=backend)
    after = user_kernels.cache_info()
    assert after["compiled"] == before["compiled"] + 1
    assert after["disk_hits"] == before["disk_hits"] + 1


def test_checker_fails_the_square_only_kernel_and_passes_the_fixed_one(backend):
    square = tm.compile(SQUARE, backend=backend)
    shapes = [(32, 32, 32), (17, 17, 17), (48, 16, 32), (1, 1, 1)]
    report = tm.check_matmul(square, tiles, shapes, backend=backend,
                             args=lambda A, B, C, M, N, K: (A, B, C, N),
                             check=backend == "emu")
    assert [r["passed"] for r in report.rows] == [True, False, False, False]
    assert not report.all_passed and len(report.failures) == 3
    with pytest.raises(AssertionError, match="1 of 4 shapes pass"):
        report.assert_passed()
    if backend == "emu":
        assert "thread" in report.rows[1]["message"]

    fixed = tm.check_matmul(tm.compile(RECT, backend=backend), tiles, backend=backend)
    fixed.assert_passed()
    assert len(fixed.rows) == len(tm.grading.checkers.MATMUL_SHAPES)
    assert all(r["max_error"] <= r["tolerance"] for r in fixed.rows)


def test_checker_for_reductions(backend):
    kernel = tm.compile(SUM, backend=backend)
    launch = lambda n: (max(1, (n + 255) // 256), 256, 256 * 4)   # noqa: E731
    tm.check_reduce(kernel, launch, backend=backend).assert_passed()
    # one block too few: the tail of x is never read
    short = lambda n: (max(1, n // 256), 256, 256 * 4)   # noqa: E731
    report = tm.check_reduce(kernel, short, [100, 1000], backend=backend)
    assert [r["passed"] for r in report.rows] == [True, False]


def test_the_checker_launches_each_case_once(backend):
    """An accumulating kernel (atomics into out[0]) is graded on one launch per case, not on
    the backend's default warm-up and repeats (cuda: 2 + 10, which would sum x twelve times)."""
    atomic_sum = tm.compile(r"""
__global__ void atomic_sum(const float *x, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&out[0], x[i]);
}""", backend=backend)
    report = tm.check_reduce(atomic_sum, lambda n: (max(1, (n + 255) // 256), 256),
                             [1, 1000, 4099], backend=backend)
    report.assert_passed()


def test_the_checker_shows_a_fault_report():
    """A kernel that faults in the worker: the checker's row carries the fault report."""
    trapping = tm.compile(r"""
__global__ void sum_or_trap(const float *x, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[0] += x[i * 4096];
}""", backend="emu")
    report = tm.check_reduce(trapping, lambda n: (max(1, (n + 255) // 256), 256), [4099],
                             backend="emu")
    [row] = report.rows
    assert not row["passed"]
    assert row["message"].startswith("KernelError: invalid memory access (SIGSEGV)"), row["message"]
    assert "by thread" in row["message"] and "started again" not in row["message"]
