"""The "check mode" column of docs/lecture_kernels.md, held by a test: every listing of
tests/lectures/*.cu launched on `emu` with `check=True` as the notes launch it, on the lecture's
sizes and on an awkward one, directly or through tm.check_matmul / tm.check_reduce (with
check=True). Each row's cell on the page must contain the key phrases listed in COLUMN, and the
reports of those launches must contain them too ("passes" is the verdict of a launch with no
report and the right result), so neither the page nor the behaviour can change silently."""
import os

import numpy as np
import pytest

import tiledmm as tm
from test_lecture_kernels import DOCS, FILES, defines_of, listing

pytestmark = pytest.mark.filterwarnings("ignore")   # lecture 001's `d <= 1` warns at compile


def _kernel(name, source=None, **defines):
    text, fields = listing(name)
    d = defines_of(fields)
    d.update({k: str(v) for k, v in defines.items()})
    return tm.compile(source or text, name=fields["kernel"], defines=d, backend="emu", check=True)


def _launch(kernel, *args, **kw):
    """'passes' or the KernelError's report."""
    try:
        kernel(*args, backend="emu", **kw)
    except tm.KernelError as exc:
        return str(exc)
    return "passes"


def _rows(report):
    return ["passes" if r["passed"] else r["message"] for r in report.rows]


def _matmul(name, launch, shapes, args=None, check=True, **defines):
    kernel = _kernel(name, **defines)
    args = args or (lambda A, B, C, M, N, K: (A, B, C, N))
    return _rows(tm.check_matmul(kernel, launch, shapes, args=args, backend="emu", check=check))


