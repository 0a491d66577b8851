"""An assignment by name (the built-in ones, tiledmm/grading/builtin.py) or the `ASSIGNMENT` an
instructor's Python file defines. A module of its own: it sits above both assignment.py and
builtin.py (the built-ins are Assignments)."""
import os
import runpy

from .assignment import Assignment
from .builtin import BUILTIN

__all__ = ["load", "load_assignment"]


def load(name_or_path, kinds, builtins):
    """An assignment of one of the classes `kinds`: the object itself, a built-in by name
    (`builtins`: {name: factory}), or the `ASSIGNMENT` an instructor's Python file defines (the
    file is run once). The one loader: kernel, program and either kind's."""
    if isinstance(name_or_path, kinds):
        return name_or_path
    if isinstance(name_or_path, str) and name_or_path in builtins:
        return builtins[name_or_path]()
    wanted = " or ".join(f"tiledmm.grading.{k.__name__}(...)" for k in kinds)
    if not os.path.isfile(str(name_or_path)):
        raise ValueError(f"unknown assignment {name_or_path!r}: the built-in ones are "
                         f"{', '.join(builtins)}; otherwise give the path of a Python file "
                         f"defining ASSIGNMENT = {wanted}")
    assignment = runpy.run_path(str(name_or_path)).get("ASSIGNMENT")
    if not isinstance(assignment, kinds):
        raise ValueError(f"{name_or_path}: defines no ASSIGNMENT = {wanted}")
    return assignment


def load_assignment(name_or_path):
    """A built-in kernel assignment by name, or the `ASSIGNMENT` (an Assignment) an instructor's
    Python file defines."""
    return load(name_or_path, (Assignment,), BUILTIN)
