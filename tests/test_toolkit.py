"""tiledmm/_toolkit.py, the one lookup of the CUDA toolkit: $CUDA_HOME first, then $CUDA_PATH,
nvcc's folder on PATH, /usr/local/cuda; tools in a root's subfolders before PATH."""
import os
import stat

from tiledmm import _toolkit


def _fake_root(tmp_path, name, tools=("nvcc",), sub="bin"):
    root = tmp_path / name
    (root / sub).mkdir(parents=True)
    (root / "include").mkdir()
    (root / "lib64").mkdir()
    (root / "include" / "cuda_runtime.h").write_text("// stand-in\n")
    for t in tools:
        p = root / sub / t
        p.write_text("#!/bin/sh\nexit 0\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return root


def test_cuda_home_comes_first(tmp_path, monkeypatch):
    home = _fake_root(tmp_path, "home", tools=("nvcc", "ncu"))
    other = _fake_root(tmp_path, "other", tools=("nvcc", "ncu"))
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("CUDA_PATH", str(other))
    assert _toolkit.roots()[:2] == [str(home), str(other)]
    assert _toolkit.home() == str(home)
    assert _toolkit.tool("ncu") == os.path.join(str(home), "bin", "ncu")
    assert _toolkit.include_dir() == os.path.join(str(home), "include")
    assert _toolkit.lib_dirs()[0] == os.path.join(str(home), "lib64")


def test_a_root_without_nvcc_is_not_home(tmp_path, monkeypatch):
    empty = _fake_root(tmp_path, "empty", tools=())
    monkeypatch.setenv("CUDA_HOME", str(empty))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert _toolkit.home() != str(empty)


def test_a_tool_in_a_named_subfolder(tmp_path, monkeypatch):
    root = _fake_root(tmp_path, "root", tools=("compute-sanitizer",), sub="compute-sanitizer")
    monkeypatch.setenv("CUDA_HOME", str(root))
    assert _toolkit.tool("compute-sanitizer", ("compute-sanitizer", "bin")) == \
        os.path.join(str(root), "compute-sanitizer", "compute-sanitizer")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _toolkit.tool("no-such-tool-anywhere") is None