CEIL16 = lambda M, N, K: (((N + 15) // 16, (M + 15) // 16), (16, 16))   # noqa: E731
FLOOR16 = lambda M, N, K: ((N // 16, M // 16), (16, 16))                 # noqa: E731
REGTILE = lambda M, N, K: ((N // 4 // 8, N // 4 // 8), (8, 8))          # noqa: E731  V = 4
ARRAYS = lambda A, B, C, M, N, K: (A, B, C)                               # noqa: E731  A[N][N]


def _level_passes(n, block=256):
    """Lecture 001's host loop for reduce_1 (with `d <<= 1`)."""
    passes, d = [], 1
    while d < n:
        passes.append(((n + block - 1) // block, block, {"d": d}))
        d <<= 1
    return passes


def _depth_passes(shared):
    """Lecture 001's host loop for reduce_2_2 / reduce_2_3: one launch per depth, depth *= 256."""
    def passes(n, block=256):
        out, depth = [], 1
        while depth < n:
            out.append(((n + block - 1) // block, block, shared, {"depth": depth}))
            depth *= block
        return out
    return passes


def _fixed_shift(name):
    """The listing with `d <= 1` as meant, `d <<= 1`."""
    return listing(name)[0].replace("d <= 1)", "d <<= 1)")


def _vec_add():
    kernel, out = _kernel("000_vecAddKernel"), []
    for n in (1000, 1, 257):
        x, y, c = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
        out.append(_launch(kernel, int(np.ceil(n / 256.0)), 256, x, y, c, n))
        assert np.array_equal(c, x + y)
    return out


def _matadd():
    kernel, out = _kernel("001_matadd_kernel"), []
    for X, Y in ((64, 64), (40, 64)):   # X_len 40: grid X_len/16 = 2 leaves rows 32..39
        A, B = np.ones((X, Y), np.float32), np.full((X, Y), 2, np.float32)
        C = np.full((X, Y), -1, np.float32)
        out.append(_launch(kernel, (X // 16, Y // 32), (16, 32), C, A, B))
        assert np.all(C[:X // 16 * 16] == 3) and np.all(C[X // 16 * 16:] == -1)
    # a ceiling grid on 40x64: x = 40..47 index rows beyond the tables of row pointers
    out.append(_launch(kernel, (3, 2), (16, 32), C, A, B))
    return out


def _reduce_2_fixed():
    """reduce_2 with its shifts as meant (`d <<= 1`, `i % (d << 1)`): one launch of 4 blocks
    over 1024 elements, and one block over 256."""
    source = listing("001_reduce_2")[0].replace("d <= 1)", "d <<= 1)").replace(
        "(d < 1)", "(d << 1)")
    kernel = _kernel("001_reduce_2", source=source)
    out = [_launch(kernel, 4, 256, np.ones(1024, np.float32), 1024)]
    A = np.ones(256, np.float32)
    out.append(_launch(kernel, 1, 256, A, 256))
    assert A[0] == 256
    return out


def _trap(name):
    """reduce and reduce_2 as printed: i % (d < 1) is i % 0. The block whose thread 0 traps
    first depends on the emulator's threads."""
    return [_launch(_kernel(name), 4, 256, np.ones(1000, np.float32), 1000, timeout=10)]


def _never_ends(name):
    """The first launch of the notes' host loop, as printed (`d <= 1`), length 1000."""
    A = np.ones(1000, np.float32)
    kernel = _kernel(name)
    if name == "001_reduce_2_1":   # one block of 256, and one thread (no race: its own reads)
        return [_launch(kernel, 1, 256, A, 1000, timeout=1), _launch(kernel, 1, 1, A, 1000, timeout=1)]
    return [_launch(kernel, 4, 256, A, 1000, 1, timeout=1,
                    shared_bytes=1024 if name == "001_reduce_2_3" else 0)]


def _reduce_shift_fixed(name, shared):
    kernel = _kernel(name, source=_fixed_shift(name))
    return _rows(tm.check_reduce(kernel, _depth_passes(shared), [1024, 65536, 1000],
                                 backend="emu", check=True))


def _shared_tiling(name):
    out = _matmul(name, lambda M, N, K: ((N // 32, N // 32), (8, 8)), [(64, 64, 64)], ARRAYS)
    # what it computes instead: A's transpose times B
    rng = np.random.default_rng(1)
    A, B = (rng.random((64, 64), dtype=np.float32) for _ in range(2))
    C = np.zeros_like(A)
    out.append(_launch(_kernel(name), (2, 2), (8, 8), A, B, C))
    np.testing.assert_allclose(C, A.T @ B, rtol=1e-4)
    return out + _matmul(name, lambda M, N, K: ((N // 32, N // 32), (8, 8)), [(40, 40, 40)],
                         ARRAYS, N=40)


def _coarse():
    grid = lambda M, N, K: ((N // 6, M // 2), (2, 2))   # noqa: E731
    shapes = [(12, 12, 12), (18, 18, 18)]
    return (_matmul("002_matMulCoarse", grid, shapes) +
            _matmul("002_matMulCoarse", grid, shapes, check=False))


def _does_nothing(name):
    if name == "003_KernelFunc":
        return [_launch(_kernel(name), 1, 32, np.zeros(4, np.float32))]
    return _matmul(name, CEIL16, [(32, 32, 32)])


UNWRITTEN_40 = "576 of 1600 elements of C never written (first C[0][32])"

# file -> (how its launches run, the phrases its cell and their reports both contain)
COLUMN = {
    "000_vecAddKernel.cu": (_vec_add, ["passes"]),
    "000_MatrixMulKernel_simplified.cu": (
        lambda: _matmul("000_MatrixMulKernel_simplified", CEIL16,
                        [(37, 37, 37), (1, 1, 1), (17, 17, 17)]), ["passes"]),
    "000_MatrixMulKernel_shared_declarations.cu": (
        lambda: _does_nothing("000_MatrixMulKernel_shared_declarations"),
        ["1024 of 1024 elements of C never written (first C[0][0])"]),
    "000_MatrixMulKernel_tiled.cu": (
        lambda: _matmul("000_MatrixMulKernel_tiled", FLOOR16, [(32, 32, 32), (40, 40, 40)]),
        ["passes", UNWRITTEN_40, "elements written are wrong"]),
    "000_MatrixMulKernel_basic.cu": (
        lambda: _matmul("000_MatrixMulKernel_basic", CEIL16,
                        [(37, 37, 37), (1, 1, 1), (17, 17, 17)]), ["passes"]),
    "001_matadd_kernel.cu": (_matadd, [
        "passes", "out-of-bounds read of A[40][0] (the array passed for 'A' (const float **) is "
                  "40 x 64: row 40 is beyond its table of 40 row pointers) by thread (8,0,0) of "
                  "block (2,0,0)"]),
    "001_reduce.cu": (lambda: _trap("001_reduce"),
                      ["illegal instruction (SIGILL", "by thread (0,0,0) of block ("]),
    "001_reduce_1.cu": (
        lambda: _rows(tm.check_reduce(_kernel("001_reduce_1"), _level_passes, [1024, 1000],
                                      backend="emu", check=True)),
        ["passes", "out-of-bounds read of A[1000] (the buffer passed for 'A' (float *) has 1000 "
                   "elements) by thread (224,0,0) of block (3,0,0)"]),
    "001_reduce_2.cu": (lambda: _trap("001_reduce_2") + _reduce_2_fixed(),
                        ["illegal instruction (SIGILL", "by thread (0,0,0) of block (", "passes",
                         "global-memory race (read and write) on A[",
                         "thread (0,0,0) of block (0,0,0) reads it and thread (0,0,0) of block ("]),
    "001_reduce_2_1.cu": (lambda: _never_ends("001_reduce_2_1"),
                          ["and was stopped by its timeout (a loop that never ends?)",
                           "tiledmm check, before the timeout: global-memory race (write after "
                           "read) on A[1]", "thread (1,0,0) writes it after thread (0,0,0) read it",
                           "tiledmm check, before the timeout: out-of-bounds read of A[1000]"]),
    "001_reduce_2_2.cu": (
        lambda: _never_ends("001_reduce_2_2") + _reduce_shift_fixed("001_reduce_2_2", 0),
        ["and was stopped by its timeout (a loop that never ends?)", "passes",
         "out-of-bounds read of A[1000]", "by thread (224,0,0) of block (3,0,0)"]),
    "001_reduce_2_3.cu": (
        lambda: _never_ends("001_reduce_2_3") + _reduce_shift_fixed("001_reduce_2_3", 1024),
        ["and was stopped by its timeout (a loop that never ends?)", "passes",
         "read of uninitialised shared memory: sh_mem[232]",
         "by thread (224,0,0) of block (3,0,0)"]),
    "001_mm_strawman.cu": (
        lambda: _matmul("001_mm_strawman", lambda M, N, K: ((N // 32, N // 32), (32, 32)),
                        [(64, 64, 64)], ARRAYS) +
        _matmul("001_mm_strawman", lambda M, N, K: ((N // 32, N // 32), (32, 32)),
                [(40, 40, 40)], ARRAYS, N=40),
        ["passes", UNWRITTEN_40, "the elements written are right"]),
    "001_mm_register_tiling.cu": (
        lambda: _matmul("001_mm_register_tiling", REGTILE, [(64, 64, 64)], ARRAYS) +
        _matmul("001_mm_register_tiling", REGTILE,
                [(40, 40, 40)], ARRAYS, N=40),
        ["passes", UNWRITTEN_40, "the elements written are right"]),
    "001_mm_shared_tiling.cu": (lambda: _shared_tiling("001_mm_shared_tiling"),
                                ["passes", "4090 of 4096 elements out of tolerance",
                                 UNWRITTEN_40, "elements written are wrong"]),
    "001_mm_shared_tiling_ko.cu": (lambda: _shared_tiling("001_mm_shared_tiling_ko"),
                                   ["passes", "4090 of 4096 elements out of tolerance",
                                    UNWRITTEN_40, "elements written are wrong"]),
    "002_matMulCoarse.cu": (_coarse, [
        "global-memory race (write after write) on P[0]",
        "in block (0,0,0): thread (1,0,0) writes it after thread (0,0,0) wrote it",
        "72 of 144 elements of C never written (first C[0][1])",
        "162 of 324 elements of C never written (first C[0][1])",
        "the elements written are right"]),
    "003_MatrixMulKernel_one_block.cu": (
        lambda: _matmul("003_MatrixMulKernel_one_block", lambda M, N, K: ((1, 1), (N, N)),
                        [(12, 12, 12), (1, 1, 1), (33, 33, 33)]),
        ["passes", "invalid launch configuration grid (1,1,1) block (33,33,1): blocks allow at "
                   "most 1024 threads"]),
    "003_MatrixMulKernel_multi_block.cu": (
        lambda: _matmul("003_MatrixMulKernel_multi_block", FLOOR16,
                        [(32, 32, 32), (40, 40, 40)]),
        ["passes", UNWRITTEN_40, "the elements written are right"]),
    "003_KernelFunc.cu": (lambda: _does_nothing("003_KernelFunc"), ["passes"]),
    "003_MatrixMulKernel_tiled.cu": (
        lambda: _matmul("003_MatrixMulKernel_tiled", FLOOR16, [(32, 32, 32), (40, 40, 40)]),
        ["passes", UNWRITTEN_40, "elements written are wrong"]),
}


# what a cell says is *not* reported ("... is not reported"), kept true too: file -> a phrase no
# report of the row contains (none today: a launch stopped by its timeout keeps check mode's
# first report since it is written to the worker's stderr as it is recorded)
NOT_REPORTED = {}


def _cell(page, file):
    rows = [line for line in page.splitlines() if line.startswith(f"| `{file}` |")]
    assert len(rows) == 1, (file, rows)
    return rows[0].rstrip().rstrip("|").rsplit("|", 1)[1].strip()


def test_every_row_has_a_check_mode_verdict():
    with open(DOCS) as f:
        page = f.read()
    assert sorted(COLUMN) == sorted(os.path.basename(p) for p in FILES)
    assert "to be filled" not in page
    for file in COLUMN:
        assert _cell(page, file), file


@pytest.mark.parametrize("file", sorted(COLUMN))
def test_the_check_mode_column_says_what_check_mode_reports(file):
    with open(DOCS) as f:
        cell = _cell(f.read(), file)
    run, phrases = COLUMN[file]
    reports = run()
    said = "\n".join(reports)
    for phrase in phrases:
        assert phrase in cell, (phrase, cell)
        assert phrase in said, (phrase, reports)
    if phrases == ["passes"]:
        assert set(reports) == {"passes"}, reports
    assert "tm_checked_ptr" not in said
    if file in NOT_REPORTED:
        assert NOT_REPORTED[file] not in said and "is not reported" in cell, (said, cell)
    # every report is one the cell accounts for: no launch fails in a way the page omits
    for report in reports:
        assert any(p in report for p in phrases), (report, phrases)
