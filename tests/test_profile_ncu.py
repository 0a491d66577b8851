"""profile=True on the cuda backend (tiledmm.profiling.ncu): the counters from Nsight Compute. Without a
GPU: the error when ncu is missing, and the reading of ncu's CSV (launches split per call and
summed). On a GPU with ncu: the hardware's counts equal the emulator's for kernels whose compiled
code keeps the source's accesses (the whole comparison: benchmarks/profile_vs_ncu.py)."""
import math
import shutil

import numpy as np
import pytest

import tiledmm as tm
from tiledmm import _backend
from tiledmm.profiling import ncu

HAVE_GPU = _backend.cuda_device_count() > 0


def test_missing_ncu_is_a_clear_error_before_anything_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEDMM_NCU", str(tmp_path / "no-such-ncu"))
    with pytest.raises(RuntimeError, match="Nsight Compute.*TILEDMM_NCU=.*backend='emu'"):
        ncu.find_ncu()


def test_missing_ncu_refuses_a_cuda_profile_call(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEDMM_NCU", str(tmp_path / "no-such-ncu"))
    x = np.arange(64, dtype=np.float32)
    # Without the cuda backend built, the backend's own error comes first; with it, ncu's.
    with pytest.raises(RuntimeError, match="Nsight Compute|not built|no CUDA device"):
        tm.vec_add(x, x, block=128, backend="cuda", profile=True)


# What ncu --csv --print-units base prints (its own ==PROF== lines and the child's output
# come first): three launches; the last also reads one metric this GPU does not have (n/a).
CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "reduce_level_kernel" - 0: 0%....50%....100% - 3 passes
some output of the child
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","reduce_level_kernel","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","","32,768"
"0","4242","python3.12","127.0.0.1","reduce_level_kernel","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","launch__grid_size","","4,096"
"1","4242","python3.12","127.0.0.1","reduce_level_kernel","1","7","(256, 1, 1)","(16, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","","128"
"1","4242","python3.12","127.0.0.1","reduce_level_kernel","1","7","(256, 1, 1)","(16, 1, 1)","0","9.0","Command line profiler metrics","launch__grid_size","","16"
"2","4242","python3.12","127.0.0.1","vec_add_kernel","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","","16"
"2","4242","python3.12","127.0.0.1","vec_add_kernel","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","launch__grid_size","","8"
"2","4242","python3.12","127.0.0.1","vec_add_kernel","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum","","n/a"
"2","4242","python3.12","127.0.0.1","vec_add_kernel","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","smsp__sass_l1tex_t_requests_pipe_lsu_mem_global_op_ldgsts.sum","","64"
'''


def test_csv_rows_are_launches_in_order_and_sum_per_call():
    rows = ncu._parse_csv(CSV)
    assert [r["launch__grid_size"] for r in rows] == [4096, 16, 8]
    first_call, second_call = ncu._sum_launches(rows[:2]), ncu._sum_launches(rows[2:])
    assert first_call["global_load_requests"] == 32768 + 128
    assert (first_call["launches"], first_call["blocks"]) == (2, 4112)
    assert (second_call["global_load_requests"], second_call["blocks"]) == (16, 8)
    # One of a counter's alternative metrics is "n/a" on this GPU: the others still count.
    assert second_call["global_ldgsts_requests"] == 64
    # Metrics ncu did not print are NaN, not zero: a missing metric must not look like a count.
    assert math.isnan(first_call["shared_load_bank_conflicts"])


def test_ncu_profile_cannot_predict():
    counts = dict(ncu._sum_launches(ncu._parse_csv(CSV)[2:]))
    x = np.arange(1024, dtype=np.float32)
    res = tm.vec_add(x, x, block=128, backend="emu")
    p = tm.profile.from_ncu(counts, res)
    assert p.source == "ncu" and p.global_load_requests == 16 and p.launches == 1
    with pytest.raises(ValueError, match="measured by ncu.*tm.profile.count"):
        p.predict("H100")


needs_ncu = pytest.mark.skipif(not HAVE_GPU or shutil.which("ncu") is None,
                               reason="needs a CUDA device and Nsight Compute (ncu)")
# ncu replays kernels: with other tests' processes on the GPU it failed once on the H200
# ("Unknown Error on device 0"); gpu_run.sh runs these in its serial pass
pytestmark = pytest.mark.gpu_alone


@pytest.mark.gpu
@needs_ncu
@pytest.mark.parametrize("family,kernel,params", [
    ("matmul", "naive", {"block": 16}),
    ("matmul", "naive_uncoalesced", {"block": 16}),
    ("matmul", "tiled", {"tile": 16}),
    ("reduce", "sequential", {"block": 256}),
    ("elementwise", "vec_add", {"block": 256}),
])
def test_global_counts_equal_the_emulators(family, kernel, params):
    rng = np.random.default_rng(7)
    if family == "matmul":
        inputs = [rng.standard_normal((256, 256), dtype=np.float32) for _ in range(2)]
        run = lambda **kw: tm.matmul(*inputs, kernel=kernel, **params, **kw)  # noqa: E731
    elif family == "reduce":
        inputs = [rng.standard_normal(1 << 20, dtype=np.float32)]
        run = lambda **kw: tm.reduce(*inputs, kernel=kernel, **params, **kw)  # noqa: E731
    else:
        inputs = [rng.standard_normal(1 << 20, dtype=np.float32) for _ in range(2)]
        run = lambda **kw: tm.vec_add(*inputs, **params, **kw)  # noqa: E731
    hw = run(backend="cuda", profile=True)
    emu = tm.profile.count(family, kernel, *inputs, sample=1, **params)
    assert hw.profile.source == "ncu" and hw.profile.hardware["gpu_time_ns"] > 0
    for counter in ("global_load_requests", "global_load_sectors", "global_store_requests",
                    "global_store_sectors"):
        assert getattr(hw.profile, counter) == getattr(emu, counter), counter
