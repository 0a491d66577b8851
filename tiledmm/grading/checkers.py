"""Grade a matmul or reduction kernel the user wrote, from a notebook or pytest: run it over the
awkward shapes tiledmm's own tests use and compare with NumPy (float64, tiledmm.testing's
tolerances). `tm.grade_matmul` and `tm.grade_reduce`; `tm.check_matmul` and `tm.check_reduce`
are the same functions under their first names (kept: notebooks and courses use them). "check"
alone means check mode, the sanitizer-like `check=True`.

    report = tm.grade_matmul(kernel, lambda M, N, K: (((N + 15) // 16, (M + 15) // 16), (16, 16)))
    report              # a table in a notebook: shape, passed, max_error, tolerance, ms, message
    report.all_passed   # for pytest: assert report.all_passed, report  (or report.assert_passed())

They are tm.grade's grader (tiledmm/grading) on an already compiled kernel: an Assignment (the
built-in matmul's or reduce's arguments, reference and tolerance, with the shapes below as its
cases and `launch` as its launch), the same argument matcher, the same runner and rows, and a
GradeReport, shown through GradeTable's table.

`launch(M, N, K)` (matmul) or `launch(n)` (reduce) maps the problem to `(grid, block)` or
`(grid, block, shared_bytes)`. The kernel's arguments are found as tm.grade finds them
(tiledmm/grading/matching.py): by name (A, B, C, M, N, K and their usual aliases; x, out, n),
else pointer parameters in order with the sizes by name, else by position; pass `args=` to map
them yourself, e.g. the lecture's square-only kernel: `args=lambda A, B, C, M, N, K: (A, B, C, N)`.

Matmul outputs start filled with a marked NaN, so an element the kernel never writes fails, and
the report says how many were never written and which came first (a grid that rounds down
leaves the last rows and columns unwritten).

Reductions come in two forms, told apart by the kernel's pointer parameters:
- `(x, out)`: x holds n elements; out has one zeroed element per block. The kernel may write
  per-block partial sums to out[blockIdx.x] or add into out[0] atomically; the result is out's
  sum (in float64).
- in place, one pointer (the lectures' `reduce(float *A, int length)`): A holds x, the kernel
  works in it, and the sum is A[0] after the last pass.
A reduction that needs several launches (the lectures' host loop over passes) returns a *list*
of passes from `launch(n)`, launched in order on the same arrays; each pass is
`(grid, block)`, `(grid, block, shared_bytes)` or either with a dict of the kernel's other
scalar parameters for that pass at the end. The lecture's

    for (int d = 1; d < length; d *= blockDim) reduce_2_3<<<grid, blockDim, shm>>>(A, length, d);

is `launch=lambda n: [(grid(n), 256, 256 * 4, {"depth": d}) for d in powers(n, 256)]`, where
`powers(n, 256)` gives 1, 256, 65536, ... below n. A single pass may be returned as a tuple.
`args=` then receives the pass's scalars as keywords: `args(x, out, n, **scalars)` or
`args(A, n, **scalars)`.
"""
import numpy as np

from .. import _backend, testing
from ..confine.isolation import default_timeout
from ..user_kernels.kernel import Kernel
from .assignment import Arg, Assignment
from .builtin import BUILTIN
from .compare import reduce_hint
from .launch_spec import LaunchFunction
from .matching import Mapping, match_arguments
from .report import GradeReport
from .runner import run_cases

__all__ = ["grade_matmul", "grade_reduce", "check_matmul", "check_reduce", "GradeTable",
           "CheckReport", "MATMUL_SHAPES", "REDUCE_SIZES"]

# (M, N, K): multiples of 16 and 32 first (where a square-only kernel is right), then 1x1,
# non-multiples of the tile, tall, wide, K = 1, and empty problems.
MATMUL_SHAPES = [(32, 32, 32), (64, 64, 64), (1, 1, 1), (17, 17, 17), (33, 33, 33),
                 (16, 48, 32), (48, 16, 32), (100, 7, 37), (7, 100, 37), (65, 31, 1),
                 (130, 3, 20), (3, 130, 20), (0, 5, 3), (5, 4, 0)]
REDUCE_SIZES = [1024, 1, 2, 31, 33, 255, 257, 1000, 4099, 70001, 0]

_COLUMNS = ("shape", "passed", "max_error", "tolerance", "ms", "message")


