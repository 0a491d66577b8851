"""The child Nsight Compute starts (tiledmm/profiling/ncu.py, profile_calls): each call of the
spec once on cuda, warmup=0 and repeat=1; writes how many kernels each call launched, so that the
parent can split ncu's rows by call. A module of its own: it runs tiledmm._core, which the
counters' floor (profiling/) lies below.

    python -m tiledmm.profiling.ncu_child SPEC.json
"""
import json
import sys

import numpy as np

from .. import _core


def run_spec(spec_path):
    """Each call of the spec once on cuda; writes how many kernels each launched."""
    with open(spec_path) as f:
        spec = json.load(f)
    launches = []
    for call in spec["calls"]:
        inputs = tuple(np.load(p, allow_pickle=False) for p in call["inputs"])
        # warm_l2: ncu flushes caches before each profiled kernel itself (its default
        # --cache-control all), and only the call's own kernels may reach its list of launches
        res = _core.run_family(call["family"], call["kernel"], inputs, call["params"], "cuda",
                         warmup=0, repeat=1, warm_l2=True)
        launches.append(int(res.launch.launches))
    with open(spec["launches_out"], "w") as f:
        json.dump(launches, f)


if __name__ == "__main__":
    run_spec(sys.argv[1])
