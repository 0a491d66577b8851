"""An assignment by name (the built-in ones, tiledmm/grading/builtin.py) or the `ASSIGNMENT` an
instructor's Python file defines. A module of its own: it sits above both assignment.py and
builtin.py (the built-ins are Assignments)."""
import os
import runpy

from .assignment import Assignment
from .builtin import BUILTIN

__all__ = ["load_assignment"]


def load_assignment(name_or_path):
    """A built-in assignment by name, or the `ASSIGNMENT` an instructor's Python file defines."""
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]()
    if isinstance(name_or_path, Assignment):
        return name_or_path
    if not os.path.isfile(str(name_or_path)):
        raise ValueError(f"unknown assignment {name_or_path!r}: the built-in ones are "
                         f"{', '.join(BUILTIN)}; otherwise give the path of a Python file "
                         "defining ASSIGNMENT = tiledmm.grading.Assignment(...)")
    namespace = runpy.run_path(str(name_or_path))
    assignment = namespace.get("ASSIGNMENT")
    if not isinstance(assignment, Assignment):
        raise ValueError(f"{name_or_path}: defines no ASSIGNMENT = tiledmm.grading.Assignment(...)")
    return assignment
