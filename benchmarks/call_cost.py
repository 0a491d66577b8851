"""What one call costs beyond its kernel (issue 42): tm.matmul on device inputs (torch tensors),
timed from outside in a loop that synchronises after each call, against the kernel time tiledmm
itself reports, with the L2 flush (the default) and with warm_l2=True; cuBLAS through torch in the
same kind of loop, and torch's own unsynchronised loop beside it.

    python3 benchmarks/call_cost.py [--sizes 4096 8192] [--calls 20] [--kernel fast]

Prints one table: per size and mode, the kernel's median (CUDA events, tiledmm's timing), the
median per call seen from outside (time.perf_counter around call + synchronise), their difference
(what the call costs beyond the kernel), and the outside-loop TFLOP/s as % of torch.matmul's
(cuBLAS, TF32 off) timed in the same loop. GPU only.
"""
import argparse
import statistics
import time

import tiledmm as tm


def outside_ms(fn, sync, calls):
    """Median wall time of fn(); sync() after each call, in milliseconds."""
    fn()
    sync()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--kernel", default="fast")
    args = ap.parse_args(argv)
    import torch   # the GPU machine's; a device-input user's library
    torch.backends.cuda.matmul.allow_tf32 = False
    sync = torch.cuda.synchronize
    rows = []
    for n in args.sizes:
        flop = 2.0 * n ** 3
        a = torch.rand(n, n, device="cuda", dtype=torch.float32)
        b = torch.rand(n, n, device="cuda", dtype=torch.float32)
        torch_sync = outside_ms(lambda: torch.matmul(a, b), sync, args.calls)
        start = time.perf_counter()
        for _ in range(args.calls):
            torch.matmul(a, b)
        sync()
        torch_async = (time.perf_counter() - start) * 1e3 / args.calls
        for warm in (False, True):
            kernel_ms = []

            def call():
                res = tm.matmul(a, b, kernel=args.kernel, warmup=0, repeat=1, warm_l2=warm)
                kernel_ms.append(res.timing.kernel_ms)

            wall = outside_ms(call, sync, args.calls)
            kernel = statistics.median(kernel_ms)
            rows.append((n, "warm L2" if warm else "flushed", kernel, wall, wall - kernel,
                         flop / wall / 1e9, 100 * torch_sync / wall))
        rows.append((n, "torch.matmul", float("nan"), torch_sync, float("nan"),
                     flop / torch_sync / 1e9, 100.0))
        rows.append((n, "torch, no sync", float("nan"), torch_async, float("nan"),
                     flop / torch_async / 1e9, 100 * torch_sync / torch_async))
    print(f"{'n':>6} {'mode':>15} {'kernel ms':>10} {'call ms':>9} {'cost ms':>8} "
          f"{'TFLOP/s':>8} {'% torch':>8}")
    for n, mode, kernel, wall, cost, tflops, pct in rows:
        print(f"{n:>6} {mode:>15} {kernel:>10.3f} {wall:>9.3f} {cost:>8.3f} {tflops:>8.2f} "
              f"{pct:>7.1f}%")


if __name__ == "__main__":
    main()
