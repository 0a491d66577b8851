"""The classroom notebooks run top to bottom, headless, on the emulator (nbclient + ipykernel),
and benchmarks/run_notebooks.py executes one without any Jupyter package."""
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


def test_notebooks_exist_and_are_generated():
    names = [os.path.basename(p)[:2] for p in NOTEBOOKS]
    assert names == ["01", "02", "03", "04", "05", "06", "07", "08"]
    for path in NOTEBOOKS:
        with open(path) as f:
            nb = json.load(f)
        assert nb["nbformat"] == 4
        kinds = [c["cell_type"] for c in nb["cells"]]
        assert kinds[0] == "markdown" and "code" in kinds


def test_committed_notebooks_match_their_generator():
    """notebooks/*.ipynb are written by notebooks/make_notebooks.py: edit the generator, rerun it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "make_notebooks", os.path.join(REPO, "notebooks", "make_notebooks.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert sorted(gen.NOTEBOOKS) == [os.path.basename(p)[:-6] for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        with open(path) as f:
            committed = json.load(f)
        expected = gen.build(os.path.basename(path)[:-6])
        assert [(c["cell_type"], "".join(c["source"])) for c in committed["cells"]] == \
            [(c["cell_type"], "".join(c["source"])) for c in expected["cells"]], path


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p)[:2] for p in NOTEBOOKS])
def test_notebook_runs_on_emu(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("TILEDMM_BACKEND", "emu")   # the kernel process inherits it
    monkeypatch.setenv("MPLBACKEND", "Agg")
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
    env = dict(os.environ, TILEDMM_BACKEND="emu",
               PYTHONPATH=os.pathsep.join([str(blocker), here]))
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
