"""A smoke subset of the kernel tests, small enough to run on an aarch64 Python under qemu-user
in CI (.ci/aarch64): every registry kernel that runs on the emulator, on a few awkward shapes,
against NumPy; one tm.compile kernel with a barrier, in the isolated worker. On x86-64 it is a
quick subset of what tests/test_matmul.py, test_reduce.py and test_user_kernels.py cover."""
import os

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.testing import assert_matmul_close, assert_sum_close

CUDA_ONLY = tm._registry.CUDA_ONLY
DEMO = "demo_wrong_block_sync"   # correct only within one block: tested within one
KERNELS = [k for k in tm.kernels() if k.name not in CUDA_ONLY]
# 1x1, shapes that are not multiples of any tile, K larger than M and N
MATMUL_SHAPES = [(1, 1, 1), (33, 17, 9), (20, 70, 45)]
REDUCE_LENGTHS = [1, 1000, 4099]


def _rng(*key):
    return np.random.default_rng([len(str(k)) * 31 + sum(map(ord, str(k))) for k in key])


@pytest.mark.parametrize("spec", [k for k in KERNELS if k.family == "matmul"], ids=lambda k: k.name)
def test_matmul_kernels(spec):
    for dtype in spec.dtypes:
        for m, k, n in MATMUL_SHAPES:
            rng = _rng(spec.name, dtype, m, k, n)
            A = (rng.random((m, k)) * 2 - 1).astype(dtype)
            B = (rng.random((k, n)) * 2 - 1).astype(dtype)
            res = tm.matmul(A, B, kernel=spec.name, backend="emu", warmup=0, repeat=1)
            assert_matmul_close(res.out, A, B, kernel=spec.name)


@pytest.mark.parametrize("spec", [k for k in KERNELS if k.family == "reduce"], ids=lambda k: k.name)
def test_reduce_kernels(spec):
    block = spec.params[0].default
    lengths = [1, 3, block] if spec.name == DEMO else REDUCE_LENGTHS
    for dtype in spec.dtypes:
        for n in lengths:
            x = (_rng(spec.name, dtype, n).random(n) * 2 - 1).astype(dtype)
            res = tm.reduce(x, kernel=spec.name, backend="emu", warmup=0, repeat=1)
            assert_sum_close(res.out, x)


def test_elementwise_kernels():
    rng = _rng("elementwise")
    a, b = rng.random(1001).astype(np.float32), rng.random(1001).astype(np.float32)
    np.testing.assert_array_equal(tm.vec_add(a, b, backend="emu", warmup=0, repeat=1).out, a + b)
    A, B = rng.random((37, 29)), rng.random((37, 29))
    np.testing.assert_array_equal(tm.mat_add(A, B, backend="emu", warmup=0, repeat=1).out, A + B)


# A block-wide tree sum through shared memory: barriers in a loop, an early-exiting tail.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels", "tree256.cu")) as _f:
    BLOCK_SUM = _f.read()


def test_compiled_kernel():
    kernel = tm.compile(BLOCK_SUM, backend="emu")
    x = _rng("compile").random(1000).astype(np.float32)
    out = np.zeros(4, np.float32)
    kernel((4,), (256,), x, out, x.size, backend="emu")
    np.testing.assert_allclose(out, np.add.reduceat(x, [0, 256, 512, 768]), rtol=1e-5)
