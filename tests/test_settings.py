"""The TILEDMM_* variables have one table (tiledmm/_settings.py): every name the sources read is a
row of it, every row is read somewhere, docs/settings.md shows it, and confined children see only
the rows marked for them."""
import os
import re
import subprocess

import pytest

from tiledmm import _settings
from tiledmm.confine import sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NAME = re.compile(r"\bTILEDMM_[A-Z0-9_]*[A-Z0-9]\b")


def names_in_sources():
    files = subprocess.run(["git", "ls-files", "tiledmm", "csrc", "emu", "cuda", "setup.py"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    found = {}
    for rel in files.stdout.split():
        if rel.endswith(("_settings.py",)) or not rel.endswith(
                (".py", ".c", ".h", ".cpp", ".cu", ".cuh")):
            continue
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
            for name in _NAME.findall(f.read()):
                found.setdefault(name, rel)
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
