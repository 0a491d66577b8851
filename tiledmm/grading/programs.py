"""Grading whole programs (issue 32): an assignment whose submission is a CUDA program with its
own main, graded by its output.

    from tiledmm.grading.programs import grade_program
    report = grade_program("vecadd.cu", "vec_add_program")   # emu: small cases in check mode
    report.score, report.max_score; report.write_gradescope("results.json")

Each case gives the program its input (arguments and stdin, from the case's sizes and the
grading seed, so that a memorised answer fails), runs it with tm.run under a time limit, and
compares what it printed with the expected output (numbers with a tolerance, or exact lines).
On emu the cases not marked 'big' run in check mode: its findings are shown with the case as
feedback and never change a mark (issue 45: they come from the program's own process, which
can cut them short; `host_mistakes=` only says which kinds the assignment allows). A program that does not compile scores zero for every case; one that crashes, exits
non-zero or runs past its time limit scores zero for that case, and the grader goes on.
The result is the same GradeReport as tm.grade's (table, HTML, JSON, JUnit, Gradescope).
"""
import os
import re
import secrets

import numpy as np

from .. import _backend
from ..errors import CompileError
from ..toolchain.source import blank_source, split_top_level
from ..confine.sandbox import read_bounded
from ..programs.run import run as run_program
from .assignment import CaseSizes
from .lookup import load
from .report import GradeReport
from .launch_spec import EXPR_MOST
from .runner import grade as grade_kernel

__all__ = ["ProgramAssignment", "grade_program", "grade_program_kernel", "load_program_assignment",
           "program_kernel_source", "vec_add_program", "PROGRAM_BUILTIN"]

PROBLEM_KINDS = ("kernel", "initcheck", "api_error", "unchecked", "leak", "sanitizer")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", re.I)


class ProgramAssignment(CaseSizes):
    """An assignment graded by a whole program's output.

    name, description: shown in the report.
    cases: [{size name: value, ...}, ...]; a case may also give 'name', 'points' (default 1),
    'big': True (plain mode even on emu) and 'timeout' (seconds).
    program_input: ``callable(case sizes, seed)`` -> (argv list, stdin text): what the program
    is given; the seed makes every grading's inputs new.
    expected: ``callable(case sizes, seed)`` -> the expected output: a sequence of numbers
    (compared with `rtol`/`atol` against every number the program printed, in order) or a str
    (compared line by line, trailing spaces ignored).
    host_mistakes: {check-mode kind: "fail" or "pass"}: how each kind of check-mode finding
    is shown (kinds: kernel, initcheck, api_error, unchecked, leak); findings are feedback,
    never a mark (the program's own process reports them). timeout: seconds per case (default 20)."""

    def __init__(self, name, cases, program_input, expected, *, description="", rtol=1e-5,
                 atol=1e-6, host_mistakes=None, timeout=20.0):
        self.name, self.description = name, description
        self.cases = [dict(c) for c in cases]
        self.program_input, self.expected = program_input, expected
        self.rtol, self.atol, self.timeout = float(rtol), float(atol), float(timeout)
        self.host_mistakes = {k: "fail" for k in PROBLEM_KINDS}
        for kind, verdict in (host_mistakes or {}).items():
            if kind not in PROBLEM_KINDS or verdict not in ("fail", "pass"):
                raise ValueError(f"assignment {name!r}: host_mistakes takes {{kind: 'fail' or "
                                 f"'pass'}} with kind one of {', '.join(PROBLEM_KINDS)}; got "
                                 f"{kind!r}: {verdict!r}")
            self.host_mistakes[kind] = verdict

    def __repr__(self):
        return f"<tiledmm ProgramAssignment {self.name}: {len(self.cases)} cases>"


# ---- the built-in vec_add_program: lecture 000's vecAdd as a program ----------------------------

def _vec_add_inputs(n, seed):
    """The A and B the program must make from n and the seed (the assignment's description)."""
    i = np.arange(n, dtype=np.int64)
    s = seed % 1000
    return ((i + s) % 1000) / 4.0, ((3 * i + 7 * s) % 1000) / 2.0


def _vec_add_expected(sizes, seed):
    a, b = _vec_add_inputs(sizes["n"], seed)
    return a + b


