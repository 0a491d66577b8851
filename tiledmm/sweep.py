"""tm.sweep: kernels x sizes x parameter grid -> one row per run.

    df = tm.sweep("tiled", [256, 512], tile=[8, 16, 32])
    df = tm.sweep(["naive", "tiled", "coarse"], [(512, 256, 384)], tile=[16, 32], coarsen="all")
    df = tm.sweep(tm.kernels("reduce"), [1 << 20])           # every reduction, defaults

A parameter of the grid applies to the kernels that have it (and only to values they allow);
the others keep their defaults. "all" means every allowed value. Each size uses one random
input (values in [-1, 1)) shared by all kernels. Rows come back as a pandas DataFrame where
pandas is installed (as_frame=None), else as a list of dicts; a tqdm progress bar shows on
long sweeps where tqdm is installed (progress=None: 8 runs or more).

Row columns: kernel, family, params (text), one column per swept parameter (integers: Int64
in a DataFrame, <NA> for kernels without that parameter), size columns
(M, N, K for matmul; n for reduce and elementwise), dtype, backend, clock, l2 (Timing.l2: the L2
cache flushed before each timed launch, or kept warm with warm_l2=True), ms (median), ms_min,
gflops, tflops, gbps (fewest bytes over time), flops, model_bytes (the lecture's traffic model
for this kernel), intensity (flops per model byte), model_gbps (model bytes over time),
launch facts (grid, block_dim, threads_per_block, shared_bytes, registers, blocks_per_sm,
occupancy, launches), and, with check=True, max_rel_error against NumPy in float64.
"""
import itertools
import sys
import types
import warnings

import numpy as np

from . import _backend, _families, _registry
from .profile import counted_row_fields

__all__ = ["sweep", "cases"]


def _kernel_names(kernels, family):
    if kernels is None:
        return [k.name for k in _registry.kernels(family or "matmul")]
    if isinstance(kernels, str) or hasattr(kernels, "name"):
        kernels = [kernels]
    return [k if isinstance(k, str) else k.name for k in kernels]


def cases(kernels=None, params=None, family=None, skip_missing=False):
    """The (kernel spec, params dict) pairs a sweep runs: the grid of `params` (name -> list of
    values, or "all") applied to each kernel that has the parameter."""
    specs = _registry.specs()
    params = dict(params or {})
    names = _kernel_names(kernels, family)
    out, used = [], set()
    for name in names:
        spec = specs.get(name)
        if spec is None:
            if skip_missing:
                warnings.warn(f"tm.sweep: kernel {name!r} is not registered; skipped",
                              stacklevel=3)
                continue
            raise ValueError(f"unknown kernel {name!r}; registered: {', '.join(specs)}")
        axes = []
        for p in spec.params:
            if p.name not in params:
                continue
            used.add(p.name)
            wanted = params[p.name]
            if isinstance(wanted, str) and wanted == "all":
                values = list(p.values)
            else:
                values = [wanted] if np.isscalar(wanted) else list(wanted)
                values = [v for v in values if v in p.values]
            if values:
                axes.append([(p.name, v) for v in values])
        for combo in itertools.product(*axes):
            out.append((spec, dict(combo)))
    unused = sorted(set(params) - used)
    if unused and names:
        raise ValueError(f"no kernel of {names} has parameter(s) {', '.join(unused)}")
    return out


def _sizes(sizes, family):
    if sizes is None:
        raise ValueError("give sizes: an int, a tuple (M, N, K) for matmul, or a list of them")
    if np.isscalar(sizes) or (isinstance(sizes, tuple) and family == "matmul"
                              and len(sizes) == 3 and all(np.isscalar(s) for s in sizes)):
        sizes = [sizes]
    out = []
    for s in sizes:
        if family == "matmul":
            out.append(tuple(int(v) for v in s) if isinstance(s, (tuple, list)) else (int(s),) * 3)
        else:
            out.append(int(s) if np.isscalar(s) else tuple(int(v) for v in s))
    return out


def _progress_bar(total, progress):
    if progress is False or (progress is None and total < 8):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    try:  # a widget in Jupyter where ipywidgets is installed, text elsewhere
        import ipywidgets  # noqa: F401
        from tqdm.auto import tqdm
    except ImportError:
        pass
    return tqdm(total=total, desc="tm.sweep", leave=False)


def _row(res, spec, params, size, check_error):
    t, lc = res.timing, res.launch
    ms = t.kernel_ms
    row = dict(kernel=res.kernel, family=spec.family,
               params=" ".join(f"{k}={v}" for k, v in res.params.items()))
    row.update(res.params)
    if spec.family == "matmul":
        row.update(M=size[0], N=size[1], K=size[2])
    elif spec.family == "reduce":
        row["n"] = int(np.prod(size))
    else:
        row["n"] = int(res.out.size)
    row.update(dtype=str(res.out.dtype), backend=res.backend, clock=t.clock, l2=t.l2, ms=ms,
               ms_min=t.kernel_ms_min, gflops=res.gflops, tflops=res.tflops, gbps=res.gbps,
               flops=res.flops, model_bytes=res.model_bytes,
               intensity=(res.flops / res.model_bytes if res.model_bytes else float("nan")),
               model_gbps=(res.model_bytes / (ms * 1e6) if ms > 0 else float("nan")),
               grid=lc.grid, block_dim=lc.block, threads_per_block=lc.threads_per_block,
               shared_bytes=lc.shared_bytes, registers=lc.registers,
               blocks_per_sm=lc.blocks_per_sm, occupancy=lc.occupancy, launches=lc.launches)
    if check_error is not None:
        row["max_rel_error"] = check_error
    return row


