"""The built-in assignments: matmul, matmul_square (the lecture's (M, N, P, Width)), reduce (a
sum), vec_add and mat_add. Each is an Assignment, written as an instructor would write one.

Every case is worth 1 point except the empty ones (0 points: with the assignment's launch an
empty problem launches no block, so passing them says nothing about the kernel; they still fail,
and count as failures, when a declared launch runs blocks that touch the empty arrays)."""
import numpy as np

from .. import _core
from .assignment import Arg, Assignment, Speed

__all__ = ["BUILTIN"]

# the speed part's references (cuda only): tiledmm's own kernels, launched once per timed run


def _ref_matmul(A, B, **_):
    return _core.matmul(A, B, kernel="tiled", tile=16, backend="cuda", warmup=0, repeat=1)


def _ref_reduce(x, **_):
    return _core.reduce(x, kernel="shared", backend="cuda", warmup=0, repeat=1)


def _ref_vec_add(A, B, **_):
    return _core.vec_add(A, B, backend="cuda", warmup=0, repeat=1)


def _ref_mat_add(A, B, **_):
    return _core.mat_add(A, B, backend="cuda", warmup=0, repeat=1)


def _named(case):
    """A random case, labelled with its sizes."""
    return dict(case, name="random " + "x".join(str(v) for v in case.values()))


def _random_mnk(rng):
    M, N, K = (int(v) for v in rng.integers(1, 90, size=3))
    return [{"name": f"random {M}x{N}x{K}", "M": M, "N": N, "K": K}]


def matmul():
    return Assignment(
        "matmul", description="C = A @ B, row-major; A is M x K, B is K x N, any sizes",
        args=[Arg("A", "in", ("M", "K"), aliases=("a", "A_d", "d_A", "Ad")),
              Arg("B", "in", ("K", "N"), aliases=("b", "B_d", "d_B", "Bd")),
              Arg("C", "out", ("M", "N"), aliases=("c", "C_d", "d_C", "Cd")),
              Arg("M", "size", aliases=("m",)), Arg("N", "size", aliases=("n",)),
              Arg("K", "size", aliases=("k",))],
        cases=[{"M": 32, "N": 32, "K": 32}, {"M": 64, "N": 64, "K": 64},
               {"name": "1x1x1", "M": 1, "N": 1, "K": 1},
               {"M": 17, "N": 17, "K": 17}, {"M": 33, "N": 33, "K": 33},
               {"name": "tall 130x3x20", "M": 130, "N": 3, "K": 20},
               {"name": "wide 3x130x20", "M": 3, "N": 130, "K": 20},
               {"M": 100, "N": 7, "K": 37}, {"name": "K=1 65x31x1", "M": 65, "N": 31, "K": 1},
               {"name": "empty 0x5x3", "M": 0, "N": 5, "K": 3, "points": 0},
               {"name": "empty K 5x4x0", "M": 5, "N": 4, "K": 0, "points": 0},
               {"name": "waves 600x520x24", "M": 600, "N": 520, "K": 24, "big": True}],
        random_cases=_random_mnk,
        reference=lambda A, B, **_: {"C": A @ B},
        tolerance="matmul",
        launch={"grid": "(cdiv(N, 16), cdiv(M, 16))", "block": "(16, 16)", "shared": "0"},
        speed=Speed({"M": 2048, "N": 2048, "K": 2048}, _ref_matmul, points=2,
                    label="tiledmm tiled, tile 16"))


def matmul_square():
    return Assignment(
        "matmul_square", description="P = M @ N for Width x Width matrices (the lecture's "
                                     "MatrixMulKernel(M, N, P, Width))",
        args=[Arg("M", "in", ("Width", "Width"), aliases=("A", "Md", "M_d", "d_M")),
              Arg("N", "in", ("Width", "Width"), aliases=("B", "Nd", "N_d", "d_N")),
              Arg("P", "out", ("Width", "Width"), aliases=("C", "Pd", "P_d", "d_P")),
              Arg("Width", "size", aliases=("width", "WIDTH", "n", "size"))],
        cases=[{"Width": 16}, {"Width": 32}, {"Width": 64}, {"Width": 1}, {"Width": 17},
               {"Width": 33}, {"Width": 100}, {"name": "empty 0", "Width": 0, "points": 0},
               {"name": "waves 400", "Width": 400, "big": True}],
        random_cases=lambda rng: [_named({"Width": int(rng.integers(2, 90))})],
        reference=lambda M, N, **_: {"P": M @ N},
        tolerance="matmul",
        launch={"grid": "(cdiv(Width, 16), cdiv(Width, 16))", "block": "(16, 16)"},
        speed=Speed({"Width": 2048}, lambda M, N, **_: _ref_matmul(M, N), points=2,
                    label="tiledmm tiled, tile 16"))


