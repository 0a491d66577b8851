"""Profile mode: what the GPU's memory system would count, counted on the CPU emulator.

    res = tm.matmul(A, B, kernel="tiled", tile=16, backend="emu", profile=True)
    res.profile.global_load_requests, res.profile.global_load_sectors_per_request
    res.profile.predict(device="H100")      # predicted GPU time and the bounding resource

`profile=True` runs the call as usual (its output and CPU timing are the normal ones) and then
runs the same launches once more in `tiledmm._emu_profile`, a build of the emulator whose
kernel objects are compiled with g++'s ThreadSanitizer instrumentation. Its hooks
(emu/profile/emu_profile.cpp) see every load and store the kernel source makes, classify it
as global (device memory) or shared, and count with Nsight Compute's definitions::

    counter                                                   Nsight Compute metric
    global_load_requests / global_store_requests              l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum / _st.sum
    global_load_sectors / global_store_sectors                l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / _st.sum
    shared_load_requests / shared_store_requests              smsp__sass_inst_executed_op_shared_ld.sum / _st.sum
    shared_load_bank_conflicts / shared_store_bank_conflicts  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum / _st.sum
    global_ldgsts_requests / global_ldgsts_sectors            l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum / l1tex__t_sectors_... (cp.async)
    divergent_branches                                        smsp__sass_branch_targets_threads_divergent.sum (branches of the source as GCC compiles it)

A warp instruction is the k-th execution of one access of the kernel code (one program
counter; of one kind: global load, global store, shared load, shared store, cp.async) by each
of its 32 lanes between two barriers, so lanes that skip an access are inactive in it; lanes
are threads 32w..32w+31 of the block in x-major order. The counts follow the kernel source:
where nvcc merges a thread's adjacent accesses into one wider instruction (tiled's four
A_tile[ty][k] reads become one LDS.128), ncu counts fewer shared requests than this. See
docs/profile.md.

Above the validation sizes (matmul beyond 256^3) the profiled run samples blocks and scales
the counts; `Profile.sampled` and `Profile.sample_stride` say so.
"""
from dataclasses import fields

import numpy as np

from . import _backend, _core, _families, _registry
from ._device import device_info
from .profiling import counters
from .profiling.counters import (GRID_SMS, VALIDATION_MATMUL_VOLUME, Profile,  # noqa: F401
                                 available, collect, from_ncu, make_profile)
from .profiling.time_model import Prediction  # noqa: F401

__all__ = ["Profile", "Prediction", "count", "collect", "available", "row_fields",
           "counted_row_fields", "lesson_table", "LESSON_SIZES",
           "VALIDATION_MATMUL_VOLUME"]


def count(family, kernel, *inputs, sample=None, **params):
    """Only the profiled run: the counters of `kernel` (of `family`: "matmul", "reduce",
    "elementwise") on NumPy `inputs`, without the normal timed run and without its output
    (with sampling, the profiled run computes only some blocks). Faster than
    tm.matmul(..., profile=True) when only the counts matter (notebooks, sweeps of sizes).

    >>> A = np.ones((64, 64), np.float32)
    >>> p = tm.profile.count("matmul", "tiled", A, A, tile=16)
    >>> p.global_load_requests, p.global_load_sectors_per_request
    (1024, 4.0)
    """
    spec = _registry.lookup(kernel, family)
    values = _registry.param_values(spec, params)
    if family == "matmul":
        problem = (inputs[0].shape[0], inputs[1].shape[1], inputs[0].shape[1])
    else:
        problem = (int(np.size(inputs[0])), 1, 1)
    stride = counters.sampling_stride(family, problem) if sample is None else max(1, int(sample))
    raw, counts = counters.profiled_run(spec.name, inputs, [None] * len(inputs), values, stride)
    itemsize = 4 if raw["out_dtype"] == "float32" else 8
    flops, min_bytes = _core.FAMILY_MODELS[family](*raw["problem"], itemsize)
    result = _core.Result(raw, spec, values, "emu", flops, min_bytes, 0)
    return make_profile(counts, stride, result)


def counted_row_fields(res, inputs, params, device="H100"):
    """row_fields for a Result of a sweep or bench row: its own profile on emu; on a GPU the
    emulator's count of the same call, so the row holds the prediction beside the measured
    time. None for kernels without a source to count (cuBLAS)."""
    if res.kernel in _registry.CUDA_ONLY:
        return None
    counted = res.profile if res.backend == "emu" else None
    if counted is None:
        counted = count(res.family, res.kernel, *inputs, **params)
    return row_fields(counted, device)


def row_fields(p, device="H100"):
    """The counters, sectors and conflicts per request and the predicted time on `device` as a
    flat dict: the columns tm.sweep(..., profile=True) and bench --profile add to a row."""
    d = {f.name: getattr(p, f.name) for f in fields(p)
         if f.name not in ("kernel", "params", "family", "threads_per_block", "shared_bytes",
                           "flops", "min_bytes", "itemsize")}
    d.update(global_load_sectors_per_request=p.global_load_sectors_per_request,
             global_store_sectors_per_request=p.global_store_sectors_per_request,
             shared_load_conflicts_per_request=p.shared_load_conflicts_per_request,
             shared_store_conflicts_per_request=p.shared_store_conflicts_per_request)
    pred = p.predict(device)
    d.update(predicted_ms=pred.ms, predicted_bound=pred.bound, predicted_device=pred.device)
    return d


