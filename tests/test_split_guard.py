"""A thread-dependent `if` around a loop, written as guarded statements before the split
(tiledmm/toolchain/split/guard.py, issue 46): the naive matmul's k loop goes outside the thread
loops, chunks whose threads are all active drop the guard, and the results are the fibers' bit
for bit (check mode runs the fibers); shapes the rewrite cannot take keep the text as it was."""
import numpy as np
import pytest

import tiledmm as tm
from tiledmm.toolchain.split.transform import K_TILE, split_kernel

# Every launch here has tm.compile's kernel time limit (60 s by default): a hang fails.

# C has `ldc` columns, n of them C's own: the rest (padding) must stay NaN, which it does only
# where threads whose guard is false write nothing.
NAIVE_IF = r"""
__global__ void naive(const float *A, const float *B, float *C, int m, int n, int k, int ldc)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < n) {
        float sum = 0.0f;
        for (int i = 0; i < k; ++i)
            sum += A[row * k + i] * B[i * n + col];
        C[row * ldc + col] = sum;
    }
}
"""

NAIVE_RETURN = r"""
__global__ void naive(const float *A, const float *B, float *C, int m, int n, int k, int ldc)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n) return;
    float sum = 0.0f;
    for (int i = 0; i < k; ++i)
        sum += A[row * k + i] * B[i * n + col];
    C[row * ldc + col] = sum;
}
"""

# a column index that is negative for a block's first threads (the int recomputation of
# `col` in a chunk must give the unsigned arithmetic's value)
SHIFTED = r"""
__global__ void naive(const float *A, const float *B, float *C, int m, int n, int k, int ldc)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x - 3;
    if (row < m && col >= 0 && col < n) {
        float sum = 0.0f;
        for (int i = 0; i < k; ++i)
            sum += A[row * k + i] * B[i * n + col];
        C[row * ldc + col] = sum;
    }
}
"""


