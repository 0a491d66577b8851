"""Grade a matmul or reduction kernel the user wrote: run it over the awkward shapes tiledmm's
own tests use and compare with NumPy (float64, tiledmm.testing's tolerances).

    report = tm.check_matmul(kernel, lambda M, N, K: (((N + 15) // 16, (M + 15) // 16), (16, 16)))
    report              # a table in a notebook: shape, passed, max_error, tolerance, ms, message
    report.all_passed   # for pytest: assert report.all_passed, report  (or report.assert_passed())

`launch(M, N, K)` (matmul) or `launch(n)` (reduce) maps the problem to `(grid, block)` or
`(grid, block, shared_bytes)`. The kernel's arguments are found by name: pointer parameters in
order (A, B, C) or (x, out), integer parameters named M, N, K (matmul) or n / N / size / length
(reduce); pass `args=` to map them yourself, e.g. the lecture's square-only kernel:
`args=lambda A, B, C, M, N, K: (A, B, C, N)`.

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

from . import testing
from .student.user_kernels import Kernel, KernelError

__all__ = ["check_matmul", "check_reduce", "CheckReport", "MATMUL_SHAPES", "REDUCE_SIZES"]

# (M, N, K): multiples of 16 and 32 first (where a square-only kernel is right), then 1x1,
# non-multiples of the tile, tall, wide, K = 1, and empty problems.
MATMUL_SHAPES = [(32, 32, 32), (64, 64, 64), (1, 1, 1), (17, 17, 17), (33, 33, 33),
                 (16, 48, 32), (48, 16, 32), (100, 7, 37), (7, 100, 37), (65, 31, 1),
                 (130, 3, 20), (3, 130, 20), (0, 5, 3), (5, 4, 0)]
REDUCE_SIZES = [1024, 1, 2, 31, 33, 255, 257, 1000, 4099, 70001, 0]


# Each case launches the kernel exactly once: a kernel that accumulates (C += ..., atomics into
# out, in-place passes) would be wrong after the cuda backend's default warm-up and repeats.
_ONCE = {"warmup": 0, "repeat": 1}


class CheckReport:
    """The checker's result: `.rows` (list of dicts), `.table` (a pandas DataFrame when pandas
    is installed, else the rows), `.all_passed`, `.failures`, `.assert_passed()`."""

    def __init__(self, kernel, rows):
        self.kernel, self.rows = kernel, rows

    @property
    def all_passed(self):
        """True when every case passed."""
        return all(r["passed"] for r in self.rows)

    @property
    def failures(self):
        """The rows of the cases that failed."""
        return [r for r in self.rows if not r["passed"]]

    @property
    def table(self):
        """The rows as a pandas DataFrame where pandas is installed, else the list of dicts."""
        try:
            import pandas as pd
        except ImportError:
            return list(self.rows)
        return pd.DataFrame(self.rows)

    def assert_passed(self):
        """Raise AssertionError naming the failing shapes (for pytest)."""
        if not self.all_passed:
            raise AssertionError(str(self))

    def __bool__(self):
        return self.all_passed

    def __str__(self):
        cols = ["shape", "passed", "max_error", "tolerance", "ms", "message"]
        cells = [[_fmt(r[c]) for c in cols] for r in self.rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
                  for i, c in enumerate(cols)]
        widths[-1] = len(cols[-1])
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
        passed = sum(r["passed"] for r in self.rows)
        lines.append(f"{self.kernel}: {passed} of {len(self.rows)} shapes pass")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self):
        table = self.table
        head = f"<p><b>{self.kernel}</b>: {sum(r['passed'] for r in self.rows)} of " \
               f"{len(self.rows)} shapes pass</p>"
        if hasattr(table, "to_html"):
            return head + table.to_html(index=False)
        return head + "<pre>" + str(self) + "</pre>"


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _message(exc):
    """A failed launch's report without the runtime's generic first line."""
    lines = str(exc).splitlines()
    if isinstance(exc, KernelError):
        # the runtime's "kernel launch failed: cudaError..." line goes when a report follows it;
        # a fault in the worker is its first line, and the worker's restart is no news here
        if len(lines) > 1 and "failed: cuda" in lines[0]:
            lines = lines[1:]
        lines = [ln for ln in lines if ln != "(the worker is started again for the next call)"]
    return f"{type(exc).__name__}: " + "\n".join(lines)


def _launch_config(launch, *problem):
    config = launch(*problem)
    if not isinstance(config, tuple) or len(config) not in (2, 3):
        raise ValueError("launch(...) must return (grid, block) or (grid, block, shared_bytes), "
                         f"got {config!r}")
    return config if len(config) == 3 else (*config, 0)


_PASS_FORMS = ("a pass is (grid, block), (grid, block, shared_bytes), or either with a dict of "
               "scalar arguments at the end; several passes are a list of them")


def _passes(launch, n):
    """launch(n) as a list of (grid, block, shared_bytes, scalars) (a reduction's passes)."""
    config = launch(n)
    passes = [config] if isinstance(config, tuple) else list(config) \
        if not isinstance(config, (str, bytes, dict)) and hasattr(config, "__iter__") else None
    if passes is None:   # an empty list is allowed: an in-place sum of one element is done
        raise ValueError(f"launch({n}) must return one pass or a list of passes ({_PASS_FORMS}), "
                         f"got {config!r}")
    out = []
    for p in passes:
        if not isinstance(p, tuple):
            raise ValueError(f"launch({n}): {_PASS_FORMS}; got {p!r}")
        scalars = {}
        if p and isinstance(p[-1], dict):
            p, scalars = p[:-1], p[-1]
        if len(p) not in (2, 3):
            raise ValueError(f"launch({n}): {_PASS_FORMS}; got {p!r}")
        out.append((p[0], p[1], p[2] if len(p) == 3 else 0, scalars))
    return out


def _blocks(grid):
    return int(np.prod([int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,))]))


