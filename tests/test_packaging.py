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


def package_files():
    """The files of tiledmm/ an installed copy must hold, relative to the repository root:
    every module of every (sub)package and every header under tiledmm/include."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(PACKAGE):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            if f.endswith(".py") or (f.endswith(".h") and "include" in dirpath):
                out.add(os.path.relpath(os.path.join(dirpath, f), ROOT))
    return out


def shipped_runtime_sources():
    """What setup.py's build_py copies into tiledmm/include for tm.compile and profile mode."""
    return ({"tiledmm/include/common.h", "tiledmm/include/registry.h"}
            | {f"tiledmm/include/emu/{os.path.basename(f)}"
               for f in glob.glob(os.path.join(ROOT, "emu", "*.[hc]*"))}
            | {f"tiledmm/include/emu/profile/{os.path.basename(f)}"   # split_hooks.h too
               for f in glob.glob(os.path.join(ROOT, "emu", "profile", "*.[hc]*"))})


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
              | {os.path.relpath(f, ROOT) for tree in ("csrc", "emu")
                 for f in glob.glob(os.path.join(ROOT, tree, "**", "*.*"), recursive=True)}
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
