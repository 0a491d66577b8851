"""The tree passes its linters: ruff over the Python sources (pyproject.toml's [tool.ruff]) and
clang-format over the C, C++ and CUDA sources (.clang-format), both pinned in the test extra."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_passes():
    pytest.importorskip("ruff", reason="ruff is in the test extra: pip install -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--quiet", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


# The C, C++ and CUDA sources clang-format keeps (tests/lectures: the lectures' listings as printed).
FORMATTED = ("csrc/*.c", "csrc/*.h", "cuda/*.cu", "cuda/*.h", "tiledmm/native/**/*.h",
             "tiledmm/native/**/*.cpp", "tests/emu/*.cpp", "tests/emu/*.h")


def test_clang_format_passes():
    tool = shutil.which("clang-format", path=os.path.dirname(sys.executable)) or \
        shutil.which("clang-format")
    if tool is None:
        pytest.skip("clang-format is in the test extra: pip install -e '.[test]'")
    version = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
    if "version 18." not in version.stdout:
        pytest.skip(f"the pinned clang-format is 18 (the test extra's wheel); found "
                    f"{version.stdout.strip()}")
    files = sorted(f for pattern in FORMATTED
                   for f in glob.glob(os.path.join(ROOT, pattern), recursive=True))
    assert files
    done = subprocess.run([tool, "--dry-run", "--Werror", "--style=file", *files], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
