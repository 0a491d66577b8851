"""Benchmarks: kernels x sizes -> rows of time and rate, with the reference measured in the same
run: % of cuBLAS for matmul (where the `cublas` kernel is registered), % of a device-to-device
copy for reductions. Speed targets live here, never in timed tests.

Each row is the median of `repeat` launches after `warmup`, timed with CUDA events on the GPU
(host clock on the emulator), the L2 cache flushed before each timed launch (and before each
timed reference copy) unless warm_l2=True (`--warm-l2`); `header()` says which. Inputs are
random in [-1, 1), never zeros.
"""
import csv
import json
import sys
import time
from statistics import median  # the definition Timing.kernel_ms uses too

import numpy as np

from . import _backend, _core, _registry
from ._families import FAMILIES
from ._device import device_info
from .profile import counted_row_fields

GPU_SIZES = {"matmul": (1024, 2048, 4096, 8192, (5000, 3000, 4000)), "reduce": (1 << 20, 1 << 24, 1 << 28)}
EMU_SIZES = {"matmul": (64, 128), "reduce": (1 << 12, 1 << 16)}


def _runs(name, warmup, repeat, sizes, family):
    """Backend defaults for warmup, repeat and sizes where the caller gave none."""
    warmup, repeat = _warmup_repeat(name, warmup, repeat)
    sizes = sizes or (GPU_SIZES if name == "cuda" else EMU_SIZES)[family]
    for size in sizes:
        dims = size if isinstance(size, tuple) else (size,)
        if not all(_registry.as_int(d) is not None and d >= 1 for d in dims):
            raise ValueError(f"bench sizes must be integers of 1 or more, got {size!r}")
    return warmup, repeat, sizes


def _random(rng, shape):
    """float32 inputs in [-1, 1)."""
    return rng.random(shape, dtype=np.float32) * 2 - 1


def _warmup_repeat(name, warmup, repeat):
    on_gpu = name == "cuda"
    return ((2 if on_gpu else 0) if warmup is None else warmup,
            (10 if on_gpu else 1) if repeat is None else repeat)


def header(backend=None, warmup=None, repeat=None, warm_l2=False):
    """The line above bench's tables: where it ran and how it timed, the L2 cache included."""
    name = backend or _backend.get_backend()
    warmup, repeat = _warmup_repeat(name, warmup, repeat)
    clock = "CUDA events" if name == "cuda" else "CPU time (emulator)"
    l2 = ("L2 kept warm between timed launches (--warm-l2)" if warm_l2 else
          "L2 flushed before each timed launch" if name == "cuda" else
          "L2 flush n/a on the emulator")
    return (f"bench on {name} ({device_info(name)['name']}): median of {repeat} timed "
            f"launch{'es' if repeat != 1 else ''} after {warmup} warm-up, {clock}; {l2}")


def variants(family="matmul", names=None, backend="cuda"):
    """(kernel, params) for every kernel of a family and every value of its first parameter
    (the others keep their defaults). Kernels of _registry.CUDA_ONLY (`cublas`) only on cuda."""
    for spec in _registry.kernels(family):
        if names and spec.name not in names:
            continue
        if spec.name in _registry.CUDA_ONLY and backend != "cuda":
            continue
        if not spec.params:
            yield spec.name, {}
            continue
        p = spec.params[0]  # sweep the first parameter; others keep their defaults
        for value in p.values:
            yield spec.name, {p.name: value}