class GradeTable:
    """What tm.grade_matmul / tm.grade_reduce return: a view of the GradeReport (`.grade`) that
    reads as a table of shapes. `.rows` (the report's case dicts: name, sizes, mode, passed,
    score, points, max_error, tolerance, ms, message), `.table` (a pandas DataFrame of shape,
    passed, max_error, tolerance, ms, message when pandas is installed, else those dicts),
    `.all_passed`, `.failures`, `.assert_passed()`."""

    def __init__(self, grade):
        self.grade = grade

    @property
    def kernel(self):
        """The kernel's name."""
        return self.grade.kernel

    @property
    def rows(self):
        """One dict per shape, in tm.grade's row layout."""
        return self.grade.cases

    @property
    def all_passed(self):
        """True when every case passed."""
        return all(r["passed"] for r in self.rows)

    @property
    def failures(self):
        """The rows of the cases that failed."""
        return [r for r in self.rows if not r["passed"]]

    def _columns(self):
        return [{"shape": r["name"], **{c: r[c] for c in _COLUMNS[1:]}} for r in self.rows]

    @property
    def table(self):
        """The cases' shape, passed, max_error, tolerance, ms and message, as a pandas DataFrame
        where pandas is installed, else as a list of dicts."""
        try:
            import pandas as pd
        except ImportError:
            return self._columns()
        return pd.DataFrame(self._columns(), columns=list(_COLUMNS))

    def assert_passed(self):
        """Raise AssertionError naming the failing shapes (for pytest)."""
        if not self.all_passed:
            raise AssertionError(str(self))

    def __bool__(self):
        return self.all_passed

    def _headline(self):
        passed = sum(r["passed"] for r in self.rows)
        return f"{self.kernel}: {passed} of {len(self.rows)} shapes pass"

    def __str__(self):
        cells = [[_fmt(r[c]) for c in _COLUMNS] for r in self._columns()]
        widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
                  for i, c in enumerate(_COLUMNS)]
        widths[-1] = len(_COLUMNS[-1])
        lines = ["  ".join(c.ljust(w) for c, w in zip(_COLUMNS, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
        lines.append(self._headline())
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self):
        table = self.table
        passed = sum(r["passed"] for r in self.rows)
        head = f"<p><b>{self.kernel}</b>: {passed} of {len(self.rows)} shapes pass</p>"
        if hasattr(table, "to_html"):
            return head + table.to_html(index=False)
        return head + "<pre>" + str(self) + "</pre>"


CheckReport = GradeTable   # its first name


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _matmul_message(name, got, inputs, launches):
    """tiledmm.testing's words for a wrong product ('matmul: k of n elements out of
    tolerance; first at [i, j] ...')."""
    try:
        testing.assert_matmul_close(got, inputs["A"], inputs["B"])
    except AssertionError as exc:
        return str(exc)
    return f"{name}: wrong"   # compare() found what assert_matmul_close did not: say so plainly


def _sum_message(in_place):
    def message(name, total, inputs, launches):
        x = inputs["A" if in_place else "x"]
        try:
            testing.assert_sum_close(total, x, any_order=False)   # the grade's tolerance
        except AssertionError as exc:
            return str(exc) + reduce_hint(total, x, in_place, launches)
        return f"{name}: wrong"
    return message


def _matmul_assignment(shapes, launch, dtype, timeout):
    base = BUILTIN["matmul"]()
    return Assignment(
        "grade_matmul", base.args, [{"M": M, "N": N, "K": K} for M, N, K in shapes],
        base.reference, LaunchFunction(launch, ("M", "N", "K")), description=base.description,
        tolerance=base.tolerance, dtype=dtype, timeout=timeout, explain=_matmul_message)


def _reduce_assignment(sizes, launch, dtype, timeout, in_place):
    cases = [{"n": n} for n in sizes]
    launch = LaunchFunction(launch, ("n",), passes=True)
    if not in_place:
        base = BUILTIN["reduce"]()
        return Assignment("grade_reduce", base.args, cases, base.reference, launch,
                          description=base.description, tolerance=base.tolerance,
                          combine=base.combine, dtype=dtype, timeout=timeout,
                          explain=_sum_message(False))
    return Assignment(
        "grade_reduce (in place)", description="the sum of A[0..n), left in A[0] after the last "
                                               "pass",
        args=[Arg("A", "inout", ("n",), aliases=("a", "x", "in", "input", "data", "d_A")),
              Arg("n", "size", aliases=("N", "size", "length", "len", "count"))],
        cases=cases, reference=lambda A, **_: {"A": A.sum()},
        combine={"A": lambda A: float(A[0]) if A.size else 0.0}, tolerance="sum",
        launch=launch, dtype=dtype, timeout=timeout, explain=_sum_message(True))


def _grade(kernel, assignment, args, backend, check, seed, pass_scalars):
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a tm.compile(...) kernel, got {type(kernel).__name__}")
    if args is not None:
        mapping = Mapping.by_function(kernel.params, assignment.args, args)
    else:
        try:
            mapping = match_arguments(kernel.params, assignment.args, pass_scalars)
        except ValueError as exc:
            names = ", ".join(a.name for a in assignment.args)
            raise ValueError(f"{kernel.signature}: {exc}; or pass args=lambda {names}: (...) to "
                             "map the arguments yourself") from None
    backend = _backend.resolve(backend)[1]
    report = GradeReport(kernel.name, assignment.name, backend, seed, False)
    report.kernel, report.signature, report.mapping = kernel.name, kernel.signature, mapping.text
    report.launch = assignment.launch.describe()
    report.speed = {"graded": False, "note": "not graded by tm.grade_matmul / tm.grade_reduce"}
    rng = np.random.default_rng(seed)   # one generator through the cases, in order
    run_cases(report, assignment, assignment.cases, kernel, mapping, assignment.launch, backend,
              check, None, lambda i: rng)
    return GradeTable(report)


def grade_matmul(kernel, launch, shapes=None, *, args=None, dtype=np.float32, backend=None,
                 check=False, seed=0, timeout="default"):
    """Run a matmul kernel (C = A @ B, row-major M x K and K x N) over `shapes` (default
    MATMUL_SHAPES, as (M, N, K)) and compare with NumPy in float64 with the K-scaled tolerance
    of tiledmm.testing.assert_matmul_close. `launch(M, N, K)` -> (grid, block[, shared_bytes]);
    `args(A, B, C, M, N, K)` -> the kernel's arguments (default: matched as tm.grade matches
    them). `check=True` runs in check mode (emu), so an out-of-bounds access fails the shape
    with the thread and block that made it. timeout: seconds per shape (default: the kernel's
    default, $TILEDMM_KERNEL_TIMEOUT or 60); after 2 shapes time out, or 3 crash, the rest are
    not run. Returns a GradeTable (its first name, CheckReport, still works).
    `tm.check_matmul` is this function's first name."""
    limit = default_timeout() if timeout == "default" else timeout
    assignment = _matmul_assignment(shapes or MATMUL_SHAPES, launch, dtype, limit)
    return _grade(kernel, assignment, args, backend, check, seed, False)


def grade_reduce(kernel, launch, sizes=None, *, args=None, dtype=np.float32, backend=None,
                 check=False, seed=0, timeout="default"):
    """Run a sum kernel over `sizes` (default REDUCE_SIZES) and compare with NumPy's float64
    sum within tiledmm.testing.assert_sum_close's tolerance. Two forms (see the module's help):
    `(x, out)`, the result being out.sum(), with out one zeroed element per block of the
    largest pass; or in place, one pointer holding x, the result being its element 0 after the
    last pass. `launch(n)` -> one pass `(grid, block[, shared_bytes][, {scalars}])` or a list
    of them, launched in order; `args(x, out, n, **scalars)` or `args(A, n, **scalars)` maps
    the arrays to the kernel's arguments (default: matched as tm.grade matches them, the other
    scalars from each pass's dict). A wrong sum that equals the sum of a prefix of x says how
    many elements at the end were never added (a grid that rounds down). timeout: as
    grade_matmul's. `tm.check_reduce` is this function's first name."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a tm.compile(...) kernel, got {type(kernel).__name__}")
    in_place = sum(bool(getattr(p, "takes_array", p.pointer)) for p in kernel.params) == 1
    limit = default_timeout() if timeout == "default" else timeout
    assignment = _reduce_assignment(sizes or REDUCE_SIZES, launch, dtype, limit, in_place)
    return _grade(kernel, assignment, args, backend, check, seed, True)


check_matmul = grade_matmul   # the first names, kept as aliases (notebooks and courses use them)
check_reduce = grade_reduce
