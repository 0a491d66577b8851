"""The %%cuda magics on the GPU (issue 31): tests/magics/cells.py's cells and the
nvcc4jupyter-style notebook's code cells, run through IPython's InteractiveShell (no Jupyter
needed) on a backend (cuda by default), each cell's stdout, stderr and launch table printed and
the exact outputs compared. Then --profile on cuda (ncu, and nsys -l), or the message that says
where they are missing. Exits 1 on a difference.

    python3 benchmarks/magics_gpu.py [--backend cuda|emu] [--out DIR]
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
try:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
except ImportError:
    print("magics_gpu: IPython is not installed here; carry a venv with it (pip install ipython) "
          "to drive the %%cuda magics")
    sys.exit(2)
from magics.cells import CELLS, EXPECTED_STDOUT  # noqa: E402

STYLE_NOTEBOOK = os.path.join(ROOT, "tests", "magics", "nvcc4jupyter_style.ipynb")
PROFILE_CELLS = [
    ("profile_ncu", "%%cuda --profile\n" + dict(CELLS)["profile"].split("\n", 1)[1]),
    ("profile_ncu_args", '%%cuda --profile --profiler-args "--section SpeedOfLight"\n' +
     dict(CELLS)["profile"].split("\n", 1)[1]),
    ("profile_nsys", "%%cuda --profile --profiler nsys --profiler-args \"--stats=true\"\n" +
     dict(CELLS)["profile"].split("\n", 1)[1]),
]


def run_cell(shell, source):
    """(stdout, stderr, the HTML the cell displayed) of one cell run in `shell`."""
    with capture_output() as cap:
        result = shell.run_cell(source, store_history=True)
    html = "".join(o.data.get("text/html", "") for o in cap.outputs)
    error = result.error_in_exec or result.error_before_exec
    return cap.stdout, cap.stderr + (f"\n{type(error).__name__}: {error}" if error else ""), html


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cuda", choices=("cuda", "emu"))
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    os.environ["TILEDMM_BACKEND"] = args.backend   # the magics' default backend
    os.makedirs(args.out, exist_ok=True)
    shell = InteractiveShell.instance()
    failures, record = [], {}
    notebook = json.load(open(STYLE_NOTEBOOK))
    style = [(f"style_{i}", "".join(c["source"])) for i, c in enumerate(notebook["cells"])
             if c["cell_type"] == "code" and "load_ext" not in "".join(c["source"])]
    for tag, source in CELLS + style + PROFILE_CELLS:
        stdout, stderr, html = run_cell(shell, source)
        launches = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td>"
                              r"<td>.*?</td><td>(.*?)</td>", html)
        record[tag] = {"stdout": stdout, "stderr": stderr, "launches": launches}
        print(f"== {tag}")
        print(stdout.rstrip()[-3000:])
        if stderr.strip():
            print("stderr: " + stderr.rstrip()[-3000:].replace("\n", "\n        "))
        for kernel, grid, block, ms in launches:
            print(f"  launch {kernel} grid {grid} block {block}: {ms} ms")
        want = EXPECTED_STDOUT.get(tag)
        if want is not None and stdout != want:
            failures.append(f"{tag}: stdout {stdout!r}, expected {want!r}")
        if tag == "hello" and "sum 111" not in stdout:
            failures.append("hello: no 'sum 111'")
        if tag == "compile_error" and not re.search(r"cell\.cu[:(]5", stderr):
            failures.append("compile_error: the error is not at the cell's line 5")
        if "Error:" in stderr and "KeyboardInterrupt" not in stderr:
            failures.append(f"{tag}: an exception reached the notebook: {stderr[-300:]}")
    with open(os.path.join(args.out, "magics_gpu.json"), "w") as f:
        json.dump(record, f, indent=1)
    print("\n".join(["== differences"] + failures) if failures else
          f"== every cell as expected on {args.backend}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
