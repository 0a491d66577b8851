"""tm.plot: the course's plots from sweep rows (a DataFrame or a list of dicts) or Results.

    df = tm.sweep("tiled", [512, 1024, 2048], tile="all")
    tm.plot.tile_sizes(df)                      # FLOP/s against tile, one line per size
    tm.plot.ladder(tm.sweep([...], [4096]))     # the optimisation ladder, % of cuBLAS
    tm.plot.roofline(df, device="H100")         # roofs and the measured points
    tm.plot.reductions(tm.sweep(tm.kernels("reduce"), [1 << 24]))   # GB/s per variant

matplotlib is imported when a function is called, not with tiledmm. Every function takes
`ax=` (draws there) and returns the Axes it drew on (`ax.figure` is the Figure). Rates on the
emulator are CPU rates: titles and axis labels say so. FLOP rates are drawn in the unit that
suits the data (TFLOP/s on a GPU, GFLOP/s or MFLOP/s on the emulator). `tm.plot.as_rows(data)`
gives the rows every function reads, as a list of dicts.
"""
import math

from . import model

__all__ = ["tile_sizes", "ladder", "roofline", "reductions", "measured_vs_predicted", "lesson",
           "traffic", "as_rows"]

# FLOP-rate units, largest first, each with its size in GFLOP/s.
FLOP_RATE_UNITS = (("TFLOP/s", 1e3), ("GFLOP/s", 1.0), ("MFLOP/s", 1e-3))


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("tm.plot needs matplotlib: pip install matplotlib "
                          "(or pip install 'tiledmm[notebooks]')") from exc
    return plt


def as_rows(data):
    """The rows the plots read, as a list of dicts, from a DataFrame (tm.sweep's), a list of
    dicts, or a list of Results (each becomes kernel, family, params and each parameter, the
    sizes M, N, K or n, gflops, tflops, gbps, flops, model_bytes, intensity, backend, ms).
    Missing values of a DataFrame's nullable columns come back as None.

    >>> res = tm.matmul(np.ones((4, 3), np.float32), np.ones((3, 2), np.float32), backend="emu")
    >>> [(r["kernel"], r["M"], r["N"], r["K"], r["tile"]) for r in tm.plot.as_rows([res])]
    [('tiled', 4, 2, 3, 16)]
    """
    if data is None:
        return []
    if hasattr(data, "to_dict") and hasattr(data, "columns"):
        # pandas' missing value (pd.NA, in Int64 columns) is not a number: None says "absent"
        return [{k: (None if v is _pandas_na() else v) for k, v in r.items()}
                for r in data.to_dict("records")]
    rows = []
    for item in data:
        if isinstance(item, dict):
            rows.append(item)
        else:  # a Result
            r = item
            rows.append(dict(kernel=r.kernel, family=r.family,
                             params=" ".join(f"{k}={v}" for k, v in r.params.items()),
                             **r.params, gflops=r.gflops, tflops=r.tflops, gbps=r.gbps,
                             flops=r.flops, model_bytes=r.model_bytes,
                             intensity=(r.flops / r.model_bytes if r.model_bytes else math.nan),
                             backend=r.backend, ms=r.timing.kernel_ms,
                             **(_matmul_dims(r) if r.family == "matmul"
                                else {"n": int(r.out.size) if r.family != "reduce" else None})))
    return rows


def _pandas_na():
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - depends on the environment
        return object()   # matches nothing
    return pd.NA


def _flop_rates(rows, y, unit=None):
    """(values, unit label) for a FLOP-rate column y ('tflops' or 'gflops'): converted to
    `unit`, or to the largest unit of FLOP_RATE_UNITS in which the fastest row reads 1 or
    more (0.000075 TFLOP/s reads as 75 MFLOP/s)."""
    gflops = [r[y] * (1e3 if y == "tflops" else 1) for r in rows]
    sizes = dict(FLOP_RATE_UNITS)
    if unit is None:
        fastest = max((g for g in gflops if g is not None and not _isnan(g)), default=0.0)
        unit = next((u for u, size in FLOP_RATE_UNITS if fastest >= size), FLOP_RATE_UNITS[-1][0])
    elif unit not in sizes:
        raise ValueError(f"unit must be one of {', '.join(sizes)}, got {unit!r}")
    return [g / sizes[unit] for g in gflops], unit


def _matmul_dims(r):
    M, N = r.out.shape
    K = int(round(r.flops / (2 * M * N))) if M and N else 0
    return {"M": M, "N": N, "K": K}