def _marked_nan(shape, dtype):
    """An array filled with a NaN whose bits a kernel does not produce (a quiet NaN with a
    payload): elements that still hold them after a launch were never written."""
    dtype = np.dtype(dtype)
    bits = {4: (np.uint32, 0x7FC0A5A5), 8: (np.uint64, 0x7FF8A5A5A5A5A5A5)}.get(dtype.itemsize)
    if dtype.kind != "f" or bits is None:
        return np.zeros(shape, dtype), None
    kind, value = bits
    return np.full(shape, value, kind).view(dtype), (kind, value)


def _never_written(array, mark, name):
    """'k of n elements of name never written (first name[i][j])', or '' when all were."""
    if mark is None or not array.size:
        return ""
    kind, value = mark
    left = array.view(kind) == value
    count = int(left.sum())
    if not count:
        return ""
    first = "".join(f"[{i}]" for i in np.unravel_index(int(np.argmax(left.ravel())), array.shape))
    return (f"{count} of {array.size} element{'s' if array.size != 1 else ''} of {name} never "
            f"written (first {name}{first})")


def _pointer_params(kernel):
    return [p for p in kernel.params if getattr(p, "takes_array", p.pointer)]


def _by_name(kernel, pointers, scalars, family, passes=False):
    """A function (arrays, sizes, extra) -> the kernel's arguments, matched by parameter name;
    with passes=True, scalars the checker does not know come from each pass's dict (extra)."""
    params = kernel.params
    ptrs = _pointer_params(kernel)
    if len(ptrs) != len(pointers):
        raise ValueError(f"{kernel.signature}: a {family} kernel for the checker takes "
                         f"{len(pointers)} pointers ({', '.join(pointers)}); pass args= to map "
                         "the arguments yourself")
    order = []
    for p in params:
        if p in ptrs:
            order.append(("ptr", ptrs.index(p)))
            continue
        for key, names in scalars.items():
            if p.name in names:
                order.append(("size", key))
                break
        else:
            if not passes:
                raise ValueError(
                    f"{kernel.signature}: cannot tell what to pass for '{p.name}' (the checker "
                    f"knows {', '.join(n for v in scalars.values() for n in v)}); pass "
                    "args=lambda ...: (...) to map the arguments yourself")
            order.append(("extra", p.name))

    def make(arrays, sizes, extra=None):
        extra = extra or {}
        missing = [i for kind, i in order if kind == "extra" and i not in extra]
        if missing:
            raise ValueError(f"{kernel.signature}: cannot tell what to pass for "
                             f"{', '.join(repr(m) for m in missing)}: give it in each pass, e.g. "
                             f"launch=lambda n: [(grid, block, shared_bytes, "
                             f"{{{missing[0]!r}: value}})]")
        return tuple(arrays[i] if kind == "ptr" else sizes[i] if kind == "size" else extra[i]
                     for kind, i in order)
    return make


