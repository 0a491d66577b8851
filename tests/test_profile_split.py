"""Profile mode on kernels split at their barriers (issue 34): the profile build compiles the
registry's reduction files split (setup.py's PROFILE_SPLIT_FILES, unless built with
TILEDMM_PROFILE_SPLIT=0) with the hooks of emu/profile/split_hooks.h, and runs their kernels as
thread loops. Its counts must be the fibers' own, counter by counter: the same build counts each
case twice, once on the thread loops and once on the fibers (TILEDMM_EMU_SPLIT=0, read at each
launch). A build made with TILEDMM_PROFILE_SPLIT=0 fails here: set TILEDMM_PROFILE_SPLIT_OFF_OK=1
to skip instead."""
import ctypes
import faulthandler
import os

import numpy as np
import pytest

from tiledmm import profile as tmprof

try:
    from tiledmm import _emu_profile
except ImportError:   # TILEDMM_NO_PROFILE=1 builds: every test here is skipped
    _emu_profile = None

pytestmark = pytest.mark.skipif(not tmprof.available(),
                                reason="tiledmm._emu_profile not built (TILEDMM_NO_PROFILE=1?)")

TIME_LIMIT_S = 120   # each case counts twice at sizes that take well under a second


def split_stat(name):
    """tm_profile_split_launches: profiled launches the profile build ran as thread loops so
    far; tm_profile_split_uncounted: intervals in which such a launch accessed counted memory
    outside any thread's turn (lost counts)."""
    fn = getattr(ctypes.CDLL(_emu_profile.__file__), name)
    fn.restype = ctypes.c_longlong
    return fn()


def counts(kernel, x, params, split):
    old = os.environ.get("TILEDMM_EMU_SPLIT")
    os.environ["TILEDMM_EMU_SPLIT"] = "1" if split else "0"
    try:
        return tmprof.count("reduce", kernel, x, **params).as_dict()
    finally:
        if old is None:
            del os.environ["TILEDMM_EMU_SPLIT"]
        else:
            os.environ["TILEDMM_EMU_SPLIT"] = old


CASES = [   # odd sizes: partial last blocks; several block sizes (4 to 32 warps)
    ("sequential", {"block": 256}, 70001),
    ("sequential", {"block": 128}, 5003),
    ("interleaved_divergent", {"block": 128}, 9999),
    ("interleaved_divergent", {"block": 1024}, 33333),
    ("interleaved_bank_conflicts", {"block": 1024}, 7777),
    ("first_add", {"block": 512}, 40001),
    ("multi_pass", {"block": 256}, 70001),
    ("shared", {"block": 128}, 12345),
    ("single_block", {"block": 512}, 20000),
    ("per_level", {"block": 256}, 30011),
    ("demo_wrong_block_sync", {"block": 256}, 20001),
    # warp granularity: the last warp's __syncwarp()s (split_hooks.h's TM_SPLIT_WARP_SYNC)
    ("unroll_last_warp", {"block": 256}, 70001),
    ("unroll_last_warp", {"block": 128}, 4099),
    ("multi_element", {"block": 128, "per_thread": 4}, 50001),
]


@pytest.mark.parametrize("kernel,params,n", CASES)
def test_split_counts_are_the_fibers(kernel, params, n):
    faulthandler.dump_traceback_later(TIME_LIMIT_S, exit=True)
    try:
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        before = split_stat("tm_profile_split_launches")
        lost = split_stat("tm_profile_split_uncounted")
        split = counts(kernel, x, params, True)
        assert split_stat("tm_profile_split_uncounted") == lost
        if split_stat("tm_profile_split_launches") == before:
            if os.environ.get("TILEDMM_PROFILE_SPLIT_OFF_OK") == "1":
                pytest.skip(f"{kernel}: the profile build runs it on fibers")
            pytest.fail(f"{kernel}: the profile build ran it on fibers (built with "
                        "TILEDMM_PROFILE_SPLIT=0? rebuild without it)")
        fibers = counts(kernel, x, params, False)
        assert fibers["launches"] > 0
        assert fibers["barriers"] > 0 or kernel == "per_level"   # per_level: no barrier, a return
        assert fibers["shared_load_requests"] + fibers["global_load_requests"] > 0
        differ = {k: (fibers[k], split[k]) for k in fibers
                  if not (fibers[k] == split[k] or (fibers[k] != fibers[k] and split[k] != split[k]))}
        assert not differ, f"{kernel} {params} n={n}: (fibers, thread loops) differ: {differ}"
    finally:
        faulthandler.cancel_dump_traceback_later()
