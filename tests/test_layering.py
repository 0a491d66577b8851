"""The package's layout holds (issues 33 and 42): no module imports another of tiledmm inside a
function (an import hidden there is how a cycle gets papered over), no module imports one from a
floor above its own, no module reaches for another module's private names, and the C and C++
sources include one another without a cycle. Walks the sources; nothing is imported or run.

Floors, lowest first (the rooms of tiledmm/; docs/layout.md):
    core        errors, _settings, _toolkit, _backend, _device, _device_array, _registry,
                _row_tables, _emu_build
    profiling   tiledmm/profiling/: counters, time model, device presets, occupancy arithmetic,
                ncu (its child, ncu_child, runs _core and sits with the user code)
    _core       the registry's kernels, timed; _families, the family table over _core
    confine     tiledmm/confine/: the sandbox, the worker's client and its protocol
    toolchain   tiledmm/toolchain/: parsing, the kernel cache, the compilers, check mode's
                rewrite, the barrier transform (split/)
    user code   tiledmm/user_kernels/ (tm.compile), tiledmm/programs/ (tm.run), magics
    public      model, occupancy, profile, bench, sweep, plot, testing
    grading     tiledmm/grading/ (tm.grade and the checkers tm.grade_matmul / grade_reduce)
    top         tiledmm itself, __main__, notebook (the notebooks' set-up, over all of tiledmm)
Optional third-party imports (matplotlib, pandas, IPython, tqdm) may stay inside functions.
"""
import ast
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "tiledmm")

CORE = {"tiledmm.errors", "tiledmm._backend", "tiledmm._device", "tiledmm._device_array",
        "tiledmm._registry", "tiledmm._row_tables", "tiledmm._emu_build", "tiledmm._settings",
        "tiledmm._toolkit"}
PUBLIC = {f"tiledmm.{m}" for m in ("model", "occupancy", "profile", "bench", "sweep", "plot",
                                   "testing")}
USER_CODE = ("tiledmm.user_kernels", "tiledmm.programs", "tiledmm.magics")
# floor of each module; a module may import only modules of its own floor or lower
FLOORS = ("core", "profiling", "_core", "confine", "toolchain", "user code", "public", "grading",
          "top")


def floor_of(module):
    if module in CORE:
        return "core"
    if module == "tiledmm.profiling.ncu_child":   # runs _core under Nsight Compute
        return "user code"
    if module.startswith("tiledmm.profiling"):
        return "profiling"
    if module in ("tiledmm._core", "tiledmm._families"):   # the family table calls _core
        return "_core"
    if module.startswith("tiledmm.confine"):
        return "confine"
    if module.startswith("tiledmm.toolchain"):
        return "toolchain"
    if module.startswith(USER_CODE):
        return "user code"
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


def test_the_counters_floor_is_below_core_and_user_code_below_grading():
    """The two rules issue 33 names, said directly: profiling/ never imports tiledmm._core (but
    its ncu child), the user-code rooms never import tiledmm.grading."""
    for name, package, path in modules():
        with open(path, encoding="utf-8") as f:
            named = {m for _line, _fn, m in imports(f.read(), package)}
        if name.startswith("tiledmm.profiling") and name != "tiledmm.profiling.ncu_child":
            assert "tiledmm._core" not in named, name
        if name.startswith(("tiledmm.confine", "tiledmm.toolchain", *USER_CODE)):
            assert not any(m.startswith("tiledmm.grading") for m in named), name


def private_reaches(source, package):
    """[(line, text)] where a module takes another tiledmm module's private name: `from .x import
    _y`, or `x._y` where x is a tiledmm module it imported (dunders aside)."""
    tree = ast.parse(source)
    aliases = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _absolute(node, package):
            for a in node.names:
                targets = _absolute(ast.ImportFrom(module=node.module, names=[a],
                                                   level=node.level), package)
                if a.name.startswith("_") and not a.name.startswith("__") and \
                        targets[0].rsplit(".", 1)[-1] != a.name:
                    found.append((node.lineno, f"from {'.' * node.level}{node.module or ''} "
                                               f"import {a.name}"))
                elif targets[0].endswith("." + a.name):   # a module
                    aliases[a.asname or a.name] = targets[0]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "tiledmm":
                    aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in aliases and node.attr.startswith("_") and \
                not node.attr.startswith("__"):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def test_the_private_check_can_fail():
    source = ("from . import _core, model\nfrom .model import _gflops, roofline\n"
              "def f():\n    return _core._run(model._bound)\n")
    found = [text for _line, text in private_reaches(source, "tiledmm")]
    assert found == ["from .model import _gflops", "_core._run", "model._bound"]


