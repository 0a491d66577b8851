"""One launch each of `fast` (configs 4 and 6, or those given) and cuBLAS at 4096^3 on device
arrays, for ncu to compare them (fast_notes.md v4: scheduler eligibility, issue rate, L2 hit rate;
v5: where warps stall). Run as
    ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \\
        --section SchedulerStats --section LaunchStats --section Occupancy \\
        -k regex:"matmul|gemm" python3 benchmarks/ncu_fast_vs_cublas.py [configs...]
or, for the stall reasons (cycles per issued instruction that warps spend in each state),
    ncu --metrics regex:"smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio" \\
        -k regex:"matmul|gemm" python3 benchmarks/ncu_fast_vs_cublas.py [configs...]"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tiledmm as tm  # noqa: E402 (a checkout built in place)

rng = np.random.default_rng(0)
n = 4096
A = tm.to_device(rng.random((n, n), dtype=np.float32))
B = tm.to_device(rng.random((n, n), dtype=np.float32))
configs = [int(c) for c in sys.argv[1:]] or [4, 6]
for kernel, params in [("fast", {"config": c}) for c in configs] + [("cublas", {})]:
    r = tm.matmul(A, B, kernel=kernel, backend="cuda", warmup=0, repeat=1, **params)
    print(kernel, params, f"{r.timing.kernel_ms:.3f} ms", flush=True)
