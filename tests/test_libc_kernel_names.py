"""Kernels named like a libc/POSIX function (`select`, `index`, `time`): on emu the system
headers declare that function too, so the kernel's name is an overload set there. tm.compile's
launcher names the kernel through a pointer of its exact type (compile_emu._launcher: the
parameters' types, as Param.type_text spells them, or check mode's checked types), and a
program's split registers the kernel cast to its split's type (program_build._split_text).
Every launch has a time limit (TIMEOUT_S); programs have RUN_S. Kernels that write their input
in place launch once (warmup=0, repeat=1: the GPU's default runs several timed launches).
Check mode runs on the emulator only."""
import numpy as np
import pytest

import tiledmm as tm

TIMEOUT_S = 30
RUN_S = 120

# The block's elements reversed through shared memory, scaled: a barrier, so the plain build
# takes the thread loops (the split) and check mode the fibers.
SELECT = r"""
__global__ void select(const float *x, float *out, float a, int n)
{
    __shared__ float s[64];
    s[threadIdx.x] = a * x[threadIdx.x];
    __syncthreads();
    if (threadIdx.x < n) out[threadIdx.x] = s[n - 1 - threadIdx.x];
}
"""

# No barrier; libc's index(const char *, int) and time(time_t *) return non-void.
INDEX = r"""
__global__ void index(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3 * i + 1;
}
"""
TIME = r"""
__global__ void time(double *t, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) t[i] = t[i] * t[i];
}
"""

# A template named like a libc function: `select<float, 2>` names only the template.
SELECT_TEMPLATE = r"""
template <typename T, int K>
__global__ void select(T *x, int n)
{
    __shared__ T s[64];
    s[threadIdx.x] = K * x[threadIdx.x];
    __syncthreads();
    if (threadIdx.x < n) x[threadIdx.x] = s[n - 1 - threadIdx.x];
}
"""


def _x(n, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def _skip_check_on_cuda(backend, check):
    if check and backend == "cuda":
        pytest.skip("check mode runs on the emulator (tm.compile refuses it on cuda)")

ONCE = {"warmup": 0, "repeat": 1, "timeout": TIMEOUT_S}   # in-place kernels


@pytest.mark.parametrize("check", [False, True], ids=["plain", "check"])
def test_a_kernel_named_select(backend, check):
    _skip_check_on_cuda(backend, check)
    x, out = _x(64, 1), np.zeros(64, np.float32)
    res = tm.compile(SELECT, "select", backend=backend, check=check)(
        1, 64, x, out, np.float32(1.5), 64, timeout=TIMEOUT_S)
    np.testing.assert_allclose(out, (1.5 * x.astype(np.float64))[::-1], rtol=1e-6)
    if backend == "emu":
        assert res.launch.path == ("fibers" if check else "thread loops"), res.launch.path_reason


@pytest.mark.parametrize("src, name, dtype, expect", [
    (INDEX, "index", np.int32, lambda a: 3 * np.arange(a.size) + 1),
    (TIME, "time", np.float64, lambda a: a * a),
], ids=["index", "time"])
def test_kernels_named_index_and_time(backend, src, name, dtype, expect):
    a = _x(100, 2, dtype) if dtype == np.float64 else np.zeros(100, dtype)
    want = expect(a.copy())
    tm.compile(src, name, backend=backend)(2, 64, a, a.size, **ONCE)
    np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("check", [False, True], ids=["plain", "check"])
def test_a_template_kernel_named_select(backend, check):
    _skip_check_on_cuda(backend, check)
    x = _x(64, 3)
    want = (2 * x)[::-1]
    tm.compile(SELECT_TEMPLATE, "select<float, 2>", backend=backend, check=check)(
        1, 64, x, 64, **ONCE)
    np.testing.assert_array_equal(x, want)


# The launcher's pointer type must be the kernel's exactly: qualifiers the arrays do not need
# (volatile elements, const row pointers, a restrict pointer, a const number) included.
QUALIFIED = r"""
#define N 8
__global__ void select(volatile float *v, const float *const *rows, const float B[][N],
                       float *__restrict__ out, const int n)
{
    int i = threadIdx.x;
    if (i < n) out[i] = v[i] + rows[1][i] + B[2][i];
    v[i] = 0.0f;
}
"""


@pytest.mark.parametrize("check", [False, True], ids=["plain", "check"])
def test_qualified_parameters_keep_the_kernels_exact_type(backend, check):
    _skip_check_on_cuda(backend, check)
    v, rows, b = _x(8, 4), _x(16, 5).reshape(2, 8), _x(24, 6).reshape(3, 8)
    want = v + rows[1] + b[2]
    out = np.zeros(8, np.float32)
    tm.compile(QUALIFIED, "select", backend=backend, check=check)(
        1, 8, v, rows, b, out, 8, **ONCE)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(v, np.zeros(8, np.float32))


PROGRAM = SELECT + r"""
#include <cstdio>
int main()
{
    const int n = 64;
    float h[n], *dx, *dout;
    for (int i = 0; i < n; ++i) h[i] = 0.25f * i - 3.0f;
    cudaMalloc(&dx, n * sizeof(float));
    cudaMalloc(&dout, n * sizeof(float));
    cudaMemcpy(dx, h, n * sizeof(float), cudaMemcpyHostToDevice);
    select<<<1, n>>>(dx, dout, 2.0f, n);
    if (cudaMemcpy(h, dout, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
    for (int i = 0; i < n; ++i) printf("%.9g\n", h[i]);
    cudaFree(dx); cudaFree(dout);
    return 0;
}
"""


@pytest.mark.parametrize("check", [False, True], ids=["plain", "check"])
def test_a_program_whose_kernel_is_named_select(check):
    r = tm.run(PROGRAM, backend="emu", check=check, timeout=RUN_S)
    assert r.returncode == 0, r.stderr
    got = np.array(r.stdout.split(), dtype=np.float32)
    h = 0.25 * np.arange(64) - 3.0
    np.testing.assert_array_equal(got, (2.0 * h)[::-1].astype(np.float32))
    launch, = r.launches
    assert (launch.kernel, launch.path) == ("select", "fibers" if check else "thread loops"), \
        launch.path_reason
