"""The lectures' 21 `__global__` listings (tests/lectures/*.cu), typed as a student would, with
the minimal fixes each file's header records (issue 19): every one compiles on emu, and on cuda
where a GPU exists; what tiledmm says about the listing as printed (tests/lectures/as_printed)
is the message the docs page (docs/lecture_kernels.md) quotes; the correct ones compute what
NumPy does when launched as the notes launch them, and lecture 001's `d <= 1` warns.
What check mode and the checkers report for each listing (the page's last column) is tested by
tests/test_lecture_check_column.py."""
import glob
import os
import re
import warnings

import numpy as np
import pytest

import tiledmm as tm

HERE = os.path.dirname(os.path.abspath(__file__))
LECTURES = os.path.join(HERE, "lectures")
FILES = sorted(glob.glob(os.path.join(LECTURES, "*.cu")))
DOCS = os.path.join(os.path.dirname(HERE), "docs", "lecture_kernels.md")


def listing(name):
    """(source, header fields) of tests/lectures/<name>.cu: the fields are the header's
    `// key: value` lines (lecture, kernel, defines, fixes, as printed, launch)."""
    with open(os.path.join(LECTURES, name + ".cu")) as f:
        text = f.read()
    fields = dict(re.findall(r"^// (\w[\w ]*): (.*)$", text, re.M))
    return text, fields


def defines_of(fields):
    d = fields["defines"]
    return {} if d.startswith("none") else dict(kv.split("=") for kv in d.split(", "))


def compile_listing(name, backend, **kw):
    text, fields = listing(name)
    return tm.compile(text, name=fields["kernel"], defines=defines_of(fields), backend=backend,
                      **kw)


def test_the_21_listings_are_here():
    assert len(FILES) == 21
    for path in FILES:
        _, fields = listing(os.path.basename(path)[:-3])
        assert {"lecture", "kernel", "defines", "fixes", "launch"} <= set(fields), path


@pytest.mark.parametrize("name", [os.path.basename(p)[:-3] for p in FILES])
def test_every_listing_compiles(name, backend):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", tm.CompileWarning)
        kernel = compile_listing(name, backend)
    assert kernel.name == listing(name)[1]["kernel"]
    said = [str(w.message) for w in record if issubclass(w.category, tm.CompileWarning)]
    if re.search(r"^[^/\n]*d <= 1", listing(name)[0], re.M):   # lecture 001's reductions
        assert any("no effect" in s for s in said), said


AS_PRINTED = {
    "000_MatrixMulKernel_shared_declarations": r"kernel\.cu:2:1: the '\{' here is never closed",
    "000_MatrixMulKernel_tiled": r"kernel\.cu:3:1: the line starts with '1\.': line numbers "
                                 r"copied from the slides\?",
    "003_MatrixMulKernel_tiled": r"kernel\.cu:3:1: the line starts with '1\.'",
    "003_KernelFunc": r"kernel\.cu:1:17: kernel 'KernelFunc' has no body",
    "001_reduce_2_3": r"kernel\.cu:4:5: error: .external. was not declared",
    "001_mm_strawman": r"kernel\.cu:5:5: error: .result. was not declared",
}


@pytest.mark.parametrize("name", sorted(AS_PRINTED))
def test_what_tiledmm_says_about_the_listing_as_printed(name):
    _, fields = listing(name)
    with open(os.path.join(LECTURES, "as_printed", name + ".cu")) as f:
        printed = f.read()
    with pytest.raises(tm.CompileError, match=AS_PRINTED[name]):
        tm.compile(printed, name=fields["kernel"], defines=defines_of(fields), backend="emu")


def test_every_listing_is_on_the_docs_page():
    with open(DOCS) as f:
        page = f.read()
    for path in FILES:
        assert os.path.basename(path) in page, path
    assert "| check mode |" in page   # its cells: tests/test_lecture_check_column.py


def _matrices(rng, n):
    return (rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32))


@pytest.mark.parametrize("name,grid,block,n", [
    ("000_MatrixMulKernel_simplified", (3, 3), (16, 16), 37),
    ("000_MatrixMulKernel_basic", (3, 3), (16, 16), 37),
    ("000_MatrixMulKernel_tiled", (2, 2), (16, 16), 32),
    ("003_MatrixMulKernel_one_block", (1, 1), (12, 12), 12),
    ("003_MatrixMulKernel_multi_block", (2, 2), (16, 16), 32),
    ("003_MatrixMulKernel_tiled", (2, 2), (16, 16), 32),
])
def test_the_matmul_listings_compute_a_product(name, grid, block, n, backend, rng):
    kernel = compile_listing(name, backend)
    A, B = _matrices(rng, n)
    C = np.zeros((n, n), np.float32)
    kernel(grid, block, A, B, C, n, backend=backend)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-5)


def test_vec_add_and_matadd(backend, rng):
    x, y = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    out = np.zeros_like(x)
    compile_listing("000_vecAddKernel", backend)(int(np.ceil(1000 / 256.0)), 256, x, y, out,
                                                 1000, backend=backend)
    np.testing.assert_array_equal(out, x + y)
    A, B = _matrices(rng, 64)                     # X_len = Y_len = 64: blocks divide it
    C = np.zeros_like(A)
    compile_listing("001_matadd_kernel", backend)((64 // 16, 64 // 32), (16, 32), C, A, B,
                                                  backend=backend)
    np.testing.assert_array_equal(C, A + B)


def test_the_strawman_mm_with_array_parameters(backend, rng):
    kernel = compile_listing("001_mm_strawman", backend)   # N = 64 from defines
    A, B = _matrices(rng, 64)
    C = np.zeros_like(A)
    kernel((2, 2), (32, 32), A, B, C, backend=backend)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4)
    kernel = compile_listing("001_mm_register_tiling", backend)   # V = 4
    C[...] = 0
    kernel((2, 2), (8, 8), A, B, C, backend=backend)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4)


def test_reduce_1_with_the_host_loop(backend, rng):
    """The notes' host loop (with `d <<= 1` for its `d <= 1`): the sum lands in A[0]. On a
    length that is a power of two: otherwise A[i+d] reads past the end (check mode reports it;
    on a GPU the read returns whatever lies there)."""
    kernel = compile_listing("001_reduce_1", backend)
    x = rng.random(1024, dtype=np.float32)
    A = x.copy()
    d = 1
    while d < A.size:
        # once per level: an in-place kernel must not be timed over repeats
        kernel((A.size + 255) // 256, 256, A, A.size, d, backend=backend, warmup=0, repeat=1)
        d <<= 1
    np.testing.assert_allclose(A[0], x.astype(np.float64).sum(), rtol=1e-4)


def test_matmul_coarse_as_printed_is_wrong(backend, rng):
    """colStart lacks `+ tx`: odd columns are never written (check mode names the race)."""
    kernel = compile_listing("002_matMulCoarse", backend)
    n = 12
    A, B = _matrices(rng, n)
    C = np.full((n, n), -1.0, np.float32)
    kernel((n // 6, n // 2), (2, 2), A, B, C, n, backend=backend)
    assert (C[:, 1::2] == -1).all()
    assert not np.allclose(C, A @ B)
