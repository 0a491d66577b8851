"""What an assignment is: its arguments, cases, reference, tolerance, launch, points and speed
reference (the built-in ones are in tiledmm/grading/builtin.py; loading one by name or from an
instructor's file is tiledmm/grading/lookup.py's; docs/grading.md shows a complete example).

An assignment file is a Python file that defines `ASSIGNMENT = Assignment(...)`; it is the
instructor's code and runs in the grader's process (the submission never does).
"""
import numpy as np

from .launch_spec import LaunchFunction, LaunchSpec, evaluate

__all__ = ["Arg", "Assignment", "Speed"]

KINDS = ("in", "out", "inout", "size", "scalar", "pass")


class Arg:
    """One argument of the kernel an assignment asks for.

    name: the canonical name (used by the reference and in the report); aliases: other
    parameter names that match it (exact case). kind: 'in' (an input array), 'out' (an output
    array, filled with a marked NaN so elements never written are found), 'inout' (an input
    array the kernel updates), 'size' (an integer the case gives, e.g. n), 'scalar' (a number:
    `value`, an expression of the sizes or a callable(rng)), 'pass' (a number each launch pass
    gives: a reduction's depth, from tm.grade_reduce's launch= dicts; made by the argument
    matcher, not written in assignments). An 'out' array with `value=0.0`
    starts filled with that value instead (e.g. partial sums added atomically).
    shape: the array's shape as expressions of the sizes, e.g. ("M", "K"); 'blocks' is the
    launch's number of blocks.
    high: input values are random nonzero integers in [-high, high] divided by 4 (exact in
    float32, see tiledmm.testing.exact_integer_matrix)."""

    def __init__(self, name, kind, shape=(), aliases=(), value=None, high=8):
        if kind not in KINDS:
            raise ValueError(f"Arg {name!r}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if kind in ("in", "out", "inout") and not shape:
            raise ValueError(f"Arg {name!r}: an array argument needs shape=, e.g. ('n',)")
        self.name, self.kind, self.aliases = name, kind, (name, *aliases)
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.value, self.high = value, high

    @property
    def is_array(self):
        return self.kind in ("in", "out", "inout")

    def __repr__(self):
        return f"Arg({self.name!r}, {self.kind!r})"


class Speed:
    """The speed part (graded on the cuda backend only).

    case: the sizes to time at; ``reference(**values)`` -> a tiledmm Result of the reference kernel
    on the case's inputs (launched with warmup=0, repeat=1; it is called once per timed run);
    points: what the speed part is worth; full_within: full points while the submission takes at
    most this times the reference's time (1.2, the CMU 15-418/CS149 rule); zero_at: the points
    fall linearly to `floor` (a fraction of points) at this ratio and stay there; warmup,
    repeat: runs before timing and timed runs (the median counts)."""

    def __init__(self, case, reference, points=1.0, full_within=1.2, zero_at=3.0, floor=0.0,
                 warmup=2, repeat=10, label=None):
        self.case, self.reference, self.points = dict(case), reference, float(points)
        self.full_within, self.zero_at = float(full_within), float(zero_at)
        self.floor = float(floor)
        self.warmup, self.repeat, self.label = int(warmup), int(repeat), label

    def fraction(self, ratio):
        """The share of the speed points for submission time / reference time = ratio."""
        if ratio <= self.full_within:
            return 1.0
        if ratio >= self.zero_at:
            return self.floor
        slope = (ratio - self.full_within) / (self.zero_at - self.full_within)
        return 1.0 - (1.0 - self.floor) * slope


class CaseSizes:
    """What every kind of assignment (a kernel's, a program's) says of one of its cases."""
    # a case's entries that are not sizes; floats: random floats as inputs (not small integers)
    CASE_KEYS = ("name", "points", "big", "timeout", "floats")

    def sizes_of(self, case):
        """The case's sizes (its entries other than name, points, big, timeout)."""
        return {k: v for k, v in case.items() if k not in self.CASE_KEYS}

    def label(self, case):
        if "name" in case:
            return str(case["name"])
        return "x".join(str(v) for v in self.sizes_of(case).values())


class Assignment(CaseSizes):
    """An assignment: what the kernel takes, what it must compute and how it is launched.

    name, description: shown in the report.
    args: [Arg, ...] in the order a kernel matched by position takes them.
    cases: [{size name: value, ...}, ...]; a case may also give 'name' (its label), 'points'
    (default 1), 'big': True (several waves of blocks: plain mode even on emu, where check mode
    runs the others) and 'timeout' (seconds).
    random_cases: callable(rng) -> more such cases drawn from the grading seed (optional).
    reference: ``callable(**inputs)`` -> the expected outputs, {name: array or number} (or one
    array when there is one output): inputs are float64 copies of the arrays and the sizes.
    combine: {output name: callable(array) -> value compared with the reference} (e.g. a sum of
    per-block partial sums); default: the array itself.
    tolerance: 'matmul' (tiledmm.testing's K-scaled bound for the product of the first two
    'in' arrays), 'sum' (assert_sum_close's bound for the sum of the first 'in' array),
    {'rtol': r, 'atol': a}, or ``callable(expected, **inputs)`` -> per-element tolerance.
    launch: LaunchSpec, {'grid': expr, 'block': expr, 'shared': expr} (see launch_spec), or a
    LaunchFunction (a Python function of the sizes, as tm.grade_matmul's launch=).
    dtype: the element type of the arrays unless the kernel's pointer says another float type.
    speed: Speed or None. timeout: seconds per case (default 20; None: no limit).
    explain: ``callable(output name, got, inputs, launches)`` -> the message for an output whose
    values are wrong (every element written); `inputs` as the kernel received them, in their
    dtypes; `launches` how many passes ran. Default: its first wrong element."""

    def __init__(self, name, args, cases, reference, launch, *, description="", tolerance=None,
                 combine=None, random_cases=None, speed=None, dtype=np.float32, timeout=20.0,
                 explain=None):
        self.name, self.description = name, description
        self.args = list(args)
        names = [a.name for a in self.args]
        if len(set(names)) != len(names):
            raise ValueError(f"assignment {name!r}: argument names repeat: {names}")
        self.cases = [dict(c) for c in cases]
        self.random_cases = random_cases
        self.reference, self.combine = reference, dict(combine or {})
        self.tolerance = tolerance or {"rtol": 1e-5, "atol": 1e-6}
        self.launch = launch if isinstance(launch, (LaunchSpec, LaunchFunction)) else LaunchSpec(
            launch["grid"], launch["block"], launch.get("shared", 0))
        self.explain = explain
        self.speed, self.dtype = speed, np.dtype(dtype)
        self.timeout = None if timeout is None else float(timeout)   # None: no limit
        if not any(a.kind in ("out", "inout") for a in self.args):
            raise ValueError(f"assignment {name!r} has no output (an Arg of kind 'out' or 'inout')")

    @property
    def outputs(self):
        return [a for a in self.args if a.kind in ("out", "inout")]


    def shape(self, arg, names):
        return tuple(int(evaluate(s, names)) if isinstance(s, str) else int(s) for s in arg.shape)

    def __repr__(self):
        return f"<tiledmm Assignment {self.name}: {len(self.cases)} cases>"
