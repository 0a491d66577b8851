"""The classroom notebooks' shared set-up: one import instead of the same cell in each notebook.

Every notebook of `notebooks/` starts with::

    from tiledmm.notebook import have, table, start

    BACKEND, ON_GPU, AVAILABLE = start()

`start()` prints which backend runs the notebook and returns it, whether it is the GPU (the
notebooks pick full sizes there and small ones on the emulator) and the names of the kernels
this build registers. `have(...)` skips, with a note, a part that needs a kernel this build
lacks (`cutlass` where CUTLASS's headers were missing); `table(...)` shows rows as a pandas
DataFrame where pandas is installed.

It is a module of the package, not a file beside the notebooks, so a notebook copied out of
the repository runs against an installed tiledmm (`pip install tiledmm`) just the same.
"""
import tiledmm as tm

__all__ = ["start", "have", "table"]


def start():
    """Print the backend the notebook runs on; return `(backend, on_gpu, available)`.

    `available` is the set of kernel names this build registers (`tm.kernels()`), which
    `have` checks. Call it again after `tm.set_backend` to see the new backend.

    >>> backend, on_gpu, available = start()   # doctest: +ELLIPSIS
    backend: ...
    >>> "tiled" in available
    True
    """
    backend = tm.get_backend()
    on_gpu = backend == "cuda"
    print(f"backend: {backend}: " + ("the GPU, full sizes" if on_gpu else
          "the CPU emulator, small sizes; its timings are CPU times, not GPU times"))
    return backend, on_gpu, {k.name for k in tm.kernels()}


def have(*names):
    """True when every kernel named is registered in this build; else print a note.

    >>> have("tiled", "naive")
    True
    >>> have("no_such_kernel")
    note: kernel(s) no_such_kernel not registered in this build of tiledmm; skipping this part
    False
    """
    available = {k.name for k in tm.kernels()}
    missing = [n for n in names if n not in available]
    if missing:
        print(f"note: kernel(s) {', '.join(missing)} not registered in this build of tiledmm; "
              "skipping this part")
    return not missing


def table(rows, columns=None):
    """Rows (a DataFrame or a list of dicts) as a DataFrame where pandas is installed, else
    the rows unchanged; `columns` picks and orders the columns shown."""
    try:
        import pandas as pd
    except ImportError:
        return rows
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    return df[columns] if columns else df
