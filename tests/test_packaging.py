"""What an installed copy gets (issue 28): every package under tiledmm/ and every file it reads
at run time, in the wheel; everything setup.py compiles, in the sdist; no tests in either.

The build_py and sdist checks run everywhere (no compiler needed, a few seconds). The check of a
real wheel runs where $TILEDMM_BUILT_WHEEL names one (.ci/installed builds it with
`python -m build`, from the sdist)."""
import glob
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "tiledmm")
SETUP_SECONDS = 300


NATIVE = os.path.join(PACKAGE, "native")
# What tiledmm/native may hold: the suffixes pyproject.toml's package-data ships
# (test_native_holds_only_what_ships keeps a new kind of file from being left out silently).
NATIVE_SUFFIXES = (".h", ".cpp")
# ...and the folder shipped whole: libcu++'s stand-ins, named without a suffix (<cuda/pipeline>)
NATIVE_WHOLE = os.path.join(NATIVE, "user", "cuda")


def ships(dirpath, f):
    return f.endswith(NATIVE_SUFFIXES) or dirpath == NATIVE_WHOLE


def package_files():
    """The files of tiledmm/ an installed copy must hold, relative to the repository root:
    every module of every (sub)package and every file under tiledmm/native (the headers, the
    emulator runtime's sources, the stand-ins), as they lie in the source tree."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(PACKAGE):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            native = os.path.commonpath([NATIVE, dirpath]) == NATIVE
            if f.endswith(".py") or (native and ships(dirpath, f)):
                out.add(os.path.relpath(os.path.join(dirpath, f), ROOT))
    return out


def shipped_runtime_sources():
    """What tm.compile, profile mode and tm.run read at run time, named one by one (so that a
    change of package_files' walk cannot drop them unseen)."""
    return {f"tiledmm/native/{f}" for f in (
        "common.h", "registry.h", "kernel_dialect.h", "tiledmm_kernel.h", "tiledmm_check.h",
        "tiledmm_fault.h", "tiledmm_program_cuda.h", "tiledmm_program_report.h",
        "emu/cuda_emu.h", "emu/runtime_api.h", "emu/program_runtime.h", "emu/runtime.cpp",
        "emu/scheduler.cpp", "emu/fiber_switch.h", "emu/profile/emu_profile.cpp",
        "emu/profile/split_hooks.h", "user/cuda_runtime.h", "user/cooperative_groups.h",
        "user/cooperative_groups/reduce.h", "user/cuda/pipeline", "user/cuda/barrier")}


def test_native_holds_only_what_ships():
    """Every file of tiledmm/native is package data (its suffix is one pyproject.toml ships), and
    the source tree is the installed layout: no build step copies headers (no build_py)."""
    stray = [os.path.relpath(os.path.join(d, f), ROOT) for d, _, files in os.walk(NATIVE)
             for f in files if not ships(d, f)]
    assert not stray, f"tiledmm/native holds files the wheel does not ship: {stray}"
    assert shipped_runtime_sources() <= package_files()
    with open(os.path.join(ROOT, "setup.py")) as f:
        assert "setuptools.command.build_py" not in f.read()


def setup_py(*args, cwd):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "setup.py"), *args], cwd=cwd,
                       capture_output=True, text=True, timeout=SETUP_SECONDS)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_every_subpackage_is_found_not_listed():
    subpackages = {os.path.relpath(os.path.dirname(d), ROOT).replace(os.sep, ".")
                   for d in glob.glob(os.path.join(PACKAGE, "**", "__init__.py"), recursive=True)}
    assert "tiledmm.grading" in subpackages, subpackages
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    assert "[tool.setuptools.packages.find]" in text and 'packages = ["tiledmm"]' not in text


def test_build_py_ships_every_package_and_runtime_file(tmp_path):
    setup_py("build_py", "--build-lib", str(tmp_path), cwd=ROOT)
    built = {os.path.relpath(os.path.join(d, f), tmp_path)
             for d, _, files in os.walk(tmp_path) for f in files}
    missing = (package_files() | shipped_runtime_sources()) - built
    assert not missing, f"build_py leaves out {sorted(missing)}"
    assert not [f for f in built if f.startswith("tests")]


def test_sdist_holds_what_setup_py_compiles_and_no_tests(tmp_path):
    setup_py("sdist", "--dist-dir", str(tmp_path), cwd=ROOT)
    (sdist,) = glob.glob(str(tmp_path / "*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    needed = ({"setup.py", "pyproject.toml", "README.md", "MANIFEST.in"}
              | {os.path.relpath(f, ROOT) for f in glob.glob(os.path.join(ROOT, "cuda", "*"))}
              | {os.path.relpath(f, ROOT)
                 for f in glob.glob(os.path.join(ROOT, "csrc", "**", "*.*"), recursive=True)}
              | package_files())
    missing = needed - names
    assert not missing, f"the sdist leaves out {sorted(missing)}"
    assert not [n for n in names if n.startswith("tests/")]


@pytest.mark.skipif(not os.environ.get("TILEDMM_BUILT_WHEEL"),
                    reason="no built wheel named by $TILEDMM_BUILT_WHEEL (.ci/installed sets it)")
def test_built_wheel_holds_every_package_file_and_extension():
    with zipfile.ZipFile(os.environ["TILEDMM_BUILT_WHEEL"]) as whl:
        names = set(whl.namelist())
    missing = (package_files() | shipped_runtime_sources()) - names
    assert not missing, f"the wheel leaves out {sorted(missing)}"
    extensions = {n.split("/")[1].split(".")[0] for n in names
                  if n.startswith("tiledmm/_") and n.endswith(".so")}
    assert {"_emu", "_emu_profile"} <= extensions, extensions
    assert not [n for n in names if n.startswith("tests/")]
