"""The TILEDMM_* variables have one table (tiledmm/_settings.py): every name the sources read is a
row of it, every row is read somewhere, docs/settings.md shows it, and confined children see only
the rows marked for them."""
import os
import re

import pytest

from tiledmm import _settings
from tiledmm.confine import sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NAME = re.compile(r"\bTILEDMM_[A-Z0-9_]*[A-Z0-9]\b")


def names_in_sources():
    """{TILEDMM_ name: a file that names it} over the package, the C glue, the kernels and
    setup.py (walked, not listed by git: the GPU machine's copy of the tree has no .git)."""
    found = {}
    paths = [os.path.join(ROOT, "setup.py")]
    for top in ("tiledmm", "csrc", "cuda"):
        for folder, _dirs, files in os.walk(os.path.join(ROOT, top)):
            paths += [os.path.join(folder, f) for f in files]
    for path in paths:
        if path.endswith("_settings.py") or not path.endswith(
                (".py", ".c", ".h", ".cpp", ".cu", ".cuh")):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for name in _NAME.findall(f.read()):
                found.setdefault(name, os.path.relpath(path, ROOT))
    return found


def test_every_name_in_the_sources_is_a_row():
    found = names_in_sources()
    missing = {n: f for n, f in found.items() if n not in _settings.BY_NAME}
    assert not missing, f"TILEDMM_ names read but not in tiledmm/_settings.py: {missing}"


def test_every_row_is_read_somewhere():
    found = names_in_sources()
    unread = [s.name for s in _settings.SETTINGS if s.name not in found]
    assert not unread, f"rows of tiledmm/_settings.py no source reads: {unread}"


def test_the_docs_page_holds_the_table():
    with open(os.path.join(ROOT, "docs", "settings.md"), encoding="utf-8") as f:
        assert _settings.table() in f.read()


def test_get_refuses_a_name_not_in_the_table(monkeypatch):
    monkeypatch.setenv("TILEDMM_BACKEND", "emu")
    assert _settings.get("TILEDMM_BACKEND") == "emu"
    with pytest.raises(KeyError, match="not a tiledmm setting"):
        _settings.get("TILEDMM_NO_SUCH_THING")


def test_children_see_only_the_rows_marked_for_them(monkeypatch):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", "/somewhere/private")
    monkeypatch.setenv("TILEDMM_EMU_THREADS", "3")
    monkeypatch.setenv("TILEDMM_NOT_A_SETTING", "x")
    env = sandbox.minimal_env()
    assert env.get("TILEDMM_EMU_THREADS") == "3"
    assert "TILEDMM_CACHE_DIR" not in env and "TILEDMM_NOT_A_SETTING" not in env