def vec_add_program():
    """Lecture 000's vecAdd as a program: it reads n and the seed from stdin, fills
    A[i] = ((i + seed % 1000) % 1000) / 4 and B[i] = ((3 i + 7 (seed % 1000)) % 1000) / 2 on the
    host, adds them on the device and prints C[0] ... C[n-1], one per line."""
    return ProgramAssignment(
        "vec_add_program", description=vec_add_program.__doc__.split(": ", 1)[1],
        cases=[{"n": 1}, {"n": 1000}, {"n": 4097}, {"n": 100_000, "big": True}],
        program_input=lambda sizes, seed: ([], f"{sizes['n']} {seed}\n"),
        expected=_vec_add_expected)


PROGRAM_BUILTIN = {"vec_add_program": vec_add_program}


def load_program_assignment(name_or_path):
    """A built-in program assignment by name, a ProgramAssignment, or the `ASSIGNMENT` an
    instructor's Python file defines (a ProgramAssignment)."""
    return load(name_or_path, (ProgramAssignment,), PROGRAM_BUILTIN)


# ---- grading -------------------------------------------------------------------------------------

def _compare(expected, stdout, rtol, atol):
    """(passed, max error, tolerance, message) of the program's output against `expected`."""
    if isinstance(expected, str):
        want = [ln.rstrip() for ln in expected.rstrip("\n").splitlines()]
        got = [ln.rstrip() for ln in stdout.rstrip("\n").splitlines()]
        for k, (w, g) in enumerate(zip(want, got)):
            if w != g:
                return False, np.nan, 0.0, f"line {k + 1} is {g!r}; expected {w!r}"
        if len(want) != len(got):
            return False, np.nan, 0.0, f"printed {len(got)} lines; expected {len(want)}"
        return True, 0.0, 0.0, ""
    want = np.asarray(expected, dtype=np.float64).ravel()
    try:
        got = np.array([float(t) for t in _NUMBER.findall(stdout)], dtype=np.float64)
    except ValueError:
        got = np.array([], dtype=np.float64)
    tol = atol + rtol * np.abs(want)
    if got.size != want.size:
        return False, np.nan, float(tol.max(initial=0.0)), \
            f"printed {got.size} numbers; expected {want.size}"
    err = np.abs(got - want)
    bad = ~(err <= tol)
    if bad.any():
        k = int(np.argmax(bad))
        return False, float(np.nanmax(err)) if np.isfinite(err).any() else np.inf, \
            float(tol.max()), f"number {k + 1} is {got[k]:.9g}; expected {want[k]:.9g} " \
            f"({int(bad.sum())} of {want.size} wrong)"
    return True, float(err.max(initial=0.0)), float(tol.max(initial=0.0)), ""


def _row(assignment, case, mode, passed, max_error, tol, ms, message):
    points = float(case.get("points", 1.0))
    return {"name": assignment.label(case), "sizes": assignment.sizes_of(case), "mode": mode,
            "passed": bool(passed), "score": points if passed else 0.0, "points": points,
            "max_error": float(max_error), "tolerance": float(tol), "ms": float(ms),
            "message": message}


def _grade_case(assignment, submission, case, seed, backend, check, timeout):
    sizes = assignment.sizes_of(case)
    mode = "check" if check else "plain"
    args, stdin = assignment.program_input(sizes, seed)
    limit = float(case.get("timeout", timeout or assignment.timeout))
    # an empty working folder: a submission's folder may be the grader's own (its hidden tests,
    # its notes), and a graded program reads only its stdin and arguments
    r = run_program(submission, args=[str(a) for a in args], stdin=stdin, backend=backend,
                    check=check, timeout=limit, link_folder=False)
    ms = sum(ln.ms or 0.0 for ln in r.launches)
    tail = "\n".join(r.stderr.strip().splitlines()[-6:])
    if r.timed_out:
        return _row(assignment, case, mode, False, np.nan, np.nan, ms,
                    f"the program ran past its time limit of {limit:g} s and was stopped")
    if r.returncode != 0:
        return _row(assignment, case, mode, False, np.nan, np.nan, ms,
                    f"the program exited with code {r.returncode}" + (f"\n{tail}" if tail else ""))
    # check mode's findings come from the program's own process (its report file, its atexit
    # leak check), which the program can write or cut short: they are feedback, never a mark
    # (deleting them must not raise a score, so having them cannot lower one)
    passed, err, tol, why = _compare(assignment.expected(sizes, seed), r.stdout, assignment.rtol,
                                     assignment.atol)
    found = r.problems[:50]
    note = "\n".join(
        f"check mode (feedback, not scored{'' if assignment.host_mistakes.get(p['kind'], 'fail') == 'fail' else '; allowed by the assignment'}): "
        f"{p['file']}:{p['line']}: {p['message']}" if p.get("file") else
        f"check mode (feedback, not scored): {p['message']}" for p in found)
    message = "\n".join(m for m in (why, note) if m)
    return _row(assignment, case, mode, passed, err, tol, ms, message)


