"""tm.grade: one submission against one assignment.

    report = tm.grade("mm.cu", "matmul")              # emu: small cases in check mode
    report                                            # a table (Jupyter: HTML)
    report.score, report.max_score, report.passed
    report.write_gradescope("results.json")

Steps: read the submission's declared launch (tiledmm/grading/launch_spec.py); compile it in a
limited child process (compile_limits.py); match its parameters to the assignment's arguments
(matching.py); run every case isolated in tiledmm's worker process with a per-case time limit,
in check mode on emu for the cases that are not 'big'; compare with the reference
(compare.py); on cuda, time it against the assignment's reference kernel (speed.py).
Nothing the submission does raises here: compile errors, faults, timeouts, wrong or missing
output all become failed cases with a message.
"""
import functools
import os
import secrets

import numpy as np

from .. import _backend, testing
from ..confine import sandbox
from ..confine.isolation import stop_workers
from ..errors import CompileError, KernelError
from .lookup import load_assignment
from .compare import compare, output_array, tolerance
from .compile_limits import GRADING_COMPILE_CHILD_SECONDS, CompileLimitError, compile_submission
from .launch_spec import evaluate, read_declared
from .matching import match_arguments
from .report import GradeReport
from .speed import EMU_NOTE, grade_speed

__all__ = ["grade"]

MAX_TIMEOUTS = 2   # after this many cases time out, the rest are not run
MAX_CRASHES = 3    # after this many cases crash the worker (a signal), the rest are not run


SUBMISSION_MOST = 4 << 20   # bytes of a submission file


def _read_submission(submission):
    """(source, shown name, path or None)."""
    if isinstance(submission, os.PathLike) or (isinstance(submission, str) and
                                               "__global__" not in submission and
                                               "\n" not in submission):
        path = os.fspath(submission)
        # no link followed, no FIFO waited on, at most SUBMISSION_MOST bytes
        text = sandbox.read_bounded(path, SUBMISSION_MOST, whole=True)
        return text.decode("utf-8", errors="replace"), path, path
    if not isinstance(submission, str):
        raise TypeError("submission must be the path of a .cu file or its source text, got "
                        f"{type(submission).__name__}")
    return submission, "<source>", None


class UnconfinedError(RuntimeError):
    """grade() refuses to run a submission where the sandbox is not available."""


def require_confinement(allow_unconfined):
    """The grader's one rule, for kernels and programs alike: where the sandbox is not in force,
    UnconfinedError, unless allow_unconfined (the report then says so)."""
    if not sandbox.status()["confined"] and not allow_unconfined:
        raise UnconfinedError(
            f"{sandbox.describe()}\nThe grader refuses to run submissions unconfined: run it "
            "where Landlock and seccomp work (Linux >= 5.13 with libseccomp2; Docker's default "
            "profile from 20.10.9), or pass --allow-unconfined (allow_unconfined=True) to grade "
            "anyway, which the report then states.")


def grade(submission, assignment, *, backend=None, seed=None, kernel=None, timeout=None,
          check=True, compile_timeout=GRADING_COMPILE_CHILD_SECONDS, speed=True,
          allow_unconfined=False):
    """Grade a CUDA C submission (a .cu path or its source text) against an assignment (a
    built-in name: matmul, matmul_square, reduce, vec_add, mat_add; the path of an instructor's
    assignment file; or an Assignment). Returns a GradeReport.

    backend: 'emu' or 'cuda' (default: as tm.matmul). seed: the inputs' random seed (default: a
    secret random one). kernel: the `__global__` function to grade when the file has several
    (else its `// tiledmm-grade: kernel` line, else the only one). timeout: seconds per case
    (default: the assignment's, 20). check: run the small cases in check mode on emu.
    compile_timeout: seconds the compiler may take. speed: grade the speed part (cuda only).
    allow_unconfined: grade even where Landlock or seccomp is missing (the submission then runs
    with this account's rights; the report says so); otherwise that raises UnconfinedError.

    The submission is compiled and run only in confined processes (tiledmm/confine/sandbox.py), and
    tiledmm's worker (its process group) is ended before this returns, so nothing it started
    can touch the files the caller writes next."""
    require_confinement(allow_unconfined)
    try:
        return _grade(submission, assignment, backend, seed, kernel, timeout, check,
                      compile_timeout, speed)
    finally:
        stop_workers()   # their whole process groups, before any result is written


