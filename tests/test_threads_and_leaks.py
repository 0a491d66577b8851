"""Calls from several Python threads at once (the GIL is released during device work), and no
device memory left behind after many calls or after errors."""
import threading

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.testing import assert_matmul_close
from conftest import random_matrix


def test_concurrent_calls_from_threads(backend):
    results, errors = {}, []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            A, B = random_matrix(rng, (40 + seed, 33)), random_matrix(rng, (33, 29 + seed))
            for kernel in ("naive", "tiled"):
                results[(seed, kernel)] = (tm.matmul(A, B, kernel=kernel, backend=backend).out, A, B)
        except Exception as exc:  # reported below: pytest does not see thread exceptions
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 12
    for C, A, B in results.values():
        assert_matmul_close(C, A, B)


@pytest.mark.device_memory
def test_device_memory_flat_after_many_calls_and_errors(backend, rng):
    A, B = random_matrix(rng, (20, 10)), random_matrix(rng, (10, 30))
    tm.matmul(A, B, backend=backend)
    free_before = tm.mem_info(backend=backend)[0]
    for _ in range(200):
        tm.matmul(A, B, kernel="tiled", tile=8, backend=backend)
        with pytest.raises(ValueError):
            tm.matmul(A, A, backend=backend)
    # The driver may move a page or two of its own on the GPU; 200 leaked buffers would be more.
    slack = 0 if backend == "emu" else 2 << 20
    assert free_before - tm.mem_info(backend=backend)[0] <= slack
