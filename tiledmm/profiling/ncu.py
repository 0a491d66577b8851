"""profile=True on the cuda backend: the same counters, read from Nsight Compute on the GPU.

Nsight Compute (`ncu`) profiles a process it starts, so the calls to profile are written to a
temporary folder (their inputs as .npy files and a JSON list of calls) and run once more,
each with warmup=0 and repeat=1, by `python -m tiledmm.profiling.ncu_child SPEC` under

    ncu --csv --print-units base --metrics <METRICS> python -m tiledmm.profiling.ncu_child SPEC

That child records how many kernels each call launched (Result.launch.launches); ncu's rows
(one per kernel launch, in launch order) are split by those counts and each metric is summed
over a call's launches into a tiledmm.profile.Profile with `source == "ncu"`. Counters ncu has
no metric for (the time model's L1 estimates) are NaN there.

`profile_calls` runs many calls in one ncu process (the validation in
benchmarks/profile_vs_ncu.py: ncu starts once, not once per kernel). `TILEDMM_NCU` names the
ncu executable when it is not on PATH.
"""
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from .. import _settings, _toolkit

# Profile field <- Nsight Compute metric (summed over the call's launches). A tuple of metrics
# is added up; a metric this GPU does not have reads "n/a" and is left out of the sum (NaN only
# when none of them is there).
COUNTER_METRICS = {
    "global_load_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "global_load_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "global_store_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "global_store_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    # cp.async (LDGSTS). Before Hopper one L1TEX metric; on sm_90 only the SASS-level one
    # covers cp.async.cg (L1 bypassed), and L1TEX counts those requests and sectors under
    # global loads as well (measured on the H100: fast config 6, 512 LDG + 1,024 LDGSTS
    # requests read as 1,536 global load requests; benchmarks/profile_vs_ncu.py allows it).
    "global_ldgsts_requests": ("l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum",
                               "smsp__sass_l1tex_t_requests_pipe_lsu_mem_global_op_ldgsts.sum"),
    "global_ldgsts_sectors": ("l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum",
                              "smsp__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts.sum"),
    "shared_load_requests": "smsp__sass_inst_executed_op_shared_ld.sum",
    "shared_store_requests": "smsp__sass_inst_executed_op_shared_st.sum",
    "shared_load_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "shared_store_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "shared_load_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "shared_store_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "global_atomic_requests": ("l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum",
                               "l1tex__t_requests_pipe_lsu_mem_global_op_red.sum"),
    "divergent_branches": "smsp__sass_branch_targets_threads_divergent.sum",
}
# Read beside the counters: what the hardware did that the emulator's time model predicts
# (benchmarks/profile_vs_ncu.py prints them), and the launch shape.
EXTRA_METRICS = {
    "gpu_time_ns": "gpu__time_duration.sum",
    "dram_bytes": ("dram__bytes_read.sum", "dram__bytes_write.sum"),
    "l2_sectors_from_l1": "lts__t_sectors_srcunit_tex.sum",
    "warp_instructions": "smsp__inst_executed.sum",
    # thread_instructions / warp_instructions: active lanes per issued instruction (32 without
    # divergence). Where nvcc predicates a divergent `if` instead of branching (the reduction
    # ladder's interleaved_divergent), divergent_branches stays 0 and this ratio shows it.
    "thread_instructions": "smsp__thread_inst_executed.sum",
    "ffma_thread_instructions": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "grid_size": "launch__grid_size",
    "block_size": "launch__block_size",
    "registers_per_thread": "launch__registers_per_thread",
}


def _metric_names():
    names = []
    for m in list(COUNTER_METRICS.values()) + list(EXTRA_METRICS.values()):
        names.extend(m if isinstance(m, tuple) else (m,))
    return names


def find_ncu():
    """The ncu executable: TILEDMM_NCU, else `ncu` on PATH, else the CUDA toolkit's; or a
    RuntimeError that says how to get it."""
    given = _settings.get("TILEDMM_NCU")
    path = shutil.which(given) if given else _toolkit.tool("ncu")
    if path:
        return path
    raise RuntimeError(
        "profile=True on the cuda backend reads the counters from Nsight Compute, and `ncu` "
        f"was not found ({'TILEDMM_NCU=' + given if given else 'not on PATH nor in CUDA_HOME/bin'})."
        " Install Nsight Compute (it comes with the CUDA toolkit) or set TILEDMM_NCU to its "
        "path; or count on the emulator: backend='emu', profile=True (docs/profile.md)")


