"""`python -m tiledmm grade SUBMISSION.cu --assignment NAME ...`: the table on stdout, the
optional files, and the exit code (0: every case passed; 1: a case failed or the submission did
not compile; 2: the command line or the assignment is wrong)."""
import argparse
import contextlib
import os
import sys

from .compile_limits import GRADING_COMPILE_CHILD_SECONDS
from .entry import grade, load_any_assignment
from .runner import UnconfinedError

__all__ = ["add_grade_parser", "cmd_grade"]


def add_grade_parser(sub):
    """Add the `grade` subcommand to __main__'s subparsers."""
    g = sub.add_parser("grade", help="grade a student's kernel file against an assignment",
                       description="Grade SUBMISSION (a CUDA C file) against an assignment: a "
                                   "built-in kernel assignment (matmul, matmul_square, reduce, "
                                   "vec_add, mat_add), a built-in program assignment "
                                   "(vec_add_program: a whole program graded by its output), or "
                                   "an instructor's assignment file (.py). See docs/grading.md.")
    g.add_argument("submission", help="the student's .cu file")
    g.add_argument("--assignment", "-a", required=True,
                   help="matmul, matmul_square, reduce, vec_add, mat_add, vec_add_program, "
                        "or a file.py")
    g.add_argument("--by-kernel", action="store_true",
                   help="SUBMISSION is a whole program: grade its kernel against a kernel "
                        "assignment, launched as the program's own <<<>>> launches it")
    g.add_argument("--backend", choices=["cuda", "emu"], default=argparse.SUPPRESS)
    g.add_argument("--kernel", default=None, help="the __global__ function to grade")
    g.add_argument("--seed", type=int, default=None,
                   help="the inputs' random seed (default: a secret random one)")
    g.add_argument("--timeout", type=float, default=None, help="seconds per case")
    g.add_argument("--compile-timeout", type=float, default=None, help="seconds to compile")
    g.add_argument("--no-check", action="store_true",
                   help="run every case in plain mode (no check mode on emu)")
    g.add_argument("--no-speed", action="store_true", help="skip the speed part (cuda)")
    g.add_argument("--json", default=None, help="write the whole report as JSON")
    g.add_argument("--junit", default=None, help="write JUnit XML, one testcase per case")
    g.add_argument("--gradescope", default=None, help="write Gradescope's results.json")
    g.add_argument("--allow-unconfined", action="store_true",
                   help="grade even where the sandbox (Landlock, seccomp) is unavailable; the "
                        "report then says the submission ran unconfined")
    g.add_argument("-q", "--quiet", action="store_true", help="print only the score line")
    g.set_defaults(fn=cmd_grade)
    return g


@contextlib.contextmanager
def _student_output_to_stderr():
    """While grading, stdout (file descriptor 1 and sys.stdout) is stderr: what a kernel prints
    (forwarded from the worker) never lands on the channel that carries the grader's score
    line (`grade -q`), so it cannot forge one."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_grade(args):
    try:
        assignment = load_any_assignment(args.assignment)
    except (ValueError, OSError, SyntaxError) as exc:
        print(f"python -m tiledmm grade: {exc}", file=sys.stderr)
        return 2
    try:
        with _student_output_to_stderr():
            report = grade(args.submission, assignment, backend=getattr(args, "backend", None),
                           seed=args.seed, kernel=args.kernel, timeout=args.timeout,
                           check=not args.no_check, speed=not args.no_speed,
                           compile_timeout=args.compile_timeout or GRADING_COMPILE_CHILD_SECONDS,
                           allow_unconfined=args.allow_unconfined, by_kernel=args.by_kernel)
    except (UnconfinedError, ValueError) as exc:   # ValueError: --by-kernel with a program one
        print(f"python -m tiledmm grade: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"python -m tiledmm grade: cannot read {args.submission}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    print(report.headline() if args.quiet else report)
    for path, write in ((args.json, report.write_json), (args.junit, report.write_junit),
                        (args.gradescope, report.write_gradescope)):
        if path:
            write(path)
    return 0 if report.passed else 1
