"""Check mode (tm.compile(..., check=True), emulator only) and tm.check_matmul / tm.check_reduce
on the lectures' own kernels, typed as a student would (with only the fixes that make them
compile), and on correct ones:
- a check belongs to one launch: threads checking one kernel at once get their own verdicts;
- out-of-bounds accesses say whether they read or wrote;
- write-write races in global memory (two blocks, or two threads of a block between barriers),
  and reads racing with writes (a block reading what another block of the launch writes);
- reads of shared memory that no thread of the block wrote;
- outputs a launch never wrote, in the checker's reports;
- the lectures' in-place, multi-pass reductions graded by check_reduce;
- casts of checked parameters compile, and reports name the student's types;
- array parameters (float A[][N]), float ** and float4 * are bounds-checked, reported with the
  indices as written (A[0][40], C[40][0] for a row beyond the table of row pointers).
"""
import os
import re
import threading

import numpy as np
import pytest

import tiledmm as tm

pytestmark = pytest.mark.filterwarnings("ignore")

SCALE = r"""
__global__ void scale(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def _report(kernel, *args, **kwargs):
    """The KernelError text of a launch that must fail."""
    with pytest.raises(tm.KernelError) as info:
        kernel(*args, backend="emu", **kwargs)
    return str(info.value)


# ---- issue 18: one check per launch ----

def test_threads_checking_one_kernel_get_their_own_verdicts():
    kernel = tm.compile(SCALE, backend="emu", check=True, isolate=False)
    n = 1 << 15
    x = np.ones(n, np.float32)
    verdicts = {"buggy": [], "correct": []}
    start = threading.Barrier(2)

    def run(kind):
        start.wait()
        for _ in range(60):
            y = np.zeros(n, np.float32)
            # the buggy call claims one element more than the arrays hold: x[n] is read
            count = n + 1 if kind == "buggy" else n
            try:
                kernel((n + 256) // 256, 256, x, y, 2.0, count, backend="emu")
                verdicts[kind].append("passed" if np.all(y == 2) else "wrong")
            except tm.KernelError as exc:
                verdicts[kind].append(str(exc))

    threads = [threading.Thread(target=run, args=(k,)) for k in verdicts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert verdicts["correct"] == ["passed"] * 60, [v for v in verdicts["correct"] if v != "passed"][:3]
    assert len(verdicts["buggy"]) == 60
    for text in verdicts["buggy"]:
        assert f"out-of-bounds read of x[{n}]" in text, text


# ---- the lectures' kernels ----

# Lecture 002, thread coarsening, as printed: colStart lacks + tx, so both threads of a row
# write the same element of P and the odd columns are never written.
LECTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lectures")


def lecture_source(name):
    """A listing as tests/lectures/ keeps it (the lecture's text with its recorded fixes)."""
    with open(os.path.join(LECTURES, name + ".cu")) as f:
        return f.read()


MAT_MUL_COARSE = lecture_source("002_matMulCoarse")
MAT_MUL_COARSE_FIXED = MAT_MUL_COARSE.replace("bx * TILE_WIDTH * COARSE_FACTOR;",
                                              "bx * TILE_WIDTH * COARSE_FACTOR + tx;")
SQUARE_ARGS = lambda A, B, C, M, N, K: (A, B, C, N)   # noqa: E731
COARSE_GRID = lambda M, N, K: ((N // 6, M // 2), (2, 2))   # noqa: E731


def test_mat_mul_coarse_race_is_found_by_check_mode(rng):
    kernel = tm.compile(MAT_MUL_COARSE, backend="emu", check=True)
    W = 12
    A = rng.random((W, W)).astype(np.float32)
    B = rng.random((W, W)).astype(np.float32)
    text = _report(kernel, (W // 6, W // 2), (2, 2), A, B, np.zeros((W, W), np.float32), W)
    assert "global-memory race (write after write) on P[0]" in text, text
    assert "(the buffer passed for 'P' (float *)) in block (0,0,0)" in text, text
    assert "thread (1,0,0) writes it after thread (0,0,0) wrote it" in text, text
    assert "tm_checked_ptr" not in text


def test_mat_mul_coarse_unwritten_columns_in_the_checker_report():
    kernel = tm.compile(MAT_MUL_COARSE, backend="emu")
    report = tm.check_matmul(kernel, COARSE_GRID, [(12, 12, 12)], args=SQUARE_ARGS, backend="emu")
    assert not report.all_passed
    message = report.rows[0]["message"]
    assert "72 of 144 elements of C never written (first C[0][1])" in message, message


def test_mat_mul_coarse_fixed_passes_check_mode_and_the_checker(rng):
    kernel = tm.compile(MAT_MUL_COARSE_FIXED, backend="emu", check=True)
    report = tm.check_matmul(kernel, COARSE_GRID, [(12, 12, 12), (24, 24, 24)], args=SQUARE_ARGS,
                             backend="emu", check=True)
    report.assert_passed()


# Lecture 000's simple kernel, with the 2-D subscripts a student must flatten to compile.
MATRIX_MUL_SIMPLE = r"""
__global__ void MatrixMulKernel(float* d_M, float* d_N, float* d_P, int Width)
{
    // Calculate the row index of the d_P element and d_M
    int Row = blockIdx.y*blockDim.y+threadIdx.y;
    // Calculate the column index of d_P and d_N
    int Col = blockIdx.x*blockDim.x+threadIdx.x;

    if ((Row < Width) && (Col < Width)) {
        float Pvalue = 0;
        // each thread computes one element of the block sub-matrix
        for (int k = 0; k < Width; ++k) {
            Pvalue += d_M[Row*Width+k] * d_N[k*Width+Col];
        }
        d_P[Row*Width+Col] = Pvalue;
    }
}
"""


def test_floor_division_grid_leaves_outputs_never_written():
    kernel = tm.compile(MATRIX_MUL_SIMPLE, backend="emu", check=True)
    floor = lambda M, N, K: ((N // 16, M // 16), (16, 16))   # noqa: E731
    report = tm.check_matmul(kernel, floor, [(32, 32, 32), (40, 40, 40)], args=SQUARE_ARGS,
                             backend="emu", check=True)
    assert [r["passed"] for r in report.rows] == [True, False]
    message = report.rows[1]["message"]
    assert "576 of 1600 elements of C never written (first C[0][32])" in message, message
    assert "the elements written are right" in message, message
    ceil = lambda M, N, K: (((N + 15) // 16, (M + 15) // 16), (16, 16))   # noqa: E731
    tm.check_matmul(kernel, ceil, [(32, 32, 32), (40, 40, 40)], args=SQUARE_ARGS,
                    backend="emu", check=True).assert_passed()


# Lecture 001's shared-memory reduction (idea 2.3), with the fixes that make it compile:
# `external` -> `extern`, `d <= 1` -> `d <<= 1`. It is launched once per depth, as the host loop
# of the notes does (the notes' loop names reduce_2_2 by mistake).
REDUCE_2_3 = lecture_source("001_reduce_2_3").replace("d <= 1", "d <<= 1")
# The same with what a length that is not a multiple of the block needs: the count of elements
# left rounds up, and threads past it contribute zero.
REDUCE_2_3_FIXED = REDUCE_2_3.replace(
    "    int iters = min(blockDim.x, length/depth);",
    "    int count = (length + depth - 1) / depth;\n    int iters = min(blockDim.x, count);"
).replace("if(i < length/depth) { sh_mem[tid] = A[i*depth]; }",
          "sh_mem[tid] = i < count ? A[i*depth] : 0.0f;").replace(
    "if(i < length/(depth) && i % (2*d) == 0)", "if(i < count && i % (2*d) == 0)").replace(
    "if(i < length/depth) { A[i*depth]", "if(i < count) { A[i*depth]")


def depth_passes(n, block=256):
    """The notes' host loop: for (d = 1; d < length; d *= blockDim) one launch with depth d."""
    passes, depth = [], 1
    while depth < n:
        passes.append(((n + block - 1) // block, block, block * 4, {"depth": depth}))
        depth *= block
    return passes


def test_reduce_2_3_reads_shared_memory_no_thread_wrote():
    kernel = tm.compile(REDUCE_2_3, backend="emu", check=True)
    report = tm.check_reduce(kernel, depth_passes, [1024, 65536, 1000], backend="emu", check=True)
    assert [r["passed"] for r in report.rows] == [True, True, False], report
    message = report.rows[2]["message"]
    assert "read of uninitialised shared memory: sh_mem[232]" in message, message
    assert "by thread (224,0,0) of block (3,0,0)" in message, message
    # without check mode the checker still sees the wrong sum
    plain = tm.check_reduce(tm.compile(REDUCE_2_3, backend="emu"), depth_passes, [1000],
                            backend="emu")
    assert not plain.all_passed and "sum: got" in plain.rows[0]["message"]


def test_reduce_2_3_fixed_passes_in_place_with_passes():
    kernel = tm.compile(REDUCE_2_3_FIXED, backend="emu", check=True)
    tm.check_reduce(kernel, depth_passes, backend="emu", check=True).assert_passed()


# Lecture 001's idea 1 (a kernel per level), with `d <= 1` -> `d <<= 1` in the host loop.
REDUCE_1 = r"""
__global__ void reduce_1(float * A, int length,
                        int d) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if(i < length && i % (d << 1) == 0) {
        A[i] += A[i+d];
    }
}
"""


def level_passes(n, block=256):
    passes, d = [], 1
    while d < n:
        passes.append(((n + block - 1) // block, block, {"d": d}))
        d <<= 1
    return passes


def test_reduce_1_reads_past_the_end_when_length_is_not_a_power_of_two():
    kernel = tm.compile(REDUCE_1, backend="emu", check=True)
    report = tm.check_reduce(kernel, level_passes, [1024, 1000], backend="emu", check=True)
    assert [r["passed"] for r in report.rows] == [True, False], report
    message = report.rows[1]["message"]
    assert "out-of-bounds read of A[1000] (the buffer passed for 'A' (float *) has 1000 elements)" \
        in message, message


def test_reduction_grid_that_rounds_down_says_which_elements_were_not_added():
    source = r"""
__global__ void partial(const float *x, float *out, int n)
{
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
"""
    kernel = tm.compile(source, backend="emu", check=True)
    report = tm.check_reduce(kernel, lambda n: (max(1, n // 256), 256), [1000], backend="emu",
                             check=True)
    message = report.rows[0]["message"]
    assert "it is the sum of x[:768]: the last 232 elements (x[768:]) were never added" in message, \
        message
    tm.check_reduce(kernel, lambda n: (max(1, (n + 255) // 256), 256), backend="emu",
                    check=True).assert_passed()


def test_in_place_reduction_that_never_writes_a0():
    source = r"""
__global__ void lost(float *A, int length)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 1) A[1] = A[0] + A[1];
}
"""
    report = tm.check_reduce(tm.compile(source, backend="emu"), lambda n: (1, 32), [10],
                             backend="emu")
    assert "A[0] still holds x[0] after 1 pass" in report.rows[0]["message"], report


# ---- global-memory write-write races ----

def test_blocks_writing_one_element_race():
    source = r"""
__global__ void last(float *out)
{
    if (threadIdx.x == 0) out[0] = blockIdx.x;
}
"""
    kernel = tm.compile(source, backend="emu", check=True)
    text = _report(kernel, 4, 32, np.zeros(1, np.float32))
    assert "global-memory race (write after write) on out[0]" in text, text
    # which other block is named depends on which blocks ran side by side
    assert re.search(r"thread \(0,0,0\) of block \(0,0,0\) and thread \(0,0,0\) of block "
                     r"\([123],0,0\) both write it", text), text
    kernel(1, 32, np.zeros(1, np.float32), backend="emu")   # one block: one writer


ORDERED = r"""
__global__ void ordered(float *y)
{
    if (threadIdx.x == 0) y[0] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 1) y[0] = 2.0f;
}
"""


def test_writes_ordered_by_a_barrier_pass_and_unordered_ones_race():
    y = np.zeros(1, np.float32)
    tm.compile(ORDERED, backend="emu", check=True)(1, 32, y, backend="emu")
    assert y[0] == 2.0
    racy = tm.compile(ORDERED.replace("__syncthreads();", ""), backend="emu", check=True)
    text = _report(racy, 1, 32, np.zeros(1, np.float32))
    assert "on y[0]" in text and "thread (1,0,0) writes it after thread (0,0,0) wrote it" in text, \
        text


def test_atomics_and_own_rewrites_are_not_races():
    source = r"""
__global__ void count(const float *x, float *total, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 0.0f;
        y[i] += x[i];                     // the same thread again
        atomicAdd(&total[0], x[i]);       // every block, atomically
        atomicAdd(total + 1, 1.0f);
    }
}
"""
    kernel = tm.compile(source, backend="emu", check=True)
    x = np.ones(1000, np.float32)
    total, y = np.zeros(2, np.float32), np.zeros(1000, np.float32)
    kernel(4, 256, x, total, y, 1000, backend="emu")
    assert total.tolist() == [1000.0, 1000.0] and np.all(y == 1)
    text = _report(kernel, 4, 256, x, np.zeros(1, np.float32), y, 1000)
    assert "out-of-bounds atomic of total[1]" in text and "has 1 element)" in text, text


# ---- shared memory never written ----

def test_uninitialised_shared_read_and_raw_pointer_writes():
    source = r"""
__global__ void neighbour(float *y)
{
    __shared__ float s[64];
    if (threadIdx.x < 32) s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
"""
    kernel = tm.compile(source, backend="emu", check=True)
    text = _report(kernel, 1, 64, np.zeros(64, np.float32))
    assert "read of uninitialised shared memory: s[32] (__shared__ s[64]) by thread (31,0,0)" \
        in text, text
    # written through a raw pointer: not tracked, so not reported either
    raw = source.replace("if (threadIdx.x < 32) s[threadIdx.x] = threadIdx.x;",
                         "float *p = s; p[threadIdx.x] = threadIdx.x;")
    y = np.zeros(64, np.float32)
    tm.compile(raw, backend="emu", check=True)(1, 64, y, backend="emu")
    assert y.tolist() == [float((i + 1) % 64) for i in range(64)]


# ---- casts and the names in reports ----

CASTS = r"""
#define W 8
__global__ void casts(const float *x, float *y, float *m, int n4)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float (*rows)[W] = (float (*)[W])m;                      // a C cast: unchecked from here
    if (i < W) rows[i][i] = 1.0f;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);   // plain pointer: unchecked
    if (i < n4) {
        float4 v = x4[i];
        v.x *= 2.0f; v.y *= 2.0f; v.z *= 2.0f; v.w *= 2.0f;
        reinterpret_cast<float4 *>(y)[i] = v;                  // used directly: checked
    }
}
"""


def test_casts_of_checked_parameters_compile_and_stay_checked_where_they_can():
    kernel = tm.compile(CASTS, backend="emu", check=True)
    x = np.arange(1000, dtype=np.float32)
    y, m = np.zeros(1000, np.float32), np.zeros((8, 8), np.float32)
    kernel(4, 64, x, y, m, 250, backend="emu")
    assert np.array_equal(y, 2 * x) and np.array_equal(m, np.eye(8, dtype=np.float32))
    text = _report(kernel, 4, 64, x, y, m, 251)
    assert "out-of-bounds access of y[250] as float4 (the buffer passed for 'y' (float *) holds " \
           "250 float4 elements) by thread (58,0,0) of block (3,0,0)" in text, text


def test_reports_say_read_or_write_and_name_the_students_types():
    kernel = tm.compile(SCALE, backend="emu", check=True)
    x = np.ones(1, np.float32)
    text = _report(kernel, 1, 2, x, np.zeros(2, np.float32), 2.0, 2)
    assert "out-of-bounds read of x[1] (the buffer passed for 'x' (const float *) has 1 element)" \
        in text, text
    text = _report(kernel, 1, 2, np.ones(2, np.float32), np.zeros(1, np.float32), 2.0, 2)
    assert "out-of-bounds write of y[1] (the buffer passed for 'y' (float *) has 1 element)" \
        in text, text
    diverge = tm.compile(r"""
__global__ void diverge(const float *x, float *y)
{
    if (threadIdx.x < 16)
        __syncthreads();
    y[threadIdx.x] = x[threadIdx.x];
}
""", backend="emu", check=True)
    text = _report(diverge, 1, 32, np.ones(32, np.float32), np.zeros(32, np.float32))
    assert "diverge(float const*, float*)" in text and "tm_checked_ptr" not in text, text


def test_const_cast_of_a_checked_parameter_stays_checked():
    kernel = tm.compile(r"""
__global__ void copy(const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = const_cast<float *>(x)[i];
}
""", backend="emu", check=True)
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(101, np.float32)
    text = _report(kernel, 1, 128, x, y, 101)
    assert "out-of-bounds read of x[100] (the buffer passed for 'x' (const float *) has 100 " \
           "elements) by thread (100,0,0)" in text, text
    kernel(1, 128, x, y, 100, backend="emu")
    assert np.array_equal(y[:100], x)


# ---- array parameters, float ** and vector pointers ----

MATADD = lecture_source("001_matadd_kernel")


def test_float_star_star_row_beyond_the_table_is_reported_not_a_crash():
    # lecture 001's matadd_kernel with a ceiling grid on 40x64: blocks of x = 40..47 index
    # rows beyond the table of 40 row pointers
    kernel = tm.compile(MATADD, name="matadd_kernel", backend="emu", check=True)
    A, B = np.ones((40, 64), np.float32), np.full((40, 64), 2, np.float32)
    C = np.full((40, 64), -1, np.float32)
    text = _report(kernel, (3, 2), (16, 32), C, A, B)
    assert re.search(r"out-of-bounds read of [AB]\[40\]\[0\] \(the array passed for '[AB]' "
                     r"\(const float \*\*\) is 40 x 64: row 40 is beyond its table of 40 row "
                     r"pointers\) by thread \(8,0,0\) of block \(2,0,0\)", text), text
    # the floor grid of the notes stays inside: no report
    kernel((2, 2), (16, 32), C, A, B, backend="emu")
    assert np.all(C[:32] == 3)
    # a column beyond a row, and a write spelled as written
    col = tm.compile(r"""
__global__ void col(float **C, int j)
{
    C[threadIdx.x][j] = 1.0f;
}
""", backend="emu", check=True)
    text = _report(col, 1, 4, np.zeros((4, 5), np.float32), 5)
    assert "out-of-bounds write of C[0][5] (the array passed for 'C' (float **) is 4 x 5: index 5 " \
           "of dimension 2 is outside [0, 5)) by thread (0,0,0) of block (0,0,0)" in text, text
    text = _report(col, 1, 4, np.zeros((2, 5), np.float32), 1)
    assert "out-of-bounds write of C[2][1] (the array passed for 'C' (float **) is 2 x 5: row 2 " \
           "is beyond its table of 2 row pointers) by thread (2,0,0)" in text, text
    # one row: its length is not known, only the row index is checked
    text = _report(col, 1, 2, np.zeros((1, 5), np.float32), 0)
    assert "out-of-bounds write of C[1][0]" in text and "row 1 is beyond its table of 1 row " \
           "pointer)" in text, text


ARRAYS_SRC = r"""
#define N 40
__device__ float dot(const float A[][N], float (*B)[N], int x, int y, int k)
{
    return A[x][k] * B[k][y];
}
__global__ void mm(const float A[N][N], float (*B)[N], float C[][N], int K)
{
    int x = threadIdx.x + blockIdx.x * blockDim.x, y = threadIdx.y + blockIdx.y * blockDim.y;
    float r = 0;
    for (int k = 0; k < K; ++k) r += A[x][k] * B[k][y];
    const float *row = A[x];                      // a row as a pointer: unchecked from here
    C[x][y] = r + dot(A, B, x, y, 0) * 0.0f + row[0] * 0.0f;
}
"""


def test_array_parameters_are_checked_index_by_index():
    kernel = tm.compile(ARRAYS_SRC, name="mm", backend="emu", check=True)
    rng = np.random.default_rng(0)
    A, B = (rng.random((40, 40), dtype=np.float32) for _ in range(2))
    C = np.zeros_like(A)
    kernel((5, 5), (8, 8), A, B, C, 40, backend="emu")
    np.testing.assert_allclose(C, A @ B, rtol=1e-4)
    text = _report(kernel, (5, 5), (8, 8), A, B, C, 41)   # k <= N: one column past each row
    assert "out-of-bounds read of A[0][40] (the array passed for 'A' (const float (*)[40]) is " \
           "40 x 40: index 40 of dimension 2 is outside [0, 40)) by thread (0,0,0) of block " \
           "(0,0,0)" in text, text
    # the array passed has fewer rows than the grid covers: a write of a row beyond it
    text = _report(kernel, (5, 5), (8, 8), A, B, np.zeros((32, 40), np.float32), 40)
    assert "out-of-bounds write of C[32][0] (the array passed for 'C' (float (*)[40]) is 32 x 40: " \
           "index 32 of dimension 1 is outside [0, 32)) by thread (0,0,0) of block (4,0,0)" \
        in text, text


def test_races_on_arrays_and_rows_are_spelled_as_indexed():
    source = r"""
__global__ void both(float C[][4], float **D)
{
    C[1][2] = blockIdx.x;
    D[2][3] = blockIdx.x;
}
"""
    kernel = tm.compile(source, backend="emu", check=True)
    text = _report(kernel, 2, 1, np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32))
    assert "global-memory race (write after write) on C[1][2] (the buffer passed for 'C' " \
           "(float (*)[4])): thread (0,0,0) of block (0,0,0) and thread (0,0,0) of block " \
           "(1,0,0) both write it" in text, text
    text = _report(tm.compile(source.replace("C[1][2] = blockIdx.x;", ""), backend="emu",
                              check=True), 2, 1, np.zeros((3, 4), np.float32),
                   np.zeros((3, 4), np.float32))
    assert "global-memory race (write after write) on D[2][3] (the buffer passed for 'D' " \
           "(float **))" in text, text


def test_vector_pointer_parameters_are_bounds_checked():
    kernel = tm.compile(r"""
__global__ void copy4(const float4 *x, float4 *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {
        float4 v = x[i];
        y[i] = v;
    }
}
""", backend="emu", check=True)
    x = np.arange(1000, dtype=np.float32)
    text = _report(kernel, 1, 256, x, np.zeros(1000, np.float32), 250)
    assert "out-of-bounds access of x[250] as float4 (the buffer passed for 'x' (const float4 *) " \
           "holds 250 float4 elements) by thread (250,0,0) of block (0,0,0)" in text, text
    y = np.zeros(1000, np.float32)
    kernel(1, 256, x, y, 249, backend="emu")
    assert np.array_equal(x, y)


def test_reports_name_array_and_rows_types_as_written():
    kernel = tm.compile(r"""
__global__ void diverge(const float A[][8], float **B)
{
    if (threadIdx.x < 16)
        __syncthreads();
    B[0][0] = A[0][0];
}
""", backend="emu", check=True)
    text = _report(kernel, 1, 32, np.ones((2, 8), np.float32), np.zeros((2, 8), np.float32))
    assert "diverge(float const (*)[8], float**)" in text and "tm_checked" not in text, text


# ---- global-memory reads racing with writes ----

def test_a_block_reading_what_another_block_writes_races():
    # lecture 001's multi-block reduce_2 with its shifts fixed: at d = 256 thread 0 of block 0
    # reads A[256], which block 1 writes in the same launch (and A[512], block 2's)
    source = lecture_source("001_reduce_2").replace("d <= 1)", "d <<= 1)").replace(
        "(d < 1)", "(d << 1)")
    kernel = tm.compile(source, name="reduce_2", backend="emu", check=True)
    text = _report(kernel, 4, 256, np.ones(1024, np.float32), 1024)
    assert re.search(r"global-memory race \(read and write\) on A\[(256|512)\] \(the buffer passed "
                     r"for 'A' \(float \*\)\): thread \(0,0,0\) of block \(0,0,0\) reads it and "
                     r"thread \(0,0,0\) of block \([12],0,0\) writes it; the blocks of a launch "
                     r"are not ordered", text), text
    A = np.ones(256, np.float32)   # one block: its barriers order every read and write
    kernel(1, 256, A, 256, backend="emu")
    assert A[0] == 256


NEIGHBOUR = r"""
__global__ void neighbour(float *y)
{
    y[threadIdx.x] = threadIdx.x;
    __syncthreads();
    float v = y[(threadIdx.x + 1) % 32];
    __syncthreads();
    y[threadIdx.x] = v;
}
"""


def test_reads_and_writes_of_a_block_race_unless_a_barrier_orders_them():
    y = np.zeros(32, np.float32)
    tm.compile(NEIGHBOUR, backend="emu", check=True)(1, 32, y, backend="emu")
    assert y.tolist() == [float((i + 1) % 32) for i in range(32)]
    first, second = (NEIGHBOUR.replace("__syncthreads();", "", 1),
                     NEIGHBOUR[::-1].replace(";)(sdaerhtcnys__", "", 1)[::-1])
    text = _report(tm.compile(second, backend="emu", check=True), 1, 32, np.zeros(32, np.float32))
    # which thread runs first after the barrier is the emulator's choice: thread k writes y[k]
    # after thread k - 1 read it
    m = re.search(r"global-memory race \(write after read\) on y\[(\d+)\] \(the buffer passed for "
                  r"'y' \(float \*\)\) in block \(0,0,0\): thread \((\d+),0,0\) writes it after "
                  r"thread \((\d+),0,0\) read it, with no __syncthreads\(\) between them", text)
    assert m and m[1] == m[2] and int(m[3]) == (int(m[1]) - 1) % 32, text
    text = _report(tm.compile(first, backend="emu", check=True), 1, 32, np.zeros(32, np.float32))
    assert "global-memory race (write after read) on y[1]" in text, text
    raw = tm.compile(r"""
__global__ void raw(float *y)
{
    if (threadIdx.x == 0) y[0] = 1.0f;
    float v = y[0];                  // thread 0's own write: fine; thread 1's read: a race
    y[threadIdx.x + 1] = v;
}
""", backend="emu", check=True)
    text = _report(raw, 1, 2, np.zeros(3, np.float32))
    assert "global-memory race (read after write) on y[0] (the buffer passed for 'y' (float *)) " \
           "in block (0,0,0): thread (1,0,0) reads it after thread (0,0,0) wrote it" in text, text


LAST_BLOCK = r"""
__global__ void last_block(const float *x, float *partial, unsigned *count, float *total)
{
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = x[blockIdx.x];
        __threadfence();
        unsigned ticket = atomicInc(&count[0], gridDim.x);
        if (ticket == gridDim.x - 1) {   // the last block sums what every block wrote
            float s = 0.0f;
            for (int b = 0; b < gridDim.x; ++b) s += partial[b];
            total[0] = s;
        }
    }
}
"""


def test_reads_after_threadfence_and_an_atomic_are_not_races():
    # CUDA's threadFenceReduction pattern: legal with __threadfence(), a race without it
    args = lambda: (np.arange(8, dtype=np.float32), np.zeros(8, np.float32),   # noqa: E731
                    np.zeros(1, np.uint32), np.zeros(1, np.float32))
    a = args()
    tm.compile(LAST_BLOCK, backend="emu", check=True)(8, 32, *a, backend="emu")
    assert a[3][0] == 28
    text = _report(tm.compile(LAST_BLOCK.replace("__threadfence();", ""), backend="emu",
                              check=True), 8, 32, *args())
    assert "global-memory race (read and write) on partial[" in text, text


# ---- a launch stopped by its timeout keeps check mode's first report ----

def test_a_timeout_keeps_the_first_report_check_mode_recorded(capfd):
    # lecture 001's reduce_2_1 as printed: `d <= 1` never ends the loop
    kernel = tm.compile(lecture_source("001_reduce_2_1"), name="reduce_2_1", backend="emu",
                        check=True)
    A = np.ones(1000, np.float32)
    text = _report(kernel, 1, 256, A, 1000, timeout=1)
    assert "kernel 'reduce_2_1' ran for more than 1 s and was stopped" in text, text
    # every thread adds its right neighbour (i % (d <= 1) is i % 1): thread 1 writes A[1],
    # which thread 0 read, before any barrier
    assert "\ntiledmm check, before the timeout: global-memory race (write after read) on A[1] " \
           "(the buffer passed for 'A' (float *)) in block (0,0,0): thread (1,0,0) writes it " \
           "after thread (0,0,0) read it" in text, text
    # one thread: no race, but its first pass reads A[1000] before the loop goes on for ever
    text = _report(kernel, 1, 1, A, 1000, timeout=1)
    assert "\ntiledmm check, before the timeout: out-of-bounds read of A[1000] (the buffer " \
           "passed for 'A' (float *) has 1000 elements) by thread (0,0,0) of block (0,0,0)" \
        in text, text
    # in the caller's own process nothing is written to stderr: the report comes back as usual
    capfd.readouterr()
    inproc = tm.compile(SCALE, backend="emu", check=True, isolate=False)
    text = _report(inproc, 1, 2, np.ones(1, np.float32), np.zeros(2, np.float32), 2.0, 2)
    assert "out-of-bounds read of x[1]" in text and "tiledmm check" not in capfd.readouterr().err
