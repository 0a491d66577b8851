#!/usr/bin/env python3
"""Execute the classroom notebooks in a real Jupyter kernel (nbclient + ipykernel) and save their
outputs in the paired .ipynb: what a student's Jupyter shows, on this machine's backend.

    python benchmarks/execute_notebooks.py                  # every notebooks/*.py
    python benchmarks/execute_notebooks.py notebooks/08_*.py --timeout 900

Each notebook's cells come from its jupytext source (notebooks/NN_name.py, the file people edit);
the executed notebook is written to the paired NN_name.ipynb, with a `tiledmm_run` record in its
metadata (backend, device, date, seconds, errors). benchmarks/gpu_run.sh uses this where nbclient
is installed (carried as wheels to the GPU machine) and benchmarks/run_notebooks.py, which needs
no Jupyter, elsewhere. Exit status: 0 when every notebook ran without error.
"""
import argparse
import glob
import os
import sys
import time

import jupytext
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)   # this checkout's tiledmm, as the notebooks' kernel imports it
import tiledmm as tm  # noqa: E402
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def device_name(backend):
    return tm.device_info(backend=backend)["name"]


def execute(source, timeout, backend):
    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = KERNELSPEC
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            record_timing=False,   # no per-cell timings in the committed cells
                            resources={"metadata": {"path": os.path.dirname(source)}})
    start, errors = time.time(), 0
    try:
        client.execute()
    except CellExecutionError as exc:
        errors = 1
        print(f"{os.path.basename(source)}: {str(exc).splitlines()[0] if str(exc) else exc}")
    nb.metadata["tiledmm_run"] = dict(
        backend=backend, date=time.strftime("%Y-%m-%d %H:%M:%S"), device=device_name(backend),
        errors=errors, runner="benchmarks/execute_notebooks.py (nbclient, ipykernel)",
        seconds=round(time.time() - start, 2))
    target = os.path.splitext(source)[0] + ".ipynb"
    nbformat.write(nb, target)
    return errors


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*",
                    default=sorted(glob.glob(os.path.join(REPO, "notebooks", "[0-9]*.py"))))
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    ap.add_argument("--backend", default=None, help="TILEDMM_BACKEND for the kernels")
    args = ap.parse_args(argv)
    if args.backend:
        os.environ["TILEDMM_BACKEND"] = args.backend
    backend = args.backend or tm.get_backend()
    # The kernel runs in the notebook's folder: it imports this checkout's tiledmm.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    failed = 0
    for source in args.notebooks:
        start = time.time()
        errors = execute(os.path.abspath(source), args.timeout, backend)
        failed += errors
        print(f"{os.path.basename(source)}: {'ERROR' if errors else 'ok'} "
              f"({time.time() - start:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