def _axes(ax, figsize=(6.4, 4.2)):
    if ax is not None:
        return ax
    plt = _pyplot()
    # constrained layout keeps a legend placed outside the axes (roofline) inside the figure
    _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def _emu_note(rows):
    return any(r.get("backend") == "emu" for r in rows)


def _label(row):
    params = row.get("params") or ""
    return f"{row['kernel']} {params}".strip()


def _size_label(row):
    if row.get("M") is not None and not _isnan(row.get("M")):
        M, N, K = (int(row[k]) for k in ("M", "N", "K"))
        return f"{M}³" if M == N == K else f"{M}×{N}×{K}"
    return f"n={int(row['n']):,}"


def _isnan(v):
    return isinstance(v, float) and math.isnan(v)


def tile_sizes(data, ax=None, kernel="tiled", x="tile", y="tflops", title=None, unit=None):
    """The tile-size effect: `y` against tile edge, one line per matrix size, for `kernel`
    (default 'tiled'; None: every row). One Line2D per size. A FLOP rate (y='tflops' or
    'gflops') is drawn in `unit` ('TFLOP/s', 'GFLOP/s', 'MFLOP/s'), by default the one that
    suits the data. ValueError when the data has no row of `kernel` with an `x` value.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> rows = tm.sweep("tiled", [32, 64], tile="all", backend="emu", as_frame=False,
    ...                 progress=False)
    >>> ax = tm.plot.tile_sizes(rows)
    >>> len(ax.lines)
    2
    """
    data_rows = as_rows(data)
    chosen = [r for r in data_rows if kernel is None or r.get("kernel") == kernel]
    chosen = [r for r in chosen if r.get(x) is not None and not _isnan(r.get(x))]
    if not chosen:
        present = ", ".join(dict.fromkeys(str(r.get("kernel")) for r in data_rows)) or "none"
        raise ValueError(f"tm.plot.tile_sizes: no row of kernel {kernel!r} with a {x!r} value "
                         f"to plot (kernels in the data: {present}); sweep it, e.g. "
                         f"tm.sweep({kernel or 'tiled'!r}, sizes, {x}='all'), or pass kernel=")
    if y in ("tflops", "gflops"):
        values, label_unit = _flop_rates(chosen, y, unit)
    else:
        values, label_unit = [r[y] for r in chosen], {"gbps": "GB/s", "ms": "ms"}.get(y, y)
    ax = _axes(ax)
    by_size = {}
    for r, v in zip(chosen, values):
        by_size.setdefault(_size_label(r), []).append((r[x], v))
    for label, points in by_size.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ticks = sorted({r[x] for r in chosen})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(int(t)) for t in ticks])
    ax.set_xlabel(f"{x} (edge of the square tile)" if x == "tile" else x)
    ax.set_ylabel(label_unit + (" (emulator: CPU time)" if _emu_note(chosen) else ""))
    ax.set_title(title or f"{kernel or 'kernels'}: {label_unit} against {x}, per matrix size")
    ax.grid(True, alpha=0.3)
    ax.legend(title="size")
    return ax


