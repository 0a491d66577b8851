"""The classroom notebooks: each .ipynb is paired with its jupytext percent-format source (.py),
they run top to bottom, headless, on the emulator (nbclient + ipykernel), and
benchmarks/run_notebooks.py executes one without any Jupyter package."""
import base64
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb")))


def test_notebooks_exist():
    names = [os.path.basename(p)[:2] for p in NOTEBOOKS]
    assert names == ["01", "02", "03", "04", "05", "06", "07", "08", "09"]
    for path in NOTEBOOKS:
        with open(path) as f:
            nb = json.load(f)
        assert nb["nbformat"] == 4
        kinds = [c["cell_type"] for c in nb["cells"]]
        assert kinds[0] == "markdown" and "code" in kinds
        # Jupyter needs the kernel; the docs' Sphinx (myst-nb) the language, to highlight cells
        assert nb["metadata"]["kernelspec"]["name"] == "python3", path
        assert nb["metadata"]["language_info"]["name"] == "python", path


def _paired_sources():
    return sorted(glob.glob(os.path.join(REPO, "notebooks", "[0-9][0-9]_*.py")))


def test_every_notebook_has_its_percent_source():
    """Each notebooks/NN_name.ipynb is paired with NN_name.py (jupytext percent format), the
    file people edit and diff; notebooks/jupytext.toml declares the pairing."""
    assert [p[:-3] for p in _paired_sources()] == [p[:-6] for p in NOTEBOOKS]
    assert not os.path.exists(os.path.join(REPO, "notebooks", "make_notebooks.py"))
    jupytext = pytest.importorskip("jupytext")
    config = jupytext.config.load_jupytext_configuration_file(
        os.path.join(REPO, "notebooks", "jupytext.toml"))
    assert config.formats == ["ipynb,py:percent"]
    for path in _paired_sources():
        with open(path, encoding="utf-8") as f:
            assert f.readline().startswith("# %% [markdown]"), path   # no metadata header


def test_committed_notebooks_match_their_sources():
    """The .ipynb cells are the .py cells: after editing a .py, run `jupytext --sync
    notebooks/*.py` (outputs of unchanged cells are kept)."""
    jupytext = pytest.importorskip("jupytext")
    for path in NOTEBOOKS:
        with open(path, encoding="utf-8") as f:
            committed = json.load(f)
        source = jupytext.read(path[:-6] + ".py")
        assert [(c["cell_type"], "".join(c["source"])) for c in committed["cells"]] == \
            [(c.cell_type, c.source) for c in source.cells], \
            f"{os.path.basename(path)} differs from its .py: run jupytext --sync notebooks/*.py"


def test_committed_outputs_show_what_the_sources_draw():
    """A notebook whose cells draw figures (plt.show) carries them in its committed outputs: the
    docs site shows the .ipynb as committed (issue 28: notebook 08's plot was missing)."""
    for path in NOTEBOOKS:
        with open(path[:-6] + ".py", encoding="utf-8") as f:
            draws = f.read().count("plt.show()")
        with open(path, encoding="utf-8") as f:
            cells = json.load(f)["cells"]
        figures = sum("image/png" in out.get("data", {}) for c in cells
                      for out in c.get("outputs", []))
        errors = [out for c in cells for out in c.get("outputs", [])
                  if out.get("output_type") == "error"]
        assert figures >= draws, f"{os.path.basename(path)}: {draws} plt.show(), {figures} figures"
        assert not errors, f"{os.path.basename(path)} was committed with an error output"


def test_notebooks_use_only_public_names():
    """Students copy from the notebooks: no tm._private or tm.module._private names."""
    import re
    for path in _paired_sources():
        with open(path, encoding="utf-8") as f:
            private = re.findall(r"\btm(?:\.\w+)*\._\w+", f.read())
        assert not private, f"{os.path.basename(path)}: {private}"


def _setup_part(path):
    """The first code cell of a notebook, up to the line that seeds the generator."""
    jupytext = pytest.importorskip("jupytext")
    first = next(c for c in jupytext.read(path).cells if c.cell_type == "code")
    assert "\nrng = np.random.default_rng(0)" in first.source, path
    return first.source.split("\nrng = np.random.default_rng(0)")[0]


def test_notebooks_share_one_setup():
    """The set-up helpers (have, table, start) live in one module, tiledmm.notebook, which every
    notebook imports; the few set-up lines left in each must stay identical."""
    sources = _paired_sources()
    first = _setup_part(sources[0])
    assert "from tiledmm.notebook import" in first and "def " not in first
    for path in sources[1:]:
        assert _setup_part(path) == first, f"{os.path.basename(path)}: set-up cell differs from 01's"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p)[:2] for p in NOTEBOOKS])
