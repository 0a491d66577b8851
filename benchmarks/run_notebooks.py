#!/usr/bin/env python3
"""Execute the classroom notebooks in place on the current backend and save their outputs,
without Jupyter: no nbclient, nbformat, ipykernel or IPython needed (for a GPU machine that has
only numpy, matplotlib and pandas, and no network).

    python benchmarks/run_notebooks.py                     # every notebooks/*.ipynb, in place
    python benchmarks/run_notebooks.py notebooks/03_*.ipynb --backend cuda
    python benchmarks/run_notebooks.py --out-dir executed/ # write copies instead
    python benchmarks/run_notebooks.py notebooks/02_*.py   # a notebook named by its source

Each notebook is edited as its jupytext percent-format source (notebooks/NN_name.py) and run as
the paired .ipynb. Where jupytext is installed, the .ipynb's cells are first brought up to date
from the .py (as `jupytext --sync` does); without it, the .ipynb runs as it is.

Each notebook's code cells run top to bottom with exec() in one namespace, in the notebook's
folder. A cell's printed output becomes a "stream" output, the value of its last expression an
"execute_result" (text/plain, plus text/html for objects that have _repr_html_, such as
DataFrames), every matplotlib figure it made a PNG "display_data", and an exception an "error"
output; after an error the remaining cells are left unrun (as Jupyter does) unless
--keep-going. The notebook JSON is written back with the json module only. Exit status: 0 when
every notebook ran without error, 1 otherwise.
"""
import argparse
import ast
import base64
import contextlib
import glob
import io
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


class _Tee(io.TextIOBase):
    """Collects what a cell writes to one stream."""

    def __init__(self):
        self.parts = []

    def write(self, text):
        self.parts.append(text)
        return len(text)

    def getvalue(self):
        return "".join(self.parts)


def _lines(text):
    return text.splitlines(keepends=True)