def _grade(submission, assignment, backend, seed, kernel, timeout, check, compile_timeout,
           speed):
    assignment = load_assignment(assignment)
    source, shown, path = _read_submission(submission)
    backend = _backend.resolve(backend)[1]
    seed_secret = seed is None
    seed = secrets.randbits(63) if seed_secret else int(seed)
    report = GradeReport(shown, assignment.name, backend, seed, seed_secret)
    report.confinement = sandbox.describe()
    cases = [dict(c) for c in assignment.cases]
    if assignment.random_cases is not None:
        cases += [dict(c) for c in assignment.random_cases(np.random.default_rng([seed, 0]))]
    use_check = check and backend == "emu"
    k = _prepare(report, assignment, source, path, kernel, backend, use_check, compile_timeout)
    if k is None:
        for c in cases:
            report.cases.append(_row(assignment, c, "-", False, 0.0, np.nan, np.nan, np.nan,
                                     "not run: the submission did not compile or fit the "
                                     "assignment"))
        report.speed = {"graded": False, "note": "the submission did not compile"}
        return report
    kern, mapping, launch = k
    run_cases(report, assignment, cases, kern, mapping, launch, backend, use_check, timeout,
              lambda i: np.random.default_rng([seed, i + 1]))
    if not speed or assignment.speed is None:
        report.speed = {"graded": False, "note": "not asked for" if assignment.speed else
                        "the assignment has no speed part"}
    elif backend != "cuda":
        report.speed = {"graded": False, "note": EMU_NOTE}
    elif not report.passed:
        report.speed = {"graded": False, "note": "a correctness case failed"}
    else:
        report.speed = _speed(assignment, kern, mapping, launch, backend, seed)
    return report


def run_cases(report, assignment, cases, kern, mapping, launch, backend, use_check, timeout,
              rng_of):
    """Run `cases` of `assignment` with a compiled kernel, a Mapping and a launch (LaunchSpec or
    LaunchFunction), one row each into report.cases: the correctness part of tm.grade, and all
    of tm.grade_matmul / tm.grade_reduce. use_check: check mode for the cases that are not
    'big'; timeout: seconds per case (None: the assignment's); rng_of(i): case i's generator.
    After MAX_TIMEOUTS cases that time out, or MAX_CRASHES that end the worker with a signal,
    the rest are not run."""
    timeouts = crashes = 0
    for i, case in enumerate(cases):
        if timeouts >= MAX_TIMEOUTS or crashes >= MAX_CRASHES:
            why = f"{timeouts} earlier cases ran past their time limit" \
                if timeouts >= MAX_TIMEOUTS else f"{crashes} earlier cases crashed"
            report.cases.append(_row(assignment, case, "-", False, 0.0, np.nan, np.nan, np.nan,
                                     f"not run: {why}"))
            continue
        mode = "check" if use_check and not case.get("big") else "plain"
        limit = case.get("timeout", timeout if timeout is not None else assignment.timeout)
        row, failure = _run_case(assignment, case, kern, mapping, launch, backend, mode, limit,
                                 rng_of(i))
        # what ended the launch, as KernelError.kind says it (never the message's words: a
        # kernel may print anything)
        timeouts += failure == KernelError.TIMEOUT
        crashes += failure == KernelError.SIGNAL
        report.cases.append(row)