def _host_copy(x):
    """A NumPy array of a call's input (device arrays are copied back: the profiled run is
    another process, which cannot see this one's device memory)."""
    if isinstance(x, np.ndarray):
        return x
    for get in (lambda: x.get(), lambda: x.detach().cpu().numpy()):
        try:
            value = get()
        except Exception:   # not this kind of array; try the next way  # noqa: BLE001
            continue
        if isinstance(value, np.ndarray):
            return value
    return np.asarray(x)


def profile_calls(calls, timeout=600, raw_out=None):
    """Runs `calls` (dicts with family, kernel, inputs: a list of arrays, params: a dict) once
    each on the cuda backend under Nsight Compute, in one ncu process. Returns one dict per call:
    the Profile counters (COUNTER_METRICS), EXTRA_METRICS, `launches` and `blocks`. `raw_out`:
    a path to keep ncu's CSV output in."""
    ncu = find_ncu()
    with tempfile.TemporaryDirectory(prefix="tiledmm-ncu-") as folder:
        spec = []
        for i, call in enumerate(calls):
            files = []
            for j, x in enumerate(call["inputs"]):
                path = os.path.join(folder, f"call{i}_in{j}.npy")
                np.save(path, _host_copy(x), allow_pickle=False)
                files.append(path)
            spec.append({"family": call["family"], "kernel": call["kernel"], "inputs": files,
                         "params": dict(call.get("params") or {})})
        spec_path = os.path.join(folder, "calls.json")
        launches_path = os.path.join(folder, "launches.json")
        with open(spec_path, "w") as f:
            json.dump({"calls": spec, "launches_out": launches_path}, f)
        command = [ncu, "--csv", "--print-units", "base", "--metrics", ",".join(_metric_names()),
                   sys.executable, "-m", "tiledmm.profiling.ncu_child", spec_path]
        env = dict(os.environ, TILEDMM_BACKEND="cuda")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  env=env)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"Nsight Compute did not finish {len(calls)} call(s) within "
                               f"{timeout} s") from None
        if done.returncode != 0 or not os.path.exists(launches_path):
            raise RuntimeError(f"Nsight Compute failed (exit {done.returncode}): "
                               + _tail(done.stderr or done.stdout))
        with open(launches_path) as f:
            launches = json.load(f)
    if raw_out:
        with open(raw_out, "w") as f:
            f.write(done.stdout)
    rows = _parse_csv(done.stdout)
    if len(rows) != sum(launches):
        raise RuntimeError(f"Nsight Compute reported {len(rows)} kernel launches, the calls made "
                           f"{sum(launches)}: " + _tail(done.stdout))
    results, start = [], 0
    for n in launches:
        results.append(_sum_launches(rows[start:start + n]))
        start += n
    return results


def _tail(text, lines=15):
    return "\n".join(text.strip().splitlines()[-lines:])


def _parse_csv(text):
    """ncu --csv: one row per (kernel launch, metric); returns one {metric: value} per launch in
    launch order. Lines before the CSV header (ncu's own "==PROF==" messages and the child's
    output) are skipped."""
    lines = text.splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if head is None:
        return []
    launches = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[head:]))):
        if not row.get("ID", "").isdigit():
            continue
        value = row["Metric Value"].replace(",", "")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        launches.setdefault(int(row["ID"]), {})[row["Metric Name"]] = number
    return [launches[k] for k in sorted(launches)]


def _sum_launches(rows):
    def total(metric):
        names = metric if isinstance(metric, tuple) else (metric,)
        values = [r.get(m, math.nan) for r in rows for m in names]
        present = [v for v in values if not math.isnan(v)]
        return sum(present) if present else math.nan
    out = {name: total(m) for name, m in COUNTER_METRICS.items()}
    out.update({name: total(m) for name, m in EXTRA_METRICS.items()
                if name not in ("block_size", "registers_per_thread")})
    out["block_size"] = rows[0].get("launch__block_size", math.nan) if rows else math.nan
    out["registers_per_thread"] = (max(r.get("launch__registers_per_thread", 0) for r in rows)
                                   if rows else math.nan)
    out["launches"] = len(rows)
    out["blocks"] = out["grid_size"]
    return out