def _setup_matplotlib(captured):
    """Agg backend; plt.show() hands figures to the current cell instead of a window."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    def show(*args, **kwargs):
        captured.extend(_take_figures(plt))

    plt.show = show
    return plt


def _take_figures(plt):
    """PNG display_data outputs of every open figure, then close them."""
    outputs = []
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        outputs.append({
            "output_type": "display_data",
            "data": {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"),
                     "text/plain": [repr(fig)]},
            "metadata": {},
        })
        plt.close(fig)
    return outputs


def _result_output(value, count):
    data = {"text/plain": _lines(repr(value))}
    html = getattr(value, "_repr_html_", None)
    if callable(html):
        try:
            rendered = html()
        except Exception:
            rendered = None
        if rendered:
            data["text/html"] = _lines(rendered)
    return {"output_type": "execute_result", "execution_count": count, "data": data,
            "metadata": {}}


def _strip_magics(source):
    """IPython magics and shell escapes cannot run under exec(): comment them out."""
    out = []
    for line in source.splitlines():
        stripped = line.lstrip()
        out.append(("# (skipped outside IPython) " + line) if stripped.startswith(("%", "!"))
                   else line)
    return "\n".join(out)


def _cuda_cell(source):
    """A `%%cuda` cell (tiledmm's magic, which needs IPython) as the Python that runs it: the
    cell's program through tm.run, its stdout and stderr printed, its result (the launches) the
    cell's value. The magic's options are not read here."""
    head, _, body = source.lstrip().partition("\n")
    return ("import sys as _sys, tiledmm as _tm\n"
            f"_r = _tm.run({('// ' + head + chr(10) + body)!r})\n"
            "print(_r.stdout, end='')\nprint(_r.stderr, end='', file=_sys.stderr)\n_r\n")


def run_cell(source, namespace, filename, plt, shown):
    """Run one cell's source; returns (outputs, error or None)."""
    if source.lstrip().startswith("%%cuda"):
        source = _cuda_cell(source)
    out_stream, err_stream = _Tee(), _Tee()
    outputs = []
    value = None
    error = None
    try:
        tree = ast.parse(_strip_magics(source), filename=filename)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        with contextlib.redirect_stdout(out_stream), contextlib.redirect_stderr(err_stream):
            exec(compile(tree, filename, "exec"), namespace)
            if last is not None:
                value = eval(compile(last, filename, "eval"), namespace)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: record it, then stop
        error = exc
    for name, stream in (("stdout", out_stream), ("stderr", err_stream)):
        text = stream.getvalue()
        if text:
            outputs.append({"output_type": "stream", "name": name, "text": _lines(text)})
    if plt is not None:
        outputs.extend(shown)
        shown.clear()
        outputs.extend(_take_figures(plt))
    if error is not None:
        tb = traceback.format_exception(type(error), error, error.__traceback__)
        outputs.append({"output_type": "error", "ename": type(error).__name__,
                        "evalue": str(error), "traceback": [line.rstrip("\n") for line in tb]})
    elif value is not None:
        outputs.append(("result", value))
    return outputs, error


def sync_from_source(path, quiet=False):
    """Update the .ipynb at path from its paired percent-format .py where jupytext is installed
    (outputs of unchanged cells are kept). Returns True when it synced."""
    source = os.path.splitext(path)[0] + ".py"
    if not os.path.exists(source):
        return False
    try:
        from jupytext.cli import jupytext as jupytext_cli
    except ImportError:
        return False
    # --update keeps the .ipynb's outputs and metadata; only the cells' sources change
    jupytext_cli(["--to", "ipynb", "--update"] + (["--quiet"] if quiet else []) + [source])
    return True


def run_notebook(path, out_path=None, keep_going=False, quiet=False):
    """Execute one notebook; write it (with outputs) to out_path (default: in place).
    Returns (number of errors, seconds)."""
    with open(path) as f:
        nb = json.load(f)
    shown = []
    plt = _setup_matplotlib(shown)
    namespace = {"__name__": "__main__", "__file__": os.path.abspath(path)}
    count = 0
    errors = 0
    # Per code cell run, in order. Kept in the notebook's metadata, not the cells': jupytext
    # rewrites cell metadata from the paired .py, which leaves run records out.
    cell_seconds = []
    start = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(os.path.dirname(os.path.abspath(path)))
    try:
        stop = False
        for i, cell in enumerate(nb.get("cells", [])):
            if cell.get("cell_type") != "code":
                continue
            if stop:
                cell["outputs"], cell["execution_count"] = [], None
                continue
            source = "".join(cell.get("source", []))
            count += 1
            t0 = time.perf_counter()
            outputs, error = run_cell(source, namespace, f"<{os.path.basename(path)} cell {i}>",
                                      plt, shown)
            cell["outputs"] = [_result_output(o[1], count) if isinstance(o, tuple) else o
                               for o in outputs]
            cell["execution_count"] = count
            cell_seconds.append(round(time.perf_counter() - t0, 3))
            if error is not None:
                errors += 1
                if not quiet:
                    print(f"  cell {i}: {type(error).__name__}: {error}", file=sys.stderr)
                stop = not keep_going
    finally:
        os.chdir(cwd)
        if plt is not None:
            plt.close("all")
    seconds = time.perf_counter() - start
    meta = nb.setdefault("metadata", {})
    # What Jupyter writes into a notebook it ran: Sphinx (myst-nb) needs the language to
    # highlight the cells, and Jupyter to pick the kernel.
    meta.setdefault("kernelspec", KERNELSPEC)
    meta.setdefault("language_info", {"name": "python", "file_extension": ".py",
                                      "mimetype": "text/x-python",
                                      "pygments_lexer": "ipython3"})
    try:
        import tiledmm
        backend = tiledmm.get_backend()
        device = tiledmm.device_info()["name"]
    except Exception:
        backend = device = None
    meta["tiledmm_run"] = {"backend": backend, "device": device, "seconds": round(seconds, 2),
                           "cell_seconds": cell_seconds,
                           "errors": errors, "runner": "benchmarks/run_notebooks.py",
                           "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(out_path or path, "w") as f:
        # sorted keys, as nbformat and jupytext write them, so runs and syncs diff cleanly
        json.dump(nb, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")
    return errors, seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*",
                        help="notebooks to run, as .ipynb or as their paired .py "
                             "(default: notebooks/*.ipynb of the repository)")
    parser.add_argument("--backend", choices=("cuda", "emu"),
                        help="tiledmm backend (default: cuda when a device is present)")
    parser.add_argument("--out-dir", help="write executed copies here instead of in place")
    parser.add_argument("--keep-going", action="store_true",
                        help="run the remaining cells after a failing one")
    args = parser.parse_args(argv)
    if args.backend:
        os.environ["TILEDMM_BACKEND"] = args.backend
    try:  # an installed tiledmm, else the checkout this script sits in (built in place)
        import tiledmm  # noqa: F401
    except ImportError:
        sys.path.insert(0, REPO)
    paths = [os.path.splitext(p)[0] + ".ipynb" if p.endswith(".py") else p
             for p in args.notebooks] or sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb")))
    if not paths:
        print("no notebooks found", file=sys.stderr)
        return 1
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
    failed = 0
    for path in paths:
        out = os.path.join(args.out_dir, os.path.basename(path)) if args.out_dir else None
        print(f"{os.path.basename(path)} ...", flush=True)
        sync_from_source(path, quiet=True)
        errors, seconds = run_notebook(path, out, keep_going=args.keep_going)
        print(f"  {'ok' if not errors else f'{errors} failing cell(s)'} in {seconds:.1f} s")
        failed += bool(errors)
    print(f"{len(paths) - failed} notebook(s) ran, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