# The sizes lesson_table counts at: the lesson pairs' sizes, where the grids fill an H100 (at
# 256^3 the larger tiles leave most SMs idle, as they do on the GPU; below 2^24 a reduction is
# mostly the call's fixed overhead). Counting on one core takes 0.2-1.2 s per matmul (sampled),
# 0.4-5 s per reduction without a shared-memory tree and 9-20 s for the tree ladders (in full,
# one fiber per thread: docs/profile.md, benchmarks/profile_speed.py).
LESSON_SIZES = {"matmul": 1024, "reduce": 1 << 24, "elementwise": 1 << 24}
# The lectures' performance lessons as (family, slower kernel, faster kernel) on the H100: what
# the time model must order right (tests/test_profile.py, benchmarks/predicted_vs_measured.py).
LESSON_PAIRS = [
    ("matmul", ("naive", dict(block=16)), ("tiled", dict(tile=16))),
    ("matmul", ("tiled", dict(tile=8)), ("tiled", dict(tile=16))),
    ("matmul", ("tiled", dict(tile=16)), ("tiled", dict(tile=32))),
    ("matmul", ("naive_uncoalesced", dict(block=32)), ("naive", dict(block=32))),
    ("matmul", ("colmajor_b", dict(corner=0)), ("colmajor_b", dict(corner=1))),
    ("matmul", ("tiled", dict(tile=32)), ("coarse", dict(coarsen=4))),
    ("matmul", ("regtile", dict(dims=1)), ("regtile", dict(dims=2))),
    ("matmul", ("regtile", dict(dims=2)), ("fast", dict(config=0))),
    ("reduce", ("interleaved_divergent", dict(block=256)),
     ("interleaved_bank_conflicts", dict(block=256))),
    ("reduce", ("interleaved_bank_conflicts", dict(block=256)), ("sequential", dict(block=256))),
    ("reduce", ("sequential", dict(block=256)), ("first_add", dict(block=256))),
    ("reduce", ("first_add", dict(block=256)), ("unroll_last_warp", dict(block=256))),
    ("reduce", ("unroll_last_warp", dict(block=256)), ("shuffle", dict(block=256))),
    ("reduce", ("per_level", dict(block=256)), ("shuffle", dict(block=256))),
    ("reduce", ("atomic_per_element", dict(block=256)), ("atomic", dict(block=256))),
]


def lesson_table(family, cases, size=None, device=None, measure_size=None, backend=None,
                 seed=0):
    """One row per (kernel, params) of `cases`: the counted traffic and the time predicted for
    `device` from it (None: as Profile.predict chooses, the running GPU's preset, else the
    H100's; each row's `device` says which), beside a measured time. What the notebooks show on every machine:

    - counted on the emulator at `size` (default LESSON_SIZES: 1024^3, 2^24): global load
      requests, sectors per request, L1<->L2 bytes (32 x sectors), shared conflicts per request,
      divergent branches, then `predicted_ms` and `bound`;
    - `measured_ms` on this backend at `measure_size` (default: `size` on cuda, where it is the
      lesson's size; 256^3 or 2^20 on emu, where it is CPU time: `measured_on` says which).

    >>> rows = tm.profile.lesson_table("matmul", [("naive", {"block": 16}), ("tiled", {"tile": 16})],
    ...                                size=256, measure_size=64, backend="emu")
    >>> [r["kernel"] for r in rows], rows[0]["load_sectors_per_request"]
    (['naive', 'tiled'], 2.0)
    >>> rows[0]["predicted_ms"] > rows[1]["predicted_ms"]
    True
    """
    name = backend or _backend.get_backend()
    size = size or LESSON_SIZES[family]
    if measure_size is None:
        measure_size = size if name == "cuda" else min(size, 256 if family == "matmul" else 1 << 20)
    rng = np.random.default_rng(seed)

    def inputs(n, kernel):   # about n elements (matmul: n x n matrices)
        row = _families.family_of(kernel)
        return row.inputs(row.elements_size(n),
                          lambda shape: rng.standard_normal(shape, dtype=np.float32))

    shape = f"{size}³" if family == "matmul" else f"n = {size:,}"
    measured_shape = f"{measure_size}³" if family == "matmul" else f"n = {measure_size:,}"
    rows = []
    for kernel, params in cases:
        p = count(family, kernel, *inputs(size, kernel), **params)
        pred = p.predict(device)
        res = _families.family_of(kernel).call(*inputs(measure_size, kernel), kernel=kernel,
                                                backend=name, **params)
        rows.append(dict(
            kernel=kernel, params=" ".join(f"{k}={v}" for k, v in params.items()),
            counted_at=shape, global_load_requests=p.global_load_requests,
            load_sectors_per_request=p.global_load_sectors_per_request,
            l1_l2_bytes=p.global_bytes,
            shared_conflicts_per_request=p.shared_load_conflicts_per_request,
            divergent_branches=p.divergent_branches,
            predicted_ms=pred.ms, bound=pred.bound, device=pred.device,
            measured_ms=res.timing.kernel_ms,
            measured_on=(f"{_backend_label(name)} at {measured_shape}")))
    return rows


def _backend_label(name):
    if name == "cuda":
        return device_info("cuda")["name"]
    return "CPU time (emulator)"