def test_notebook_runs_on_emu(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("TILEDMM_BACKEND", "emu")   # the kernel process inherits it
    # Jupyter's inline backend, so figures come back as image outputs (Agg would drop them)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    # the kernel imports the tiledmm this test process imports
    import tiledmm
    here = os.path.dirname(os.path.dirname(os.path.abspath(tiledmm.__file__)))
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", here + (os.pathsep + pythonpath if pythonpath else ""))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()   # raises CellExecutionError when a cell fails
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    if os.path.basename(path).startswith("08"):
        # your kernel beside tiled (and cuBLAS) is a bar chart, as in the other notebooks
        start = next(i for i, c in enumerate(nb.cells) if "Timed beside" in c.source)
        end = next(i for i, c in enumerate(nb.cells) if "Your turn" in c.source)
        assert any("image/png" in o.get("data", {}) for c in nb.cells[start:end]
                   if c.cell_type == "code" for o in c.outputs)


def test_run_notebooks_script_without_jupyter(tmp_path):
    """The GPU machine's path: exec() the cells, capture prints and figures, write JSON with the
    json module only. Jupyter's packages are made unimportable for the run."""
    blocker = tmp_path / "blocked"
    blocker.mkdir()
    for name in ("nbclient", "nbformat", "ipykernel", "IPython", "jupyter_client"):
        (blocker / f"{name}.py").write_text(f"raise ImportError('{name} blocked for this test')\n")
    nb_path = tmp_path / "01.ipynb"
    shutil.copy(NOTEBOOKS[0], nb_path)
    import tiledmm
    here = os.path.dirname(os.path.dirname(os.path.abspath(tiledmm.__file__)))
    env = dict(os.environ, TILEDMM_BACKEND="emu",   # the caller's PYTHONPATH after (libclang
               PYTHONPATH=os.pathsep.join([str(blocker), here, *filter(   # from pip --target)
                   None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "run_notebooks.py"),
                           str(nb_path)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(nb_path) as f:
        nb = json.load(f)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] for c in code)
    outputs = [o for c in code for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any(o["output_type"] == "stream" and "backend: emu" in "".join(o["text"])
               for o in outputs)
    pngs = [o for o in outputs if o["output_type"] == "display_data"]
    assert pngs and base64.b64decode(pngs[-1]["data"]["image/png"])[:4] == b"\x89PNG"
    assert nb["metadata"]["tiledmm_run"]["backend"] == "emu"
    # run records live in the notebook's metadata, which syncing from the .py keeps
    assert len(nb["metadata"]["tiledmm_run"]["cell_seconds"]) == len(code)
    assert all(c["metadata"] == {} for c in code)


def test_run_notebooks_script_records_errors(tmp_path):
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": ["x = 6 * 7\n", "x"]},
                    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": ["print('hi')\n", "1 / 0"]},
                    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": ["print('never')"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "t.ipynb"
    path.write_text(json.dumps(nb))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "run_notebooks.py"),
                           str(path)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TILEDMM_BACKEND="emu"))
    assert proc.returncode == 1
    cells = json.loads(path.read_text())["cells"]
    assert cells[0]["outputs"][0]["data"]["text/plain"] == ["42"]
    assert cells[1]["outputs"][0]["text"] == ["hi\n"]
    assert cells[1]["outputs"][-1]["ename"] == "ZeroDivisionError"
    assert cells[2]["outputs"] == [] and cells[2]["execution_count"] is None


def test_run_notebooks_script_takes_the_percent_source(tmp_path):
    """Named by its .py, a notebook runs as its paired .ipynb, first brought up to date from
    the .py: a cell edited in the .py runs as edited, the others keep their outputs' places."""
    jupytext = pytest.importorskip("jupytext")
    shutil.copy(os.path.join(REPO, "notebooks", "jupytext.toml"), tmp_path)
    source = tmp_path / "nb.py"
    source.write_text("# %% [markdown]\n# A title\n\n# %%\nprint('first')\n\n# %%\nx = 6 * 7\nx\n")
    jupytext.write(jupytext.read(source), tmp_path / "nb.ipynb")
    source.write_text(source.read_text().replace("x = 6 * 7", "x = 6 * 8"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "run_notebooks.py"),
                           str(source)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TILEDMM_BACKEND="emu"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = json.loads((tmp_path / "nb.ipynb").read_text())["cells"]
    assert [c["cell_type"] for c in cells] == ["markdown", "code", "code"]
    assert cells[1]["outputs"][0]["text"] == ["first\n"]
    assert cells[2]["outputs"][0]["data"]["text/plain"] == ["48"]
