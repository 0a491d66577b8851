"""Grading course assignments: `tm.grade(submission, assignment)` and
`python -m tiledmm grade SUBMISSION.cu --assignment NAME` (docs/grading.md).

Modules, one job each: assignment (the Assignment / Arg / Speed format and loading an
instructor's file), builtin (matmul, matmul_square, reduce, vec_add, mat_add), launch_spec (the
launch a submission may declare, safe size expressions; LaunchFunction, a launch written as a
Python function), matching (parameters to arguments: by name, arrays by position and numbers by
name, or by position), compile_limits (the compile step in a limited child process), compare
(outputs against the reference), speed (the cuda speed part), runner (grading a kernel; its
run_cases also runs tm.grade_matmul / tm.grade_reduce, tiledmm/grading/checkers.py), programs
(grading a whole program by its output, or its kernel), entry (tm.grade: either kind), report
(the table and HTML), outputs (JSON, JUnit XML, Gradescope), cli (the `grade` subcommand).
"""
from .assignment import Arg, Assignment, Speed
from .lookup import load_assignment
from .builtin import BUILTIN
from .entry import grade
from .launch_spec import LaunchSpec
from .programs import PROGRAM_BUILTIN, ProgramAssignment, grade_program, grade_program_kernel
from .report import GradeReport

__all__ = ["grade", "GradeReport", "Assignment", "Arg", "Speed", "LaunchSpec",
           "load_assignment", "BUILTIN", "ProgramAssignment", "PROGRAM_BUILTIN",
           "grade_program", "grade_program_kernel"]