def ladder(data, ax=None, reference="cublas", size=None, y="tflops", title=None, unit=None):
    """The optimisation ladder: one bar per kernel variant at one size (default the largest),
    in the order given, with % of `reference` (cuBLAS) written on each bar where a reference
    row exists at that size. One bar per variant (ax.patches). A FLOP rate is drawn in `unit`,
    by default the one that suits the data, as in tile_sizes."""
    rows = [r for r in as_rows(data) if not r.get("error")]
    ax = _axes(ax, figsize=(7.5, 4.2))
    if not rows:
        ax.set_title(title or "optimisation ladder (no rows)")
        return ax
    sizes = [_size_label(r) for r in rows]
    if size is None:
        def volume(r):
            return (r.get("M") or 0) * (r.get("N") or 0) * (r.get("K") or 0) or (r.get("n") or 0)
        chosen = _size_label(max(rows, key=volume))
    else:
        chosen = size if isinstance(size, str) else _size_label(
            dict(M=size, N=size, K=size) if isinstance(size, int) else
            dict(M=size[0], N=size[1], K=size[2]))
    rows = [r for r, s in zip(rows, sizes) if s == chosen]
    ref = next((r for r in rows if r["kernel"] == reference), None)
    labels = [_label(r) for r in rows]
    if y in ("tflops", "gflops"):
        values, unit_label = _flop_rates(rows, y, unit)
    else:
        values, unit_label = [r[y] for r in rows], y
    colors = ["#888888" if r["kernel"] == reference else "C0" for r in rows]
    bars = ax.bar(range(len(rows)), values, color=colors)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=35, ha="right")
    if ref is not None and ref[y]:
        ref_value = values[rows.index(ref)]
        for bar, v in zip(bars, values):
            ax.annotate(f"{100 * v / ref_value:.0f}%", (bar.get_x() + bar.get_width() / 2, v),
                        ha="center", va="bottom", fontsize=8)
    ax.set_ylabel(unit_label + (" (emulator: CPU time)" if _emu_note(rows) else ""))
    note = f", % of {reference}" if ref is not None else ""
    ax.set_title(title or f"optimisation ladder at {chosen}{note}")
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def roofline(data=None, peak_gflops=None, bandwidth_gbs=None, device=None, ax=None,
             label_points=True, title=None, extra_roofs=()):
    """A roofline: GFLOP/s against arithmetic intensity (FLOP per modelled byte), log-log.
    The roof is one line: min(peak, intensity x bandwidth) (the bandwidth slope alone without
    a peak). `extra_roofs`: (label, bandwidth_gbs) pairs drawn as dashed lines (e.g. the
    lecture's 150 GB/s). Measured points: one scatter per kernel variant.
    The roof comes from `device` (a preset name or None for the current device), or from
    peak_gflops / bandwidth_gbs given explicitly (they win)."""
    rows = [r for r in as_rows(data) if not r.get("error")]
    if device is not None or (bandwidth_gbs is None and peak_gflops is None):
        try:
            peak, bw = model.device_peaks(device, rows[0].get("backend") if rows and device is None
                                          else None)
        except Exception:
            peak, bw = None, None
        peak_gflops = peak if peak_gflops is None else peak_gflops
        bandwidth_gbs = bw if bandwidth_gbs is None else bandwidth_gbs
    ax = _axes(ax)
    xs = [r["intensity"] for r in rows if r.get("intensity")]
    lo = min(xs + [0.1]) / 2
    hi = max(xs + [64.0]) * 2
    if peak_gflops and bandwidth_gbs:
        hi = max(hi, 4 * model.ridge_point(peak_gflops, bandwidth_gbs))
    grid = [lo * (hi / lo) ** (i / 199) for i in range(200)]
    if bandwidth_gbs:
        ax.plot(grid, [model.roofline(a, peak_gflops, bandwidth_gbs) for a in grid], color="k",
                lw=2, label=(f"roof: {bandwidth_gbs:,.3g} GB/s"
                             + (f", {peak_gflops:,.4g} GFLOP/s" if peak_gflops else "")))
    for label, bw in extra_roofs:
        ax.plot(grid, [a * bw for a in grid], ls="--", lw=1, label=label)
    groups = {}
    for r in rows:
        groups.setdefault(_label(r), []).append(r)
    for label, group in groups.items():
        pts = [(r["intensity"], r["gflops"]) for r in group
               if r.get("intensity") and r.get("gflops") and not _isnan(r["gflops"])]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=label, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per modelled byte of global traffic)")
    ax.set_ylabel("GFLOP/s" + (" (emulator: CPU time)" if _emu_note(rows) else ""))
    ax.set_title(title or "roofline: bound = min(peak, intensity × bandwidth)")
    ax.grid(True, which="both", alpha=0.2)
    # Outside the axes, on the right: measured points can lie anywhere under the roof, so any
    # corner inside may cover them (notebook 06's lower right did).
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return ax


def reductions(data, ax=None, y="gbps", copy_gbps=None, title=None):
    """Reduction bandwidth per variant: one bar group per kernel variant, one bar per input
    size (ax.patches: variants x sizes). `copy_gbps`, if given, is drawn as a horizontal line
    (a device-to-device copy's rate, the ceiling a sum can approach)."""
    rows = [r for r in as_rows(data) if not r.get("error")]
    ax = _axes(ax, figsize=(8, 4.2))
    labels = list(dict.fromkeys(_label(r) for r in rows))
    sizes = list(dict.fromkeys(r.get("n") for r in rows))
    width = 0.8 / max(len(sizes), 1)
    for j, n in enumerate(sizes):
        values = []
        for label in labels:
            match = [r[y] for r in rows if _label(r) == label and r.get("n") == n]
            values.append(match[0] if match else 0.0)
        ax.bar([i + (j - (len(sizes) - 1) / 2) * width for i in range(len(labels))], values,
               width=width, label=f"n = {int(n):,}" if n is not None else None)
    if copy_gbps:
        ax.axhline(copy_gbps, color="k", ls="--", lw=1, label=f"copy {copy_gbps:,.0f} GB/s")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=8)
    unit = {"gbps": "GB/s read", "ms": "ms"}.get(y, y)
    ax.set_ylabel(unit + (" (emulator: CPU time)" if _emu_note(rows) else ""))
    ax.set_title(title or "reductions step by step: bandwidth per variant")
    ax.grid(True, axis="y", alpha=0.3)
    if sizes:
        ax.legend(fontsize=8)
    return ax


