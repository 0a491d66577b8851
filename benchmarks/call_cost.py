"""What one call costs beyond its kernel (issue 42, "what one call costs"): `tm.matmul` of device
inputs with warmup=0, repeat=1, timed from outside in a loop that synchronises after each call,
against the kernel time the call itself reports, with the L2 flushed (the default) and kept warm
(warm_l2=True); and the outside loop's speed as a % of cuBLAS's (torch.matmul, also
synchronised after each call; beside it torch's unsynchronised loop, as a user's %timeit sees
it). Inputs are torch CUDA tensors when torch is installed (the case the issue measured), else
tiledmm DeviceArrays.

    python benchmarks/call_cost.py                   # the GPU: 4096^3 and 8192^3, kernel "fast"
    python benchmarks/call_cost.py --sizes 4096 --calls 50 --kernel fast
    python benchmarks/call_cost.py --backend emu     # tiny sizes: checks the script runs
"""
import argparse
import statistics
import time

import numpy as np

import tiledmm as tm
from tiledmm import _backend


def _inputs(n, backend, use_torch):
    rng = np.random.default_rng(0)
    A = (rng.random((n, n), dtype=np.float32) * 2 - 1)
    if use_torch:
        import torch
        t = torch.from_numpy(A).cuda()
        return t, t.clone(), torch.cuda.synchronize
    mod, _ = _backend.resolve(backend)   # the backend module's synchronize(): the whole device
    return tm.to_device(A, backend=backend), tm.to_device(A, backend=backend), mod.synchronize


def _loop(call, sync, calls):
    """Median seconds per call of `call(); sync()`, after two untimed calls."""
    for _ in range(2):
        call()
        sync()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["cuda", "emu"], default=None)
    ap.add_argument("--kernel", default=None, help="matmul kernel (GPU: fast; emu: tiled)")
    ap.add_argument("--sizes", type=int, nargs="*", default=None)
    ap.add_argument("--calls", type=int, default=None, help="timed calls per loop (GPU: 30)")
    args = ap.parse_args(argv)
    backend = args.backend or tm.get_backend()
    gpu = backend == "cuda"
    kernel = args.kernel or ("fast" if gpu else "tiled")
    sizes = args.sizes or ([4096, 8192] if gpu else [32])
    calls = args.calls or (30 if gpu else 3)
    use_torch = False
    if gpu:
        try:
            import torch
            use_torch = torch.cuda.is_available()
        except ImportError:
            pass
    print(f"{tm.device_info(backend)['name']} ({backend}), kernel {kernel!r}, inputs "
          f"{'torch tensors' if use_torch else 'DeviceArrays'}, median of {calls} calls")
    print(f"{'n':>6} {'l2':>7} {'kernel ms':>10} {'call ms':>9} {'cost ms':>8} "
          f"{'cuBLAS ms':>10} {'% cuBLAS':>9} {'torch unsync ms':>16}")
    for n in sizes:
        A, B, sync = _inputs(n, backend, use_torch)
        cublas = unsync = None
        if use_torch:
            import torch
            cublas = _loop(lambda: torch.matmul(A, B), sync, calls)
            torch.matmul(A, B)
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                torch.matmul(A, B)
            sync()
            unsync = (time.perf_counter() - t0) / calls
        for warm in (False, True):
            kernel_ms = []

            def call():
                res = tm.matmul(A, B, kernel=kernel, backend=backend, warmup=0, repeat=1,
                                warm_l2=warm)
                kernel_ms.append(res.timing.kernel_ms)
            per_call = _loop(call, sync, calls)
            k = statistics.median(kernel_ms[2:])
            row = (f"{n:>6} {'warm' if warm else 'flushed':>7} {k:>10.4f} {per_call * 1e3:>9.4f} "
                   f"{per_call * 1e3 - k:>8.4f}")
            if cublas is not None:
                row += (f" {cublas * 1e3:>10.4f} {100 * cublas / per_call:>8.1f}% "
                        f"{unsync * 1e3:>16.4f}")
            print(row)


if __name__ == "__main__":
    main()
