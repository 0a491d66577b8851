"""A case's outputs against the reference: tolerances (tiledmm.testing's bounds or the
assignment's own) and a message that says what is wrong (first wrong element, elements never
written, a sum that misses the last elements)."""
import numpy as np

from .. import testing

__all__ = ["tolerance", "compare", "output_array", "reduce_hint"]


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


def reduce_hint(total, x, in_place, passes):
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


def output_array(shape, dtype, fill=None):
    """(array, mark): an output starts as a marked NaN (found again if never written), or
    filled with `fill`."""
    if fill is not None:
        return np.full(shape, fill, dtype), None
    return _marked_nan(shape, dtype)


def tolerance(assignment, expected, inputs, dtype):
    """The per-element (or scalar) tolerance for `expected` under the assignment's policy."""
    policy = assignment.tolerance
    ins = [inputs[a.name] for a in assignment.args if a.kind in ("in", "inout")]
    tiny = float(np.finfo(dtype).tiny)
    if policy == "matmul":
        return testing.matmul_tolerance(ins[0], ins[1], dtype)
    if policy == "sum":
        return testing.sum_tolerance(ins[0], dtype)
    if callable(policy):
        return np.asarray(policy(expected, **inputs), np.float64)
    if isinstance(policy, dict):
        return float(policy.get("atol", 0.0)) + float(policy.get("rtol", 0.0)) * \
            np.abs(np.asarray(expected, np.float64)) + tiny
    raise ValueError(f"assignment {assignment.name!r}: tolerance must be 'matmul', 'sum', "
                     f"{{'rtol': .., 'atol': ..}} or a callable, got {policy!r}")


def _index(shape, flat):
    return "".join(f"[{i}]" for i in np.unravel_index(flat, shape)) if shape else ""


def compare(name, got, expected, tol, mark=None, sum_of=None, explain=None):
    """(passed, max_error, max tolerance, message) for output `name`. `mark`: the never-written
    marker of an output array; `sum_of`: the summed input, for a hint on a wrong sum;
    `explain()`: the message for wrong values when every element was written (the assignment's
    own words; default: the first wrong element)."""
    got64 = np.asarray(got, np.float64)
    expected = np.asarray(expected, np.float64)
    if got64.shape != expected.shape:
        return False, np.inf, np.nan, (f"{name}: shape {got64.shape}, expected {expected.shape}")
    tol = np.broadcast_to(np.asarray(tol, np.float64), expected.shape)
    if not expected.size:
        return True, 0.0, 0.0, ""
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got64 - expected)
    finite = np.isfinite(expected)
    bad = (finite & ~(err <= tol)) | (~finite & ~((got64 == expected) |
                                                  (np.isnan(got64) & np.isnan(expected))))
    max_error = float(np.max(np.where(np.isnan(err), np.inf, err)))
    max_tol = float(tol.max())
    if not bad.any():
        return True, max_error, max_tol, ""
    unwritten = _never_written(np.asarray(got), mark, name) if mark is not None else ""
    if unwritten:
        written = ~(np.asarray(got).view(mark[0]) == mark[1])
        wrong = int((written & bad).sum())
        return False, max_error, max_tol, unwritten + (
            f"; {wrong} of the elements written are wrong" if wrong
            else "; the elements written are right")
    if explain is not None:
        return False, max_error, max_tol, explain()
    flat = int(np.argmax(bad.ravel()))
    where = f"{name}{_index(expected.shape, flat)}"
    message = (f"{int(bad.sum())} of {bad.size} element{'s' if bad.size != 1 else ''} of {name} "
               f"wrong; first {where}: got {float(got64.ravel()[flat])!r}, expected "
               f"{float(expected.ravel()[flat])!r} (error {err.ravel()[flat]:.3g} > tolerance "
               f"{tol.ravel()[flat]:.3g})") if expected.shape else (
               f"{name}: got {float(got64)!r}, expected {float(expected)!r} (error "
               f"{float(err):.3g} > tolerance {float(tol):.3g})")
    if sum_of is not None and not expected.shape:
        message += reduce_hint(float(got64), np.asarray(sum_of).ravel(), False, 1)
    return False, max_error, max_tol, message
