"""The sandbox, second round (issue 45): the caller trusts nothing the student touched, and
grades cannot be bought. Every subprocess here runs under a time limit."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.confine import isolation, sandbox

HERE = Path(__file__).resolve().parent
ROOT = str(HERE.parent)


def _env(**extra):
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p), **extra)


def _attacks(tmp_path, names, timeout=300):
    """tests/attacks/attacks.py on `names` in a process of its own: (returncode, results)."""
    sys.path.insert(0, str(HERE / "attacks"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"names": names, "fill": {"OUTSIDE": str(tmp_path / "out")}}))
    proc = subprocess.run([sys.executable, str(HERE / "attacks" / "attacks.py"), str(config)],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env=_env())
    out = proc.stdout.rsplit("@@attacks@@", 1)
    return proc, (json.loads(out[1]) if len(out) == 2 else None)


# -- 1. shared memory is sealed; scratch folders are swept ------------------------------------

def test_the_arguments_file_can_be_neither_shrunk_nor_grown():
    f = isolation.ArgumentFile()
    try:
        f.reserve(1000)
        size = os.fstat(f.fd).st_size
        for new in (0, size // 2, size * 4):
            with pytest.raises(PermissionError):
                os.ftruncate(f.fd, new)
        assert os.fstat(f.fd).st_size == size
    finally:
        f.release()


def test_a_kernel_truncating_the_arguments_file_does_not_kill_the_caller(tmp_path):
    proc, out = _attacks(tmp_path, ["truncate_arguments", "grow_arguments"])
    assert proc.returncode == 0 and out is not None, (proc.returncode, proc.stderr[-2000:])
    assert "LEAK:" not in proc.stdout
    for name in ("truncate_arguments", "grow_arguments"):
        assert out[name]["correct"], (name, out[name])


def test_scratch_folders_of_a_gone_owner_are_swept_and_a_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)
    gone = tmp_path / f"tiledmm-worker-{dead.pid}.12345-abc"
    gone.mkdir()
    (gone / "big").write_bytes(b"x" * 1000)
    mine = Path(sandbox.scratch_folder("worker"))
    try:
        live = tmp_path / mine.name
        live.mkdir()
        other = tmp_path / "tiledmm-cache-1000"
        other.mkdir()
        sandbox.sweep_scratch(str(tmp_path))
        assert not gone.exists()
        assert live.exists() and other.exists()
        assert mine.name.startswith(f"tiledmm-worker-{os.getpid()}.")
    finally:
        os.rmdir(mine)


def test_the_worker_scratch_folder_names_its_owner():
    k = tm.compile("__global__ void f(float *x) { x[threadIdx.x] += 1; }", backend="emu")
    x = np.zeros(4, np.float32)
    k(1, 4, x, backend="emu", timeout=30)
    assert x.tolist() == [1, 1, 1, 1]
    scratch = isolation.worker("emu").scratch
    assert os.path.basename(scratch).startswith(f"tiledmm-worker-{os.getpid()}.")
