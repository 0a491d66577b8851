"""The examples in tiledmm's docstrings run as tests, on the emulator, so they stay true; and
every public name has a docstring (the API reference is generated from them)."""
import doctest
import importlib
import inspect

import numpy as np
import pytest

import tiledmm
from tiledmm import _backend

MODULES = ["tiledmm", "tiledmm._core", "tiledmm._backend", "tiledmm._device",
           "tiledmm._device_array", "tiledmm._registry", "tiledmm.model", "tiledmm.occupancy",
           "tiledmm.sweep", "tiledmm.plot", "tiledmm.testing", "tiledmm.bench"]
PUBLIC_MODULES = ["model", "occupancy", "sweep", "plot", "testing", "bench"]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _doctests():
    finder = doctest.DocTestFinder(exclude_empty=True)
    seen = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for test in finder.find(module, name, globs={}):
            if test.examples and test.name not in seen:
                seen[test.name] = test
    return [seen[k] for k in sorted(seen)]


DOCTESTS = _doctests()


def test_main_functions_have_examples():
    """Each main function's docstring carries an example (and so a doctest)."""
    names = {t.name.split(".")[-1] for t in DOCTESTS}
    for fn in ("matmul", "reduce", "vec_add", "mat_add", "kernels", "device_info",
               "mem_info", "to_device", "set_backend", "sweep", "occupancy", "traffic_bytes",
               "assert_matmul_close", "tile_sizes"):
        assert fn in names, f"{fn} has no docstring example"


@pytest.mark.parametrize("test", DOCTESTS, ids=[t.name for t in DOCTESTS])
def test_docstring_example(test, monkeypatch):
    pytest.importorskip("matplotlib") if ">>> import matplotlib" in test.docstring else None
    # Examples pass backend="emu" where they run kernels; examples that change the default
    # backend must not leak it into other tests.
    monkeypatch.setattr(_backend, "_chosen", _backend._chosen)
    test.globs = {"np": np, "tm": tiledmm, "tiledmm": tiledmm}
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out = []
    runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(out)


def _public_objects():
    for name in tiledmm.__all__:
        obj = getattr(tiledmm, name)
        yield f"tiledmm.{name}", obj
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not (callable(member) or isinstance(member, property)):
                    continue
                yield f"tiledmm.{name}.{attr}", member
    for mod in PUBLIC_MODULES:
        module = importlib.import_module(f"tiledmm.{mod}")
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if callable(obj):
                yield f"tiledmm.{mod}.{name}", obj


@pytest.mark.parametrize("qualname,obj", list(_public_objects()),
                         ids=[q for q, _ in _public_objects()])
def test_public_name_has_docstring(qualname, obj):
    doc = inspect.getdoc(obj.fget if isinstance(obj, property) else obj)
    assert doc and doc.strip(), f"{qualname} has no docstring"
