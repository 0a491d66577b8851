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

Matmul outputs start filled with NaN, so an element the kernel never writes fails. A reduction
kernel gets an output of one element per block, zero-filled: it may write per-block partial sums
to out[blockIdx.x] or add into out[0] atomically; the checker sums that output (in float64).
"""
import numpy as np

from . import testing
from .user_kernels import Kernel, KernelError

__all__ = ["check_matmul", "check_reduce", "CheckReport", "MATMUL_SHAPES", "REDUCE_SIZES"]

# (M, N, K): multiples of 16 and 32 first (where a square-only kernel is right), then 1x1,
# non-multiples of the tile, tall, wide, K = 1, and empty problems.
MATMUL_SHAPES = [(32, 32, 32), (64, 64, 64), (1, 1, 1), (17, 17, 17), (33, 33, 33),
                 (16, 48, 32), (48, 16, 32), (100, 7, 37), (7, 100, 37), (65, 31, 1),
                 (130, 3, 20), (3, 130, 20), (0, 5, 3), (5, 4, 0)]
REDUCE_SIZES = [1024, 1, 2, 31, 33, 255, 257, 1000, 4099, 70001, 0]


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
    text = str(exc)
    if isinstance(exc, KernelError) and "\n" in text:
        text = text.split("\n", 1)[1]
    return f"{type(exc).__name__}: {text}"


def _launch_config(launch, *problem):
    config = launch(*problem)
    if not isinstance(config, tuple) or len(config) not in (2, 3):
        raise ValueError("launch(...) must return (grid, block) or (grid, block, shared_bytes), "
                         f"got {config!r}")
    return config if len(config) == 3 else (*config, 0)


def _by_name(kernel, pointers, scalars, family):
    """A function (arrays..., sizes...) -> the kernel's arguments, matched by parameter name."""
    params = kernel.params
    ptrs = [p for p in params if p.pointer]
    if len(ptrs) != len(pointers):
        raise ValueError(f"{kernel.signature}: a {family} kernel for the checker takes "
                         f"{len(pointers)} pointers ({', '.join(pointers)}); pass args= to map "
                         "the arguments yourself")
    order = []
    for p in params:
        if p.pointer:
            order.append(("ptr", ptrs.index(p)))
            continue
        for key, names in scalars.items():
            if p.name in names:
                order.append(("size", key))
                break
        else:
            raise ValueError(f"{kernel.signature}: cannot tell what to pass for '{p.name}' "
                             f"(the checker knows {', '.join(n for v in scalars.values() for n in v)}); "
                             "pass args=lambda ...: (...) to map the arguments yourself")

    def make(arrays, sizes):
        return tuple(arrays[i] if kind == "ptr" else sizes[i] for kind, i in order)
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
        C = np.full((M, N), np.nan, dtype)
        try:
            grid, block, shared = _launch_config(launch, M, N, K)
            res = kernel(grid, block, *args(A, B, C, M, N, K), shared_bytes=shared,
                         backend=backend, check=check, flops=2.0 * M * N * K)
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
        rows.append(_row(shape, not message, max_error, float(tol.max()) if tol.size else 0.0,
                         res.timing.kernel_ms, message))
    return CheckReport(kernel.name, rows)


def check_reduce(kernel, launch, sizes=None, *, args=None, dtype=np.float32, backend=None,
                 check=False, seed=0):
    """Run a sum kernel over `sizes` (default REDUCE_SIZES) and compare with NumPy's float64
    sum within tiledmm.testing.assert_sum_close's tolerance. `launch(n)` -> (grid, block[,
    shared_bytes]); the kernel gets x (n elements) and out (one zeroed element per block) and
    `args(x, out, n)` maps them (default: by parameter name). The result is out.sum()."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a tm.compile(...) kernel, got {type(kernel).__name__}")
    if args is None:
        by_name = _by_name(kernel, ("x", "out"),
                           {0: ("n", "N", "size", "length", "len", "count")}, "reduce")
        args = lambda x, out, n: by_name((x, out), (n,))  # noqa: E731
    rng = np.random.default_rng(seed)
    rows = []
    for n in (sizes or REDUCE_SIZES):
        x = testing.exact_integer_matrix(rng, (n,), dtype) / 4
        try:
            grid, block, shared = _launch_config(launch, n)
            blocks = int(np.prod([g for g in (grid if isinstance(grid, tuple) else (grid,))]))
            out = np.zeros(max(blocks, 1), dtype)
            res = kernel(grid, block, *args(x, out, n), shared_bytes=shared, backend=backend,
                         check=check)
        except (KernelError, ValueError, TypeError, MemoryError) as exc:
            rows.append(_row(str(n), False, np.nan, np.nan, np.nan, _message(exc)))
            continue
        total = out.astype(np.float64).sum()
        expected = x.astype(np.float64).sum()
        tol = 2.0 * (n + 2) * float(np.finfo(dtype).eps) * float(np.abs(x).astype(np.float64).sum()) \
            + float(np.finfo(dtype).tiny)
        message = ""
        try:
            testing.assert_sum_close(total, x)
        except AssertionError as exc:
            message = str(exc)
        err = abs(total - expected) if np.isfinite(total) else np.inf
        rows.append(_row(str(n), not message, err, tol, res.timing.kernel_ms, message))
    return CheckReport(kernel.name, rows)