def test_no_module_takes_another_modules_private_names():
    wrong = []
    for name, package, path in modules():
        with open(path, encoding="utf-8") as f:
            for line, text in private_reaches(f.read(), package):
                wrong.append(f"{os.path.relpath(path, PACKAGE)}:{line}: {text}")
    assert not wrong, ("private names taken across modules (make them public, or move the "
                       "code):\n" + "\n".join(wrong))


C_FOLDERS = ("csrc", "cuda", os.path.join("tiledmm", "native"))
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def c_sources():
    out = []
    for folder in C_FOLDERS:
        for sub, _dirs, files in os.walk(os.path.join(ROOT, folder)):
            out += [os.path.join(sub, f) for f in files
                    if f.endswith((".h", ".c", ".cpp", ".cu", ".cuh"))]
    return sorted(out)


def include_graph():
    """{file: {files it includes with quotes, resolved from its own folder, then the build's
    include folders}}, for tiledmm's own C, C++ and CUDA sources."""
    dirs = [os.path.join(ROOT, d) for d in C_FOLDERS]
    by_path = set(c_sources())
    graph = {}
    for path in by_path:
        with open(path, encoding="utf-8", errors="replace") as f:
            names = _INCLUDE.findall(f.read())
        graph[path] = set()
        for name in names:
            for d in [os.path.dirname(path), *dirs]:
                cand = os.path.normpath(os.path.join(d, name))
                if cand in by_path:
                    graph[path].add(cand)
                    break
    return graph


def cycles(graph):
    """Every include cycle, as a list of files (empty when there is none)."""
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_cycle_check_can_fail():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_c_sources_include_without_cycles():
    found = cycles(include_graph())
    assert not found, "include cycles:\n" + "\n".join(
        " -> ".join(os.path.relpath(p, ROOT) for p in c) for c in found)


def test_the_barrier_transform_is_the_files_it_lists():
    """setup.py loads the transform by path (tiledmm/ without its __init__) and rebuilds, and the
    kernel cache rekeys, when one of toolchain/split's FILES changes: loading it imports exactly
    those files, nothing compiled."""
    code = ("import importlib, json, os, sys, types\n"
            f"package = {PACKAGE!r}\n"
            "stub = types.ModuleType('_tm_build'); stub.__path__ = [package]\n"
            "sys.modules['_tm_build'] = stub\n"
            "importlib.import_module('_tm_build.toolchain.split.transform')\n"
            "files = sorted(os.path.relpath(m.__file__, package).replace(os.sep, '/')\n"
            "               for n, m in list(sys.modules.items()) if n.startswith('_tm_build.'))\n"
            "split = sys.modules['_tm_build.toolchain.split']\n"
            "print(json.dumps([files, sorted(split.FILES)]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    loaded, listed = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == listed


def test_no_room_holds_more_than_30_percent_of_the_package():
    """Rooms by job (issue 42): no top-level folder of tiledmm/ (with its subfolders), nor the
    top-level modules together, holds more than 30% of the package's Python lines."""
    rooms, total = {}, 0
    for _name, _package, path in modules():
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        parts = os.path.relpath(path, PACKAGE).split(os.sep)
        room = parts[0] if len(parts) > 1 else "top-level modules"
        rooms[room] = rooms.get(room, 0) + lines
        total += lines
    over = {room: f"{100 * n / total:.1f}%" for room, n in rooms.items() if n > 0.3 * total}
    assert not over, f"rooms over 30% of tiledmm's Python lines: {over}"
