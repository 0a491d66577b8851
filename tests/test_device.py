"""device_info and backend selection."""
import numpy as np
import pytest

import tiledmm as tm
from tiledmm import _backend


def test_device_query_fields(backend):
    info = tm.device_info(backend=backend)
    for key in ("name", "compute_capability", "multiprocessors", "shared_mem_per_block",
                "shared_mem_per_multiprocessor", "regs_per_block", "max_threads_per_block",
                "warp_size", "clock_khz", "total_global_mem", "memory_bus_width_bits"):
        assert key in info
    assert info["warp_size"] == 32 and info["max_threads_per_block"] == 1024
    assert info["backend"] == backend
    assert "warp_size:" in str(info)
    if backend == "cuda":
        assert info["peak_fp32_tflops"] > 1 and info["peak_bandwidth_gbs"] > 100
    else:
        assert "emulator" in info["name"].lower()
        assert info["peak_fp32_tflops"] is None and info["peak_bandwidth_gbs"] is None


def test_set_backend_and_env(monkeypatch):
    saved = _backend._chosen
    try:
        assert tm.set_backend("emu") == "emu" and tm.get_backend() == "emu"
        monkeypatch.setenv("TILEDMM_BACKEND", "emu")
        assert tm.set_backend(None) == "emu"
        monkeypatch.setenv("TILEDMM_BACKEND", "tpu")
        _backend._chosen = None
        with pytest.raises(ValueError, match="TILEDMM_BACKEND"):
            tm.get_backend()
    finally:
        _backend._chosen = saved


def test_default_backend_without_device_is_emu(monkeypatch, capsys):
    if _backend.cuda_device_count() > 0:
        pytest.skip("a device is present")
    monkeypatch.delenv("TILEDMM_BACKEND", raising=False)
    monkeypatch.setattr(_backend, "_chosen", None)
    monkeypatch.setattr(_backend, "_notice_shown", False)
    A = np.eye(3, dtype=np.float32)
    assert tm.matmul(A, A).backend == "emu"
    assert "CPU emulator" in capsys.readouterr().err


def test_device_query_prints_cuda_versions_as_versions(backend):
    """CUDA's 13000 is version 13.0, not a count with a thousands separator."""
    info = tm.device_info(backend=backend)
    text = str(info)
    for key in ("driver_version", "runtime_version"):
        value = info[key]
        line = next(line for line in text.splitlines() if line.startswith(key + ":"))
        if value > 0:
            assert line.split()[-1] == f"{value // 1000}.{value % 1000 // 10}", line
        assert "," not in line
    sample = type(info)(driver_version=12040, runtime_version=13000, total_global_mem=81559)
    assert str(sample).split("\n") == ["driver_version:   12.4", "runtime_version:  13.0",
                                       "total_global_mem: 81,559"]
