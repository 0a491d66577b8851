"""The package's layout holds (issue 33): no module imports another of tiledmm inside a function
(an import hidden there is how a cycle gets papered over), and no module imports one from a
floor above its own. Walks the source with `ast`; nothing is imported or run.

Floors, lowest first (DESIGN.md, "Layout"):
    core        _backend, _device, _device_array, _registry, _row_tables, _emu_build
    profiling   tiledmm/profiling/: counters, time model, device presets, occupancy arithmetic,
                ncu (its child, ncu_child, runs _core and is the one exception)
    _core       the registry's kernels, timed; profile=True through profiling.counters;
                _families, the family table (inputs, call) over _core
    student     tiledmm/student/: tm.compile, tm.run, the worker, the sandbox, the magics
    public      model, occupancy, profile, bench, sweep, plot, testing
    grading     tiledmm/grading/ (tm.grade and the checkers tm.grade_matmul / grade_reduce)
Optional third-party imports (matplotlib, pandas, IPython, tqdm) may stay inside functions.
"""
import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tiledmm")

CORE = {"tiledmm._backend", "tiledmm._device", "tiledmm._device_array", "tiledmm._registry",
        "tiledmm._row_tables", "tiledmm._emu_build"}
PUBLIC = {f"tiledmm.{m}" for m in ("model", "occupancy", "profile", "bench", "sweep", "plot",
                                   "testing")}
# floor of each module; a module may import only modules of its own floor or lower
FLOORS = ("core", "profiling", "_core", "student", "public", "grading", "top")


def floor_of(module):
    if module in CORE:
        return "core"
    if module == "tiledmm.profiling.ncu_child":   # runs _core under Nsight Compute
        return "student"
    if module.startswith("tiledmm.profiling"):
        return "profiling"
    if module in ("tiledmm._core", "tiledmm._families"):   # the family table calls _core
        return "_core"
    if module.startswith("tiledmm.student"):
        return "student"
    if module in PUBLIC:
        return "public"
    if module.startswith("tiledmm.grading"):
        return "grading"
    return "top"   # tiledmm itself, __main__


def modules():
    """(dotted name, package the module's relative imports start from, path) of every module."""
    out = []
    for folder, _dirs, files in os.walk(PACKAGE):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(folder, f)
            rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
                package = ".".join(rel)
            else:
                package = ".".join(rel[:-1])
            out.append((".".join(rel), package, path))
    return sorted(out)


def _absolute(node, package):
    """The tiledmm modules an import statement names (a `from X import y` names X.y where y
    is a submodule, else X)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "tiledmm"]
    if node.level:
        base = package.split(".")
        base = base[:len(base) - node.level + 1]
        base = ".".join(base + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base.split(".")[0] != "tiledmm":
        return []
    names = []
    for a in node.names:
        sub = base + "." + a.name
        rel = sub.split(".")[1:]
        is_module = (os.path.isfile(os.path.join(PACKAGE, *rel) + ".py")
                     or os.path.isdir(os.path.join(PACKAGE, *rel)))
        names.append(sub if is_module else base)
    return names


def imports(source, package):
    """[(line, function name or None, imported tiledmm module)] of a module's source."""
    found = []

    def walk(node, function):
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = getattr(child, "name", "<lambda>")
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((child.lineno, function, m) for m in _absolute(child, package))
            walk(child, inner)

    walk(ast.parse(source), None)
    return found


def test_the_walk_finds_an_import_inside_a_function():
    """The check itself can fail: an intra-package import inside a function is found, at any
    depth, relative or absolute; one at module level or of another package is not."""
    source = ("import numpy as np\nfrom . import _core\n"
              "def f():\n    import matplotlib\n"
              "    if True:\n        from .profiling import counters\n"
              "class C:\n    def g(self):\n        import tiledmm.model\n")
    found = [(line, fn, m) for line, fn, m in imports(source, "tiledmm") if fn]
    assert found == [(6, "f", "tiledmm.profiling.counters"), (9, "g", "tiledmm.model")]


@pytest.mark.parametrize("name, package, path", modules(), ids=lambda v: str(v))
def test_no_intra_package_import_inside_a_function(name, package, path):
    with open(path, encoding="utf-8") as f:
        hidden = [(line, fn, m) for line, fn, m in imports(f.read(), package) if fn]
    assert not hidden, (f"{name} imports tiledmm modules inside functions (move them to module "
                        f"level; a cycle means the floors are wrong): {hidden}")


def test_no_module_imports_a_floor_above_its_own():
    wrong = []
    for name, package, path in modules():
        with open(path, encoding="utf-8") as f:
            for line, _fn, imported in imports(f.read(), package):
                if FLOORS.index(floor_of(imported)) > FLOORS.index(floor_of(name)):
                    wrong.append(f"{os.path.relpath(path, PACKAGE)}:{line} ({floor_of(name)}) "
                                 f"imports {imported} ({floor_of(imported)})")
    assert not wrong, "imports from a floor above:\n" + "\n".join(wrong)


def test_the_counters_floor_is_below_core_and_student_below_grading():
    """The two rules issue 33 names, said directly: profiling/ never imports tiledmm._core (but
    its ncu child), student/ never imports tiledmm.grading."""
    for name, package, path in modules():
        with open(path, encoding="utf-8") as f:
            named = {m for _line, _fn, m in imports(f.read(), package)}
        if name.startswith("tiledmm.profiling") and name != "tiledmm.profiling.ncu_child":
            assert "tiledmm._core" not in named, name
        if name.startswith("tiledmm.student"):
            assert not any(m.startswith("tiledmm.grading") for m in named), name