def grade_program(submission, assignment, *, backend=None, seed=None, timeout=None, check=True):
    """Grade a whole CUDA program (a .cu path or its source text) against a ProgramAssignment
    (a built-in name: vec_add_program; an instructor's file; or the object). Returns a
    GradeReport. backend: 'emu' or 'cuda' (default as tm.run). seed: the inputs' seed (default:
    a secret random one). timeout: seconds per case (default: the assignment's). check: the
    small cases in check mode on emu."""
    assignment = load_program_assignment(assignment)
    backend = _backend.resolve(backend)[1]
    seed_secret = seed is None
    seed = secrets.randbits(31) if seed_secret else int(seed)
    shown = os.fspath(submission) if isinstance(submission, os.PathLike) or (
        isinstance(submission, str) and "\n" not in submission) else "<source>"
    report = GradeReport(shown, assignment.name, backend, seed, seed_secret)
    report.kernel = "main"
    for case in assignment.cases:
        use_check = check and backend == "emu" and not case.get("big")
        try:
            row = _grade_case(assignment, submission, case, seed, backend, use_check, timeout)
        except CompileError as exc:
            report.compile_error = str(exc.log or exc)[-4000:]
            break
        except (OSError, RuntimeError, ValueError) as exc:
            row = _row(assignment, case, "check" if use_check else "plain", False, np.nan,
                       np.nan, np.nan, f"the program could not be run: {exc}")
        report.cases.append(row)
    if report.compile_error is not None:
        report.cases = [_row(assignment, c, "-", False, np.nan, np.nan, np.nan,
                             "not run: the program did not compile") for c in assignment.cases]
    report.speed = {"graded": False, "note": "programs are graded by their output"}
    return report


# ---- grading the program's kernel, launched as its own <<<>>> launches it ------------------------

_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;]*>)?\s*<<<(.*?)>>>\s*\(([^;]*)\)\s*;", re.S)
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def _split_top(text):
    """text split at its commas outside brackets, each part stripped, empty parts dropped."""
    return [p for p in split_top_level(text) if p]


def _kernel_params(blank, kernel):
    """The parameter names of `__global__ ... kernel(...)`, in order."""
    m = re.search(r"__global__[^;{]*?\b" + re.escape(kernel) + r"\s*\(([^)]*)\)", blank)
    if not m:
        return []
    return [(_IDENT.findall(p.split("=")[0]) or [""])[-1] for p in _split_top(m.group(1))]