def reduce():
    return Assignment(
        "reduce", description="the sum of x[0..n): each block writes its partial sum to "
                              "out[blockIdx.x] (or adds into out[0] atomically); the grade "
                              "is out's sum",
        args=[Arg("x", "in", ("n",), aliases=("in", "input", "A", "a", "d_in", "g_idata", "x_d")),
              Arg("out", "out", ("max(blocks, 1)",), value=0.0,
                  aliases=("output", "d_out", "g_odata", "result", "sum", "partial", "out_d")),
              Arg("n", "size", aliases=("N", "size", "length", "len", "count"))],
        # small integers: every order sums exactly, the tolerance is 0 (a kernel that skips
        # any term fails); one case of random floats, within the tree bound (log2 n)
        cases=[{"n": n} for n in (1024, 1, 2, 31, 33, 255, 257, 1000, 4099)]
        + [{"name": "random floats 20000", "n": 20000, "floats": True}]
        + [{"name": "empty 0", "n": 0, "points": 0}]
        + [{"name": "waves 2^20", "n": 1 << 20, "big": True}],
        random_cases=lambda rng: [_named({"n": int(rng.integers(2, 20000))})],
        reference=lambda x, **_: {"out": x.sum()},
        combine={"out": lambda out: out.astype(np.float64).sum()},
        tolerance="sum",
        launch={"grid": "cdiv(n, 256)", "block": "256", "shared": "256 * 4"},
        speed=Speed({"n": 1 << 26}, _ref_reduce, points=2, label="tiledmm shared"))


def vec_add():
    return Assignment(
        "vec_add", description="C = A + B elementwise, n elements",
        args=[Arg("A", "in", ("n",), aliases=("a", "x", "A_d", "d_A", "in1")),
              Arg("B", "in", ("n",), aliases=("b", "y", "B_d", "d_B", "in2")),
              Arg("C", "out", ("n",), aliases=("c", "z", "out", "C_d", "d_C")),
              Arg("n", "size", aliases=("N", "size", "len", "length", "count"))],
        cases=[{"n": n} for n in (1, 255, 256, 257, 1000, 4099)]
        + [{"name": "empty 0", "n": 0, "points": 0}]
        + [{"name": "waves 2^20", "n": 1 << 20, "big": True}],
        random_cases=lambda rng: [_named({"n": int(rng.integers(2, 20000))})],
        reference=lambda A, B, **_: {"C": A + B},
        tolerance={"rtol": 2 * float(np.finfo(np.float32).eps), "atol": 0.0},
        launch={"grid": "cdiv(n, 256)", "block": "256"},
        speed=Speed({"n": 1 << 26}, _ref_vec_add, points=1, label="tiledmm vec_add"))


def mat_add():
    return Assignment(
        "mat_add", description="C = A + B for M x N row-major matrices",
        args=[Arg("A", "in", ("M", "N"), aliases=("a", "A_d", "d_A")),
              Arg("B", "in", ("M", "N"), aliases=("b", "B_d", "d_B")),
              Arg("C", "out", ("M", "N"), aliases=("c", "C_d", "d_C")),
              Arg("M", "size", aliases=("m", "rows", "X_len", "height")),
              Arg("N", "size", aliases=("n", "cols", "Y_len", "width"))],
        cases=[{"M": 1, "N": 1}, {"M": 16, "N": 16}, {"M": 17, "N": 33}, {"M": 100, "N": 7},
               {"M": 7, "N": 100}, {"name": "empty 0x5", "M": 0, "N": 5, "points": 0},
               {"name": "waves 1000x700", "M": 1000, "N": 700, "big": True}],
        random_cases=lambda rng: [_named({"M": int(rng.integers(1, 120)),
                                          "N": int(rng.integers(1, 120))})],
        reference=lambda A, B, **_: {"C": A + B},
        tolerance={"rtol": 2 * float(np.finfo(np.float32).eps), "atol": 0.0},
        launch={"grid": "(cdiv(N, 16), cdiv(M, 16))", "block": "(16, 16)"},
        speed=Speed({"M": 8192, "N": 8192}, _ref_mat_add, points=1, label="tiledmm mat_add"))


BUILTIN = {"matmul": matmul, "matmul_square": matmul_square, "reduce": reduce,
           "vec_add": vec_add, "mat_add": mat_add}