def bench_matmul(sizes=None, kernels=None, backend=None, warmup=None, repeat=None,
                 check=True, progress=None, profile=False, warm_l2=False):
    """Rows of dicts: kernel, params, M, N, K, ms, tflops, pct_cublas (None without cuBLAS),
    backend, device (its name, as tm.device_info gives it), l2 (Timing.l2: "flushed", "warm"
    with warm_l2=True, or "n/a on the emulator"), max_rel_error (vs float64 NumPy on a sample
    of rows, when check is True). profile=True: also the counted traffic and the H100
    prediction (tiledmm.profile.row_fields), counted by the emulator (on cuda too, beside the
    measured time)."""
    name = backend or _backend.get_backend()
    device = device_info(name)["name"]
    warmup, repeat, sizes = _runs(name, warmup, repeat, sizes, "matmul")
    sizes = [s if isinstance(s, tuple) else (s, s, s) for s in sizes]
    cases = list(variants("matmul", kernels, name))
    has_cublas = "cublas" in _registry.specs() and name == "cuda"
    rng = np.random.default_rng(0)
    matmul_row = FAMILIES["matmul"]
    rows = []
    for M, N, K in sizes:
        A, B = matmul_row.inputs((M, N, K), lambda shape: _random(rng, shape))
        reference = None
        if has_cublas:
            reference = matmul_row.call(A, B, kernel="cublas", backend=name, warmup=warmup,
                                        repeat=repeat, warm_l2=warm_l2)
        check_rows = rng.choice(M, size=min(M, 16), replace=False)
        expected = A[check_rows].astype(np.float64) @ B.astype(np.float64) if check else None
        for kernel, params in cases:
            if progress:
                progress(f"{kernel} {params} {M}x{N}x{K}")
            try:
                res = matmul_row.call(A, B, kernel=kernel, backend=name, warmup=warmup,
                                      repeat=repeat, profile=profile and name == "emu",
                                      warm_l2=warm_l2, **params)
            except RuntimeError as exc:
                # `cutlass` is built only where CUTLASS's headers were found: no row without it
                # (its launcher printed how to build it); any other failure is an error.
                if kernel in _registry.CUDA_ONLY and "NotYetImplemented" in str(exc):
                    continue
                raise
            row = dict(kernel=kernel, params=_fmt_params(params), M=M, N=N, K=K,
                       ms=res.timing.kernel_ms, tflops=res.tflops,
                       pct_cublas=(100 * reference.timing.kernel_ms / res.timing.kernel_ms
                                   if reference else None),
                       backend=name, device=device, l2=res.timing.l2)
            if check:
                got = res.out[check_rows].astype(np.float64)
                row["max_rel_error"] = float(np.max(np.abs(got - expected))
                                             / max(np.max(np.abs(expected)), 1e-30))
            if profile:
                _add_profile(row, res, (A, B), params)
            rows.append(row)
    return rows


def bench_reduce(sizes=None, kernels=None, backend=None, warmup=None, repeat=None,
                 check=True, progress=None, profile=False, warm_l2=False):
    """Rows of dicts: kernel, params, n, ms, gbps (bytes read over time), pct_copy (of a
    device-to-device copy of the same bytes measured in the same run, counting its read plus
    write, with the L2 flushed or kept warm as the kernels are), backend, device, l2,
    rel_error against NumPy's float64 sum. profile=True and warm_l2 as for bench_matmul."""
    name = backend or _backend.get_backend()
    device = device_info(name)["name"]
    warmup, repeat, sizes = _runs(name, warmup, repeat, sizes, "reduce")
    mod = _backend.module(name)
    rng = np.random.default_rng(0)
    reduce_row = FAMILIES["reduce"]
    rows = []
    for n in sizes:
        x, = reduce_row.inputs(n, lambda shape: _random(rng, shape))
        copy_ms = median(mod.copy_time("d2d", x.nbytes, warmup, repeat, not warm_l2))
        copy_gbps = 2 * x.nbytes / (copy_ms * 1e6)
        expected = x.astype(np.float64).sum() if check else None
        for kernel, params in variants("reduce", kernels, name):
            if progress:
                progress(f"{kernel} {params} n={n}")
            res = reduce_row.call(x, kernel=kernel, backend=name, warmup=warmup, repeat=repeat,
                                  profile=profile and name == "emu", warm_l2=warm_l2, **params)
            gbps = x.nbytes / (res.timing.kernel_ms * 1e6)
            row = dict(kernel=kernel, params=_fmt_params(params), n=n, ms=res.timing.kernel_ms,
                       gbps=gbps, copy_gbps=copy_gbps, pct_copy=100 * gbps / copy_gbps,
                       backend=name, device=device, l2=res.timing.l2)
            if check:
                row["rel_error"] = float(abs(float(res.out) - expected)
                                         / max(np.abs(x).sum(dtype=np.float64), 1e-30))
            if profile:
                _add_profile(row, res, (x,), params)
            rows.append(row)
    return rows