def _host_values(blank):
    """Simple host definitions a launch configuration may name: `dim3 g(a, b)`, `dim3 g = dim3(a,
    b)`, `int x = expr;` (const, unsigned, size_t ... too) and `#define X expr`; first one wins."""
    values = {}
    for m in re.finditer(r"\bdim3\s+([A-Za-z_]\w*)\s*(?:\(([^;]*)\)|=\s*dim3\s*\(([^;]*)\))\s*;",
                         blank):
        values.setdefault(m.group(1), "(" + (m.group(2) or m.group(3)) + ")")
    for m in re.finditer(r"\b(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:int|long|size_t|unsigned)\s+"
                         r"([A-Za-z_]\w*)\s*=\s*([^;,{}]+);", blank):
        values.setdefault(m.group(1), "(" + m.group(2).strip() + ")")
    for m in re.finditer(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+(.+)$", blank, re.M):
        values.setdefault(m.group(1), "(" + m.group(2).strip() + ")")
    return values


def _resolve(expr, names, values):
    """expr with host names replaced: a kernel argument by its parameter's name (`names`), a
    simple definition by its value (a few rounds); `sizeof(float)` as 4, integer casts dropped,
    `/` as the integer division it is in C (the grader's `//`)."""
    for _ in range(4):
        expr = _IDENT.sub(lambda m: names.get(m.group(0), values.get(m.group(0), m.group(0))), expr)
        if len(expr) > EXPR_MOST:   # chained #defines grow it each round: stop before they do
            raise ValueError(f"a launch expression expands to more than {EXPR_MOST} characters")
    expr = re.sub(r"sizeof\s*\(\s*(?:float|int|unsigned)\s*\)", "4", expr)
    expr = re.sub(r"sizeof\s*\(\s*double\s*\)", "8", expr)
    expr = re.sub(r"\(\s*(?:int|unsigned|size_t|long)\s*\)", "", expr)
    return re.sub(r"(?<!/)/(?!/)", "//", expr)   # C's integer division


BY_KERNEL_MOST = 64 << 10


def program_kernel_source(source, kernel=None):
    """(the program's device code with its launch of `kernel` declared for tm.grade, the kernel's
    name): every function whose body launches a kernel (main too) removed, and `// tiledmm-grade:`
    lines giving the grid, block and shared bytes of its own `<<<>>>`, written in the kernel's
    parameter names (docs/grading.md, A submission's own launch). Raises ValueError when the
    program launches no such kernel, or is longer than BY_KERNEL_MOST (the grader's own regular
    expressions read it, unconfined: their time is bounded by its length)."""
    if len(source) > BY_KERNEL_MOST:
        raise ValueError(f"the program has {len(source)} characters; --by-kernel reads programs "
                         f"of at most {BY_KERNEL_MOST}")
    blank = blank_source(source)
    launches = [(m.group(1), m.group(2), m.group(3)) for m in _LAUNCH.finditer(blank)]
    if kernel is not None:
        launches = [ln for ln in launches if ln[0] == kernel]
    if not launches:
        raise ValueError("the program launches " + (f"no kernel {kernel!r}" if kernel else
                                                   "no kernel") + " with <<<...>>>")
    name, config, call = launches[0]
    params = _kernel_params(blank, name)
    names = {}
    for arg, param in zip(_split_top(call), params):
        if re.fullmatch(r"[A-Za-z_]\w*", arg) and param:
            names[arg] = param   # (the same name too: a parameter's name is never resolved)
    values = _host_values(blank)
    parts = [_resolve(p, names, values) for p in _split_top(config)]
    if any(len(p) > EXPR_MOST for p in parts):   # chained #defines: bounded like any launch line
        raise ValueError(f"the launch of {name} expands to more than {EXPR_MOST} characters")
    lines = [f"// tiledmm-grade: kernel {name}", f"// tiledmm-grade: grid {parts[0]}",
             f"// tiledmm-grade: block {parts[1]}"]
    if len(parts) > 2:
        lines.append(f"// tiledmm-grade: shared {parts[2]}")
    # remove main and every function definition whose body holds a launch
    out, cut = source, []
    for m in re.finditer(r"^[^\n;{}#]*\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{", blank, re.M):
        depth, i = 0, m.end() - 1
        while i < len(blank):
            depth += {"{": 1, "}": -1}.get(blank[i], 0)
            if depth == 0:
                break
            i += 1
        body = blank[m.start():i + 1]
        if ("<<<" in body or m.group(1) == "main") and "__global__" not in blank[m.start():m.end()]:
            cut.append((m.start(), i + 1))
    for start, end in reversed(cut):
        out = out[:start] + "\n" * source.count("\n", start, end) + out[end:]
    return out + "\n" + "\n".join(lines) + "\n", name


def grade_program_kernel(submission, assignment, *, kernel=None, **grade_kw):
    """Grade the kernel a whole program holds against a kernel assignment (as tm.grade does),
    launched with the program's own `<<<>>>` configuration (its names mapped to the kernel's
    parameters and to the program's simple definitions). Returns tm.grade's GradeReport."""
    if isinstance(submission, os.PathLike) or (isinstance(submission, str) and
                                               "\n" not in submission):
        source = read_bounded(os.fspath(submission), 4 << 20, whole=True).decode(
            "utf-8", errors="replace")
    else:
        source = submission
    text, name = program_kernel_source(source, kernel)
    return grade_kernel(text, assignment, kernel=name, **grade_kw)