def _run(src, block, m, n, k, check=False, shift=0):
    rng = np.random.default_rng(m * 131 + n * 7 + k)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    ldc = n + 5
    C = np.full((m, ldc), np.nan, np.float32)
    grid = (-(-(n + shift) // block[0]), -(-m // block[1]))
    res = tm.compile(src, backend="emu", check=check)(
        grid, block, A, B, C, np.int32(m), np.int32(n), np.int32(k), np.int32(ldc))
    assert np.isnan(C[:, n:]).all(), "a thread whose guard is false wrote"
    ref = A.astype(np.float64) @ B.astype(np.float64)
    tol = 1e-6 * k * np.abs(A).max() * np.abs(B).max() * 4
    np.testing.assert_allclose(C[:, :n], ref, rtol=0, atol=tol)
    return res, C


@pytest.mark.parametrize("src,shift", [(NAIVE_IF, 0), (NAIVE_RETURN, 0), (SHIFTED, 3)])
@pytest.mark.parametrize("block", [(16, 16), (32, 4), (48, 2), (8, 8)])
# k = 300: nine tiles of 32 iterations and one of 12 (K_TILE)
@pytest.mark.parametrize("m,n,k", [(37, 53, 29), (16, 64, 100), (5, 17, 300)])
def test_a_guarded_loop_splits_with_the_fibers_bits(src, shift, block, m, n, k):
    assert K_TILE == 32   # (the shapes above take one tile or several, the last partial)
    res, got = _run(src, block, m, n, k, shift=shift)
    assert res.launch.path == "thread loops", res.launch.path_reason
    res_f, want = _run(src, block, m, n, k, check=True, shift=shift)
    assert res_f.launch.path == "fibers"
    np.testing.assert_array_equal(got, want)   # the same sums in the same order


@pytest.mark.parametrize("src", [NAIVE_IF, NAIVE_RETURN, SHIFTED])
def test_the_loop_leaves_the_threads_and_full_chunks_drop_the_guard(src):
    text = split_kernel(src, "naive").text
    assert text is not None
    assert "const bool tm_guard_1_ = " in text
    # the k loop around the loop over a row's threads, in chunks and in tiles of K_TILE
    # iterations around the block's rows, with the all-active path
    assert "const int tm_kend_ = (k);" in text
    assert "for (int i = tm_k0_; i < tm_k1_; ++i)" in text.split("tm_x0_ += ")[1]
    assert "if (tm_all_)" in text and "const bool tm_guard_1_ = true;" in text
    # col over int built-ins in the chunk (one vector load of B, not 16 scalar ones)
    assert "&tm_threadIdx_ = tm_stid_; (blockIdx.x * blockDim.x + threadIdx.x" in text


def test_a_profile_build_is_not_guarded():
    plan = split_kernel(NAIVE_IF, "naive", profile=True)
    assert plan.text is None or "tm_guard_" not in plan.text


@pytest.mark.parametrize("change", [
    # the loop's header reads memory: a thread whose guard is false must not evaluate it
    ("for (int i = 0; i < k; ++i)", "for (int i = 0; i < *lens; ++i)"),
    # the branch's `sum` is also declared after the if: flattening its scope would clash
    ("        C[row * ldc + col] = sum;\n    }\n",
     "        C[row * ldc + col] = sum;\n    }\n    float sum = 1.0f; (void)sum;\n"),
    # a jump out of the branch's loop
    ("sum += A[row * k + i] * B[i * n + col];",
     "{ sum += A[row * k + i] * B[i * n + col]; if (sum > 1e30f) break; }"),
    # one thread's serial loop: every thread would step through it to find its guard false
    ("if (row < m && col < n) {", "if (row == 0 && col == 0) {"),
    # no loop in the branch: nothing to gain
    ("        for (int i = 0; i < k; ++i)\n            sum += A[row * k + i] * B[i * n + col];\n",
     "        sum += A[row * k] * B[col];\n"),
])
def test_what_the_guard_pass_leaves_as_it_was(change):
    src = NAIVE_IF.replace(*change).replace("int ldc)", "int ldc, const int *lens)")
    assert src != NAIVE_IF.replace("int ldc)", "int ldc, const int *lens)")
    plan = split_kernel(src, "naive")
    assert plan.text is None or "tm_guard_" not in plan.text


def test_an_unsafe_initializer_is_guarded_and_other_declarations_kept():
    src = NAIVE_IF.replace("float sum = 0.0f;", "float sum = A[row * k] * 0.0f; int j = 1; sum *= j;")
    text = split_kernel(src, "naive").text
    assert "tm_guard_1_ ? (A[row * k] * 0.0f) : 0" in text
    res, got = _run(src, (16, 16), 37, 53, 29)
    assert res.launch.path == "thread loops", res.launch.path_reason
    _, want = _run(src, (16, 16), 37, 53, 29, check=True)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("init", [
    "(threadIdx.x - 1) / 2",          # division: unsigned and int differ below zero
    "threadIdx.x < 3 ? 1 : 2",        # a comparison
])
def test_recomputed_locals_the_int_form_would_change_stay_unsigned(init):
    src = NAIVE_IF.replace("int col = blockIdx.x * blockDim.x + threadIdx.x;",
                           f"int h = {init}; int col = blockIdx.x * blockDim.x + threadIdx.x + h * 0;")
    text = split_kernel(src, "naive").text
    assert text is not None and "tm_guard_1_" in text
    assert f"int h = {init};" in text   # as written, never over int built-ins


def test_a_fault_in_a_full_chunk_names_the_block():
    """A chunk notes no thread (its loop vectorises): a fault there names the block, and says
    check=True names the thread."""
    src = NAIVE_IF.replace("B[i * n + col]", "B[i * n + col + (col == 20 && row == 3 ? (1LL << 40) : 0)]")
    A = np.ones((4, 8), np.float32)
    B = np.ones((8, 32), np.float32)
    C = np.zeros((4, 32), np.float32)
    with pytest.raises(tm.KernelError, match=r"by a thread of block \(0,0,0\)"):
        tm.compile(src, backend="emu")((1, 1), (32, 4), A, B, C, np.int32(4), np.int32(32),
                                       np.int32(8), np.int32(32))