def bench_end_to_end(sizes=None, transfer_mib=(64, 256), backend=None, repeat=5,
                     kernel="fast", progress=None):
    """Round trips as a user sees them. Two kinds of rows:

    - transfer: GB/s of NumPy arrays copied to and from the device by a tiledmm call
      (`vec_add`'s timing.h2d_ms / d2h_ms, through the pinned staging ring) beside plain
      cudaMemcpy from and to pinned memory of the same size, measured in the same run;
    - matmul: wall time of a NumPy-in, NumPy-out call (allocation, copies, one launch) beside
      its kernel time and numpy.matmul on this machine's CPU (median of `repeat`)."""
    name = backend or _backend.get_backend()
    device = device_info(name)["name"]
    mod = _backend.module(name)
    rng = np.random.default_rng(0)
    rows = []
    if name == "cuda" and transfer_mib:
        # Warm-up: a process's first copies run while the GPU and its PCIe link leave their idle
        # power states (on the H100 the first 64 MiB calls of a fresh process measured 20-40% of
        # pinned bandwidth, later ones twice that), so both directions move data untimed first.
        for direction in ("h2d_pinned", "d2h_pinned"):
            mod.copy_time(direction, max(transfer_mib) * 2**20, 3, 1)
    for mib in transfer_mib:
        n = mib * 2**20 // 4
        a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        if progress:
            progress(f"transfers {mib} MiB")
        # As a loop in user code runs: one call's result lives until the next call returns (the
        # first call of a size, which allocates the staging ring and the output, is not counted).
        # Arrays used again are pinned in place from their second call on (the call that pins
        # counts, its registration time included in h2d_ms); new arrays each call go through
        # the staging ring: both are reported.
        res = _core.vec_add(a, b, backend=name, warmup=0, repeat=1)
        reused, fresh = [], []
        for _ in range(repeat):
            res = _core.vec_add(a, b, backend=name, warmup=0, repeat=1)
            reused.append(res.timing)
        for _ in range(repeat):
            x, y = a.copy(), b.copy()
            res = _core.vec_add(x, y, backend=name, warmup=0, repeat=1)
            fresh.append(res.timing)
        del res, x, y
        pinned_gbps = {direction: a.nbytes / (median(mod.copy_time(direction + "_pinned", a.nbytes, 1,
                                                                   repeat)) * 1e6)
                       for direction in ("h2d", "d2h")}
        for direction, timings, label in (("h2d", reused, "same arrays"),
                                          ("h2d", fresh, "new arrays"),
                                          ("d2h", reused, "")):
            ms = median(getattr(t, direction + "_ms") for t in timings)
            moved = getattr(timings[0], direction + "_bytes")
            gbps, ref_gbps = moved / (ms * 1e6), pinned_gbps[direction]
            what = f"{direction} numpy {mib} MiB" + (f", {label}" if label else "")
            rows.append(dict(kind="transfer", what=what, ms=ms,
                             gbps=gbps, reference="pinned cudaMemcpy", ref_gbps=ref_gbps,
                             pct=100 * gbps / ref_gbps, backend=name, device=device))
    for n in sizes or ((4096,) if name == "cuda" else (128,)):
        A = rng.random((n, n), dtype=np.float32) * 2 - 1
        B = rng.random((n, n), dtype=np.float32) * 2 - 1
        if progress:
            progress(f"end-to-end {kernel} {n}^3")
        chosen = kernel if kernel in _registry.specs() else "tiled"
        _core.matmul(A, B, kernel=chosen, backend=name, warmup=0, repeat=1)  # load, warm up
        walls, kernels, h2d, d2h = [], [], [], []
        for _ in range(repeat):
            start = time.perf_counter()
            res = _core.matmul(A, B, kernel=chosen, backend=name, warmup=0, repeat=1)
            walls.append((time.perf_counter() - start) * 1e3)
            kernels.append(res.timing.kernel_ms)
            h2d.append(res.timing.h2d_ms)
            d2h.append(res.timing.d2h_ms)
        cpu = []
        for _ in range(max(1, repeat // 2)):
            start = time.perf_counter()
            np.matmul(A, B)
            cpu.append((time.perf_counter() - start) * 1e3)
        wall, cpu_ms = median(walls), median(cpu)
        rows.append(dict(kind="matmul", what=f"{chosen} {n}^3 numpy in/out", ms=wall,
                         kernel_ms=median(kernels),
                         h2d_ms=median(h2d), d2h_ms=median(d2h),
                         wall_ms_each=[round(w, 2) for w in walls],
                         reference="numpy.matmul (CPU)", ref_ms=cpu_ms, speedup=cpu_ms / wall,
                         backend=name, device=device))
    return rows


def format_end_to_end(rows):
    lines = []
    width = max((len(r["what"]) for r in rows), default=0)
    for r in rows:
        if r["kind"] == "transfer":
            lines.append(f"{r['what']:<{width}} {r['gbps']:8.1f} GB/s   {r['reference']} "
                         f"{r['ref_gbps']:.1f} GB/s   {r['pct']:.0f}%")
        else:
            lines.append(f"{r['what']:<{width}} {r['ms']:8.2f} ms end to end (h2d {r['h2d_ms']:.2f} + kernel "
                         f"{r['kernel_ms']:.2f} + d2h {r['d2h_ms']:.2f} ms; each call "
                         f"{r['wall_ms_each']})"
                         f"   {r['reference']} {r['ref_ms']:.1f} ms   {r['speedup']:.1f}x faster")
    return "\n".join(lines)


def _add_profile(row, res, inputs, params):
    row.update(counted_row_fields(res, inputs, params) or {})


def _fmt_params(params):
    return " ".join(f"{k}={v}" for k, v in params.items())


def _figure(value):
    """A rate or percentage with 3 significant digits below 100 (an emulator's 0.0013 GB/s
    reads as that, not as 0), whole numbers above."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


TABLE_COLUMNS = {
    "matmul": [("kernel", "{}".format, "kernel"), ("params", "{}".format, "params"),
               ("size", "{}".format, "size"), ("ms", "{:.3f}".format, "ms"),
               ("TFLOP/s", "{:.3g}".format, "tflops"), ("% cuBLAS", "{:.0f}".format, "pct_cublas"),
               ("max rel err", "{:.1e}".format, "max_rel_error")],
    "reduce": [("kernel", "{}".format, "kernel"), ("params", "{}".format, "params"),
               ("n", "{}".format, "n"), ("ms", "{:.4f}".format, "ms"),
               ("GB/s", _figure, "gbps"), ("% of copy", _figure, "pct_copy"),
               ("rel err", "{:.1e}".format, "rel_error")],
}


# Added to the table when the rows were profiled (bench --profile).
PROFILE_COLUMNS = [("ld req", "{:.3g}".format, "global_load_requests"),
                   ("sect/req", "{:.2f}".format, "global_load_sectors_per_request"),
                   ("smem confl/req", "{:.2f}".format, "shared_load_conflicts_per_request"),
                   ("H100 ms (predicted)", "{:.4f}".format, "predicted_ms"),
                   ("bound by", "{}".format, "predicted_bound")]


def format_table(rows, family="matmul"):
    """A plain-text table of bench rows of one family."""
    headers = TABLE_COLUMNS[family]
    if any("predicted_ms" in r for r in rows):
        headers = headers + PROFILE_COLUMNS
    lines = []
    for r in rows:
        r = dict(r, size=f"{r['M']}x{r['N']}x{r['K']}" if "M" in r else None)
        values = [r.get(key) for _, _, key in headers]
        lines.append([("-" if v is None else fmt(v)) for (_, fmt, _), v in zip(headers, values)])
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h)
              for i, (h, _, _) in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for (h, _, _), w in zip(headers, widths))]
    out += ["  ".join(v.ljust(w) for v, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def save(rows, csv_path=None, json_path=None):
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            fields = list(dict.fromkeys(key for row in rows for key in row))
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)


def progress_to_stderr(message):
    print(f"  {message}", file=sys.stderr, flush=True)
