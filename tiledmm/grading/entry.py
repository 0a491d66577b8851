"""tm.grade and `python -m tiledmm grade`: one entry for both kinds of assignment. A kernel
assignment (grading.assignment.Assignment: a built-in such as matmul, or an instructor's file)
goes to runner.grade; a program assignment (programs.ProgramAssignment: vec_add_program, or an
instructor's file) to programs.grade_program; with by_kernel=True a whole program's kernel is
graded against a kernel assignment, launched as the program's own <<<>>> launches it."""

from ..confine import sandbox
from .assignment import Assignment
from .lookup import load
from .builtin import BUILTIN
from .programs import (PROGRAM_BUILTIN, ProgramAssignment, grade_program,
                       grade_program_kernel)
from .runner import grade as grade_kernel, require_confinement

__all__ = ["grade", "load_any_assignment", "ASSIGNMENT_NAMES"]
ASSIGNMENT_NAMES = (*BUILTIN, *PROGRAM_BUILTIN)


def load_any_assignment(name_or_path):
    """An Assignment or a ProgramAssignment: a built-in name, the object, or an instructor's
    Python file defining ASSIGNMENT (run once)."""
    return load(name_or_path, (Assignment, ProgramAssignment), {**BUILTIN, **PROGRAM_BUILTIN})


def grade(submission, assignment, *, backend=None, seed=None, kernel=None, timeout=None,
          check=True, compile_timeout=None, speed=True, allow_unconfined=False, by_kernel=False):
    """Grade a submission (a .cu path or its source text) against an assignment: a kernel
    assignment (built-ins matmul, matmul_square, reduce, vec_add, mat_add), a program assignment
    (vec_add_program: the whole program, graded by its output for secret inputs), or an
    instructor's file defining either. by_kernel: the submission is a whole program whose
    kernel is graded against a kernel assignment, launched with the program's own <<<>>>
    configuration. Returns a GradeReport. The sandbox rule is the same for both: where it is
    unavailable, UnconfinedError unless allow_unconfined (the report then says so)."""
    assignment = load_any_assignment(assignment)
    kernel_kw = dict(backend=backend, seed=seed, kernel=kernel, timeout=timeout, check=check,
                     speed=speed, allow_unconfined=allow_unconfined,
                     **({} if compile_timeout is None else {"compile_timeout": compile_timeout}))
    if isinstance(assignment, Assignment):
        if by_kernel:
            return grade_program_kernel(submission, assignment, **kernel_kw)
        return grade_kernel(submission, assignment, **kernel_kw)
    if by_kernel:
        raise ValueError(f"by_kernel grades a program's kernel against a kernel assignment; "
                         f"{assignment.name!r} is a program assignment (graded by its output)")
    require_confinement(allow_unconfined)
    report = grade_program(submission, assignment, backend=backend, seed=seed, timeout=timeout,
                           check=check)
    report.confinement = sandbox.describe()
    return report