def measured_vs_predicted(rows, ax=None, measured="measured_gflops", predicted="bound_gflops",
                          title=None):
    """Two bars per kernel: the model's bound and the measured rate (rows from
    tm.model.compare/compare_table, or any rows with those two columns), log scale."""
    rows = as_rows(rows)
    ax = _axes(ax, figsize=(7, 4.2))
    labels = [_label(r) for r in rows]
    idx = range(len(rows))
    ax.bar([i - 0.2 for i in idx], [r.get(predicted) or 0 for r in rows], width=0.4,
           label="model bound", color="#bbbbbb")
    ax.bar([i + 0.2 for i in idx], [r.get(measured) or 0 for r in rows], width=0.4,
           label="measured", color="C0")
    ax.set_xticks(list(idx))
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("GFLOP/s" + (" (emulator: CPU time)" if _emu_note(rows) else ""))
    ax.set_title(title or "predicted bound beside measured")
    ax.legend()
    return ax


def lesson(rows, ax=None, title=None):
    """tm.profile.lesson_table's rows: per kernel, the time predicted for the GPU from counted
    traffic (bars), beside the measured time. Measured on a GPU, it is a second bar on the same
    axis; measured on the emulator it is CPU time, drawn as points on a second axis, because it
    is not the lesson (on a CPU naive beats tiled). Returns the Axes of the prediction."""
    rows = as_rows(rows)
    ax = _axes(ax, figsize=(8, 4.2))
    labels = [_label(r) for r in rows]
    x = list(range(len(rows)))
    device = rows[0].get("device", "H100") if rows else "H100"
    counted_at = rows[0].get("counted_at", "") if rows else ""
    measured_on = rows[0].get("measured_on", "") if rows else ""
    on_gpu = bool(rows) and not measured_on.startswith("CPU")
    width = 0.4 if on_gpu else 0.6
    ax.bar([i - (width / 2 if on_gpu else 0) for i in x], [r["predicted_ms"] for r in rows],
           width=width, color="C0",
           label=f"predicted for {device} from counted traffic ({counted_at})")
    if on_gpu:
        ax.bar([i + width / 2 for i in x], [r["measured_ms"] for r in rows], width=width,
               color="C1", label=f"measured: {measured_on}")
    else:
        cpu = ax.twinx()
        cpu.plot(x, [r["measured_ms"] for r in rows], "o", color="C3",
                 label=f"{measured_on} (not the lesson)")
        cpu.set_ylabel("CPU ms (emulator)", color="C3")
        cpu.tick_params(axis="y", colors="C3")
        cpu.legend(loc="upper right", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{device} ms (predicted)" + (" / measured" if on_gpu else ""))
    ax.set_title(title or f"predicted for {device} from counted traffic")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return ax


def traffic(results, ax=None, title=None):
    """Per kernel, global traffic three ways: the lecture's model (res.model_bytes), what a
    profiled call counted (profile=True: the bytes of the 32-byte sectors its warps touched,
    i.e. L1<->L2 traffic) and, for calls profiled by Nsight Compute on a GPU, the DRAM bytes it
    measured; the compulsory bytes (inputs once, output once) as a dashed line. `results`:
    Results (made with profile=True) or tm.model.compare rows. Returns the Axes."""
    rows = [r if isinstance(r, dict) else model.compare(r, bandwidth_gbs=1.0) for r in results]
    ax = _axes(ax, figsize=(8, 4.2))
    series = [("model_bytes", "lecture model (loads + stores)"),
              ("counted_sector_bytes", "counted: 32-byte sectors touched")]
    if any(not _isnan(r.get("measured_dram_bytes", math.nan)) for r in rows):
        series.append(("measured_dram_bytes", "measured by ncu: DRAM bytes"))
    width = 0.8 / len(series)
    for j, (key, label) in enumerate(series):
        ax.bar([i + (j - (len(series) - 1) / 2) * width for i in range(len(rows))],
               [r.get(key, math.nan) / 1e6 for r in rows], width=width, label=label)
    compulsory = [r.get("compulsory_bytes") for r in rows if r.get("compulsory_bytes")]
    if compulsory:
        ax.axhline(max(compulsory) / 1e6, color="k", ls="--", lw=1,
                   label="compulsory (inputs once, output once)")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([_label(r) for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("MB of global traffic")
    ax.set_title(title or "global traffic: modelled, counted and measured")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
