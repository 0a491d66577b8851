"""Every kernel test runs on every available backend: `emu` always, `cuda` where a device is
present (those cases carry the `gpu` mark and are skipped elsewhere)."""
import os
import zlib

import numpy as np
import pytest

from tiledmm import _backend

HAVE_GPU = _backend.cuda_device_count() > 0
BACKENDS = [pytest.param("emu", id="emu"),
            pytest.param("cuda", id="cuda", marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA device")])]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name: reproducible, different for every test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def random_matrix(rng, shape, dtype=np.float32):
    """Values in [-1, 1): never all zeros or ones, so unwritten outputs and wrong indices show."""
    return (rng.random(shape) * 2 - 1).astype(dtype)


def pythonpath(*first):
    """PYTHONPATH for a test's child interpreter: `first`, then the caller's own (where packages
    carried to a machine live, libclang on the GPU machine among them)."""
    return os.pathsep.join(p for p in (*first, os.environ.get("PYTHONPATH")) if p)