def _row(shape, passed, max_error, tolerance, ms, message):
    return {"shape": shape, "passed": bool(passed), "max_error": float(max_error),
            "tolerance": float(tolerance), "ms": float(ms), "message": message}


def check_matmul(kernel, launch, shapes=None, *, args=None, dtype=np.float32, backend=None,
                 check=False, seed=0):
    """Run a matmul kernel (C = A @ B, row-major M x K and K x N) over `shapes` (default
    MATMUL_SHAPES, as (M, N, K)) and compare with NumPy in float64 with the K-scaled tolerance
    of tiledmm.testing.assert_matmul_close. `launch(M, N, K)` -> (grid, block[, shared_bytes]);
    `args(A, B, C, M, N, K)` -> the kernel's arguments (default: by parameter name).
    `check=True` runs in check mode (emu), so an out-of-bounds access fails the shape with the
    thread and block that made it. Returns a CheckReport."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a tm.compile(...) kernel, got {type(kernel).__name__}")
    if args is None:
        by_name = _by_name(kernel, ("A", "B", "C"),
                           {0: ("M", "m"), 1: ("N", "n"), 2: ("K", "k")}, "matmul")
        args = lambda A, B, C, M, N, K: by_name((A, B, C), (M, N, K))  # noqa: E731
    rng = np.random.default_rng(seed)
    rows = []
    for M, N, K in (shapes or MATMUL_SHAPES):
        shape = f"{M}x{N}x{K}"
        A = testing.exact_integer_matrix(rng, (M, K), dtype) / 4   # exact in float32
        B = testing.exact_integer_matrix(rng, (K, N), dtype) / 4
        C, mark = _marked_nan((M, N), dtype)
        try:
            grid, block, shared = _launch_config(launch, M, N, K)
            res = kernel(grid, block, *args(A, B, C, M, N, K), shared_bytes=shared,
                         backend=backend, check=check, flops=2.0 * M * N * K, **_ONCE)
        except (KernelError, ValueError, TypeError, MemoryError) as exc:
            rows.append(_row(shape, False, np.nan, np.nan, np.nan, _message(exc)))
            continue
        expected = A.astype(np.float64) @ B.astype(np.float64)
        tol = testing.matmul_tolerance(A, B, dtype)
        with np.errstate(invalid="ignore"):
            err = np.abs(C.astype(np.float64) - expected)
        max_error = float(np.nanmax(np.where(np.isnan(err), np.inf, err))) if err.size else 0.0
        message = ""
        try:
            testing.assert_matmul_close(C, A, B)
        except AssertionError as exc:
            message = str(exc)
        unwritten = _never_written(C, mark, "C")
        if unwritten:
            written = ~(C.view(mark[0]) == mark[1])
            wrong = int((written & ~(err <= tol)).sum())
            message = unwritten + (f"; {wrong} of the elements written are wrong" if wrong
                                   else "; the elements written are right")
        rows.append(_row(shape, not message, max_error, float(tol.max()) if tol.size else 0.0,
                         res.timing.kernel_ms, message))
    return CheckReport(kernel.name, rows)


def check_reduce(kernel, launch, sizes=None, *, args=None, dtype=np.float32, backend=None,
                 check=False, seed=0):
    """Run a sum kernel over `sizes` (default REDUCE_SIZES) and compare with NumPy's float64
    sum within tiledmm.testing.assert_sum_close's tolerance. Two forms (see the module's help):
    `(x, out)`, the result being out.sum(), with out one zeroed element per block of the
    largest pass; or in place, one pointer holding x, the result being its element 0 after the
    last pass. `launch(n)` -> one pass `(grid, block[, shared_bytes][, {scalars}])` or a list
    of them, launched in order; `args(x, out, n, **scalars)` or `args(A, n, **scalars)` maps
    the arrays to the kernel's arguments (default: by parameter name, the other scalars from
    each pass's dict). A wrong sum that equals the sum of a prefix of x says how many elements
    at the end were never added (a grid that rounds down)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a tm.compile(...) kernel, got {type(kernel).__name__}")
    in_place = len(_pointer_params(kernel)) == 1
    names = {0: ("n", "N", "size", "length", "len", "count")}
    if args is None:
        if in_place:
            by_name = _by_name(kernel, ("A",), names, "reduce", passes=True)
            args = lambda A, n, **extra: by_name((A,), (n,), extra)  # noqa: E731
        else:
            by_name = _by_name(kernel, ("x", "out"), names, "reduce", passes=True)
            args = lambda x, out, n, **extra: by_name((x, out), (n,), extra)  # noqa: E731
    rng = np.random.default_rng(seed)
    rows = []
    for n in (sizes or REDUCE_SIZES):
        x = testing.exact_integer_matrix(rng, (n,), dtype) / 4
        ms = 0.0
        try:
            passes = _passes(launch, n)
            if in_place:
                A = x.copy()
                arrays = (A,)
            else:
                out = np.zeros(max([1] + [_blocks(g) for g, _, _, _ in passes]), dtype)
                arrays = (x, out)
            for grid, block, shared, extra in passes:
                res = kernel(grid, block, *args(*arrays, n, **extra), shared_bytes=shared,
                             backend=backend, check=check, **_ONCE)
                ms += res.timing.kernel_ms
        except (KernelError, ValueError, TypeError, MemoryError) as exc:
            rows.append(_row(str(n), False, np.nan, np.nan, np.nan, _message(exc)))
            continue
        if in_place:
            total = float(A[0]) if n else 0.0
        else:
            total = out.astype(np.float64).sum()
        expected = x.astype(np.float64).sum()
        tol = 2.0 * (n + 2) * float(np.finfo(dtype).eps) * float(np.abs(x).astype(np.float64).sum()) \
            + float(np.finfo(dtype).tiny)
        message = ""
        try:
            testing.assert_sum_close(total, x)
        except AssertionError as exc:
            message = str(exc) + _reduce_hint(total, x, in_place, len(passes))
        err = abs(total - expected) if np.isfinite(total) else np.inf
        rows.append(_row(str(n), not message, err, tol, ms, message))
    return CheckReport(kernel.name, rows)


def _reduce_hint(total, x, in_place, passes):
    """What a wrong sum says about the kernel, where it says something: the sum of x[:k] is the
    last n-k elements never added; A[0] unchanged is A[0] never written."""
    n = x.size
    if in_place and n > 1 and total == float(x[0]):
        return (f"; A[0] still holds x[0] after {passes} pass{'es' if passes != 1 else ''}: "
                "the sum never reached A[0]")
    prefix = np.concatenate(([0.0], np.cumsum(x.astype(np.float64))))
    hits = np.nonzero(prefix[1:n] == total)[0]
    if hits.size:
        k = int(hits[-1]) + 1
        return (f"; it is the sum of x[:{k}]: the last {n - k} element{'s' if n - k != 1 else ''}"
                f" (x[{k}:]) were never added (does the grid round down?)")
    return ""