def _error(family, res, inputs):
    out = np.asarray(res.out, dtype=np.float64)
    if family == "matmul":
        A, B = (np.asarray(x, dtype=np.float64) for x in inputs)
        expected = A @ B
    elif family == "reduce":
        expected = np.asarray(inputs[0], dtype=np.float64).sum()
    else:
        expected = np.asarray(inputs[0], np.float64) + np.asarray(inputs[1], np.float64)
    scale = max(float(np.max(np.abs(expected))) if np.size(expected) else 0.0, 1e-30)
    return float(np.max(np.abs(out - expected)) / scale) if np.size(out) else 0.0


def sweep(kernels=None, sizes=None, params=None, *, family=None, backend=None, warmup=None,
          repeat=None, dtype=np.float32, check=False, progress=None, errors="raise",
          skip_missing=False, as_frame=None, seed=0, profile=False, warm_l2=False, **grid):
    """Run every kernel x size x parameter combination; one row per run.

    Args:
        kernels: a name, a KernelSpec, a list of either, or None for every kernel of `family`
            (default 'matmul').
        sizes: an int n (n x n x n for matmul, n elements otherwise), a tuple (M, N, K) for
            matmul, or a list of these.
        params: parameter name -> value, list of values, or "all"; keyword arguments
            (``**grid``, e.g. ``tile=[8, 16, 32]``) add to it.
        backend: as for tm.matmul, and so are warmup, repeat, dtype (defaults per backend)
            and warm_l2 (False: the L2 cache flushed before each timed launch).
        check: add max_rel_error against NumPy in float64.
        errors: "raise" (default), "skip" (drop the run) or "record" (a row with `error` text).
        skip_missing: skip kernels not registered in this build (with a warning) instead of
            raising.
        as_frame: True for a DataFrame, False for a list of dicts, None: a DataFrame where
            pandas is installed.
        profile: count each run's memory traffic on the emulator (tm.matmul's profile=True)
            and add the counters and the H100 prediction to its row
            (tiledmm.profile.row_fields); on cuda the emulator counts the same call, so the
            row holds the prediction beside the measured time.

    >>> rows = tm.sweep("tiled", [48], tile=[8, 16], backend="emu", check=True,
    ...                 as_frame=False, progress=False)
    >>> [(r["kernel"], r["tile"], r["M"], r["backend"]) for r in rows]
    [('tiled', 8, 48, 'emu'), ('tiled', 16, 48, 'emu')]
    >>> all(r["max_rel_error"] < 1e-5 for r in rows)
    True
    """
    grid_params = dict(params or {})
    grid_params.update(grid)
    if errors not in ("raise", "skip", "record"):
        raise ValueError("errors must be 'raise', 'skip' or 'record'")
    names = _kernel_names(kernels, family)
    specs = _registry.specs()
    present = [n for n in names if n in specs]
    fam = family or (specs[present[0]].family if present else "matmul")
    run_cases = cases(names, grid_params, family, skip_missing=skip_missing)
    mixed = {spec.family for spec, _ in run_cases} - {fam}
    if mixed:
        raise ValueError(f"one sweep runs one family; got {fam} and {', '.join(sorted(mixed))}")
    size_list = _sizes(sizes, fam)
    backend = backend or _backend.get_backend()
    rng = np.random.default_rng(seed)

    def make(shape):
        return (rng.random(shape) * 2 - 1).astype(dtype)

    rows = []
    bar = _progress_bar(len(run_cases) * len(size_list), progress)
    try:
        for size in size_list:
            shared_inputs = {}
            for spec, p in run_cases:
                row_of = _families.family_of(spec)   # kernels of one row share their inputs
                if row_of.name not in shared_inputs:
                    shared_inputs[row_of.name] = row_of.inputs(size, make)
                inputs = shared_inputs[row_of.name]
                if bar is not None:
                    bar.set_postfix_str(f"{spec.name} {size}", refresh=False)
                try:
                    res = row_of.call(*inputs, kernel=spec.name, backend=backend, warmup=warmup,
                                      repeat=repeat, profile=profile and backend == "emu",
                                      warm_l2=warm_l2, **p)
                except Exception as exc:
                    if errors == "raise":
                        raise
                    if errors == "record":
                        row = dict(kernel=spec.name, family=fam,
                                   params=" ".join(f"{k}={v}" for k, v in p.items()), **p)
                        row.update(dict(M=size[0], N=size[1], K=size[2]) if fam == "matmul"
                                   else dict(n=int(np.prod(size))))
                        row.update(backend=backend, error=f"{type(exc).__name__}: {exc}")
                        rows.append(row)
                    if bar is not None:
                        bar.update(1)
                    continue
                row = _row(res, spec, p, size, _error(fam, res, inputs) if check else None)
                if profile:
                    row.update(counted_row_fields(res, inputs, p) or {})
                rows.append(row)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    if as_frame is False:
        return rows
    try:
        import pandas as pd
    except ImportError:
        if as_frame:
            raise
        return rows
    return _frame(rows, pd)


def _frame(rows, pd):
    """A DataFrame of the rows in which integer columns stay integers: a parameter that only
    some kernels have (tile, block), sizes and launch counts are pandas' nullable Int64, with
    <NA> where a row has no value, not floats with NaN."""
    df = pd.DataFrame(rows)
    for column in df.columns:
        values = [r[column] for r in rows if r.get(column) is not None]
        if values and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                          for v in values):
            df[column] = pd.array([r.get(column) for r in rows], dtype="Int64")
    return df


class _CallableModule(types.ModuleType):
    """`tm.sweep(...)` calls `sweep`; `tm.sweep.cases` still works."""

    def __call__(self, *args, **kwargs):
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
