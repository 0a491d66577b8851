"""An instructor's assignment for `python -m tiledmm grade`: y = a * x + y (BLAS saxpy).

    python -m tiledmm grade student.cu --assignment saxpy_assignment.py

The file is ordinary Python run by the grader (never by the student's code); it must define
ASSIGNMENT. docs/grading.md explains each field.
"""
import numpy as np

import tiledmm as tm
from tiledmm.grading import Arg, Assignment, Speed


def reference(x, y, a, n):
    """The expected outputs from float64 copies of the inputs, by argument name."""
    return {"y": a * x + y}


def timed_reference(x, y, **_):
    """The speed part's reference (cuda): tiledmm's vec_add moves the same bytes as saxpy
    (two loads and a store per element). Called once per timed run; returns its Result."""
    return tm.vec_add(x, y, backend="cuda", warmup=0, repeat=1)


ASSIGNMENT = Assignment(
    name="saxpy",
    description="y = a * x + y for n floats; one thread per element",
    # The order a kernel matched by position takes; names and aliases match by name.
    args=[Arg("x", "in", shape=("n",), aliases=("X", "in", "d_x")),
          Arg("y", "inout", shape=("n",), aliases=("Y", "out", "d_y")),
          Arg("a", "scalar", value=lambda rng: float(rng.integers(1, 8)) / 2,
              aliases=("alpha", "A")),
          Arg("n", "size", aliases=("N", "size", "len", "length"))],
    # Fixed cases: sizes by name, with optional name, points, big (plain mode) and timeout.
    cases=[{"n": 1}, {"n": 255}, {"n": 256}, {"n": 257}, {"n": 1000, "points": 2},
           {"name": "empty", "n": 0, "points": 0},
           {"name": "waves 2^20", "n": 1 << 20, "big": True, "points": 2}],
    # More cases drawn from the grading seed (secret unless --seed is given).
    random_cases=lambda rng: [{"name": "random", "n": int(rng.integers(2, 50000))}],
    reference=reference,
    tolerance={"rtol": 4 * float(np.finfo(np.float32).eps), "atol": 0.0},
    # Expressions of the sizes (and of the kernel's own parameter names); a submission may
    # declare its own with `// tiledmm-grade:` lines or a .launch file.
    launch={"grid": "cdiv(n, 256)", "block": "256", "shared": "0"},
    speed=Speed(case={"n": 1 << 26}, reference=timed_reference, points=2, full_within=1.2,
                zero_at=3.0, label="tiledmm vec_add (same traffic)"),
    timeout=10,
)