def _prepare(report, assignment, source, path, kernel, backend, use_check, compile_timeout):
    """(kernel, mapping, launch) or None with report.compile_error set."""
    try:
        declared, origin = read_declared(source, path)
    except (ValueError, OSError) as exc:
        report.compile_error = f"launch declaration: {exc}"
        return None
    name = kernel or declared.get("kernel")
    options = [f"-D{d}" for d in declared.get("define", [])]
    try:
        kern, warnings = compile_submission(source, name, options, backend, use_check,
                                            seconds=compile_timeout)
    except (CompileError, CompileLimitError, ValueError, RuntimeError) as exc:
        report.compile_error = f"{type(exc).__name__}: {exc}"
        return None
    report.kernel, report.signature, report.warnings = kern.name, kern.signature, warnings
    try:
        mapping = match_arguments(kern.params, assignment.args)
    except ValueError as exc:
        report.compile_error = f"arguments: {exc}"
        return None
    report.mapping = mapping.text
    launch = assignment.launch.overridden(declared, f"declared by the {origin}")
    report.launch = f"{launch.describe()} ({launch.origin})"
    return kern, mapping, launch


def _row(assignment, case, mode, passed, score, max_error, tol, ms, message):
    points = float(case.get("points", 1.0))
    return {"name": assignment.label(case), "sizes": assignment.sizes_of(case), "mode": mode,
            "passed": bool(passed), "score": float(score) if passed else 0.0, "points": points,
            "max_error": float(max_error), "tolerance": float(tol), "ms": float(ms),
            "message": message}


def _inputs(assignment, sizes, mapping, launch, rng, floats=False):
    """(values by name, float64 inputs, marks, passes): passes are (grid, block, shared,
    scalars), one per launch; 'blocks' in shapes is the largest pass's number of blocks."""
    names = dict(sizes)
    names.update(mapping.size_names(sizes))
    passes = launch.passes(names)
    names["blocks"] = max([0] + [int(np.prod(grid)) for grid, _, _, _ in passes])
    dtypes = mapping.array_dtypes()
    values, marks = {}, {}
    for a in assignment.args:
        if a.kind == "size":
            values[a.name] = int(sizes[a.name])
        elif a.kind == "scalar":
            v = a.value
            values[a.name] = v(rng) if callable(v) else float(evaluate(v, names)) \
                if isinstance(v, str) else v
        else:
            shape, dtype = assignment.shape(a, names), dtypes.get(a.name, assignment.dtype)
            if a.kind == "out":
                values[a.name], marks[a.name] = output_array(shape, dtype, a.value)
            else:
                values[a.name] = rng.standard_normal(shape).astype(dtype) if floats else \
                    testing.exact_integer_matrix(rng, shape, dtype, a.high) / 4
    inputs64 = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) else v)
                for k, v in values.items()}
    return values, inputs64, marks, passes


def _message(exc):
    """A failed launch's report, without the runtime's generic first line when a report follows
    it, and without the worker's restart (no news to a grader)."""
    lines = [ln for ln in str(exc).splitlines()
             if ln != "(the worker is started again for the next call)"]
    lines = [ln.replace("Pass timeout=None for no limit, or a larger timeout=.",
                        "The grader's limit per case is timeout= (--timeout).")
             for ln in lines]
    if getattr(exc, "kind", None) == KernelError.CUDA_ERROR and len(lines) > 1:
        lines = lines[1:]
    return f"{type(exc).__name__}: " + "\n".join(lines)


def _launch_all(kern, values, mapping, passes, backend, mode, limit):
    """Launch every pass in order on the same arrays; the kernel time, summed."""
    ms = 0.0
    for grid, block, shared, scalars in passes:
        res = kern(grid, block, *mapping.arguments(values, scalars), shared_bytes=shared,
                   backend=backend, check=mode == "check", warmup=0, repeat=1, timeout=limit)
        ms += float(res.timing.kernel_ms)
    return ms


def _run_case(assignment, case, kern, mapping, launch, backend, mode, limit, rng):
    """(row, failure): failure is the KernelError's kind when a launch failed with one."""
    sizes = assignment.sizes_of(case)
    try:
        values, inputs64, marks, passes = _inputs(assignment, sizes, mapping, launch, rng,
                                                  bool(case.get("floats")))
    except (ValueError, TypeError, MemoryError) as exc:
        return _row(assignment, case, mode, False, 0, np.nan, np.nan, np.nan,
                    f"launch configuration: {exc}"), None
    pristine = {k: v.copy() for k, v in values.items() if isinstance(v, np.ndarray)} \
        if mode == "check" else {}
    feedback = []
    try:
        ms = _launch_all(kern, values, mapping, passes, backend, mode, limit)
    except (KernelError, ValueError, TypeError, MemoryError, RuntimeError) as exc:
        if not (mode == "check" and getattr(exc, "kind", None) == KernelError.CUDA_ERROR):
            return (_row(assignment, case, mode, False, 0, np.nan, np.nan, np.nan,
                         _message(exc)), getattr(exc, "kind", None))
        # check mode's findings come from the kernel's own process, whose check state the
        # kernel can overwrite: feedback, never a mark; a plain run on the same inputs decides
        # (the row keeps its mode: the case ran in check mode, and says what it found)
        feedback.append(f"check mode (feedback, not scored): {_message(exc)}")
        values.update({k: v.copy() for k, v in pristine.items()})
        try:
            ms = _launch_all(kern, values, mapping, passes, backend, "plain", limit)
        except (KernelError, ValueError, TypeError, MemoryError, RuntimeError) as again:
            # counted as the check-mode failure it follows (a crash here is the access check
            # mode named), but a timeout as a timeout
            kind = getattr(again, "kind", None)
            return (_row(assignment, case, mode, False, 0, np.nan, np.nan, np.nan,
                         "; ".join(feedback + [_message(again)])),
                    kind if kind == KernelError.TIMEOUT else exc.kind)
    expected = assignment.reference(**inputs64)
    outputs = assignment.outputs
    if not isinstance(expected, dict):
        expected = {outputs[0].name: expected}
    passed, max_error, max_tol, messages = True, 0.0, 0.0, []
    sum_of = next((inputs64[a.name] for a in assignment.args if a.kind in ("in", "inout")),
                  None)
    # the inputs as the kernel received them, in their own dtypes (an 'inout' array has changed)
    as_given = {k: v.astype(values[k].dtype) if isinstance(v, np.ndarray) else v
                for k, v in inputs64.items()}
    for a in outputs:
        if a.name not in expected:
            continue
        got = values[a.name]
        if a.name in assignment.combine:
            got = assignment.combine[a.name](got)
        dtype = values[a.name].dtype
        tol = tolerance(assignment, expected[a.name], inputs64, dtype)
        explain = None if assignment.explain is None else \
            functools.partial(assignment.explain, a.name, got, as_given, len(passes))
        ok, err, t, msg = compare(a.name, got, expected[a.name], tol, marks.get(a.name),
                                  sum_of if assignment.tolerance == "sum" else None, explain)
        passed &= ok
        max_error, max_tol = max(max_error, err), max(max_tol, t)
        if msg:
            messages.append(msg)
    points = float(case.get("points", 1.0))
    return _row(assignment, case, mode, passed, points, max_error, max_tol, ms,
                "; ".join(feedback + messages)), None


def _speed(assignment, kern, mapping, launch, backend, seed):
    speed = assignment.speed
    try:
        values, inputs64, _, passes = _inputs(assignment, dict(speed.case), mapping, launch,
                                              np.random.default_rng([seed, 10**6]))
        if len(passes) != 1:
            raise ValueError(f"the speed part times one launch; the launch gives {len(passes)}")
        [(grid, block, shared, scalars)] = passes
        args = mapping.arguments(values, scalars)

        def run():
            return kern(grid, block, *args, shared_bytes=shared, backend=backend, warmup=0,
                        repeat=1)
        ins = {a.name: values[a.name] for a in assignment.args if a.kind != "out"}
        return grade_speed(speed, run, ins, backend)
    except (KernelError, ValueError, TypeError, MemoryError, RuntimeError) as exc:
        return {"graded": True, "note": f"the timed run failed: {_message(exc)}",
                "submission_ms": float("nan"), "reference_ms": float("nan"),
                "ratio": float("nan"), "reference": speed.label or "reference",
                "case": dict(speed.case), "points": speed.points, "score": 0.0}
