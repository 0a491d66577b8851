"""How soon a whole program's first kernel starts on emu once its compile is cached (issue 30:
within 0.3 s of tm.run being called). The program launches a kernel first thing; the emulator's
report gives the launch's start time. Prints the median and the spread of N runs.

    python benchmarks/program_startup.py [--runs 10]
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from tiledmm.programs import run as programs  # noqa: E402

PROGRAM = r"""
__global__ void first(int *x) { x[threadIdx.x] = threadIdx.x; }
int main() {
    int *d;
    cudaMalloc(&d, 32 * sizeof(int));
    first<<<1, 32>>>(d);
    cudaDeviceSynchronize();
    return 0;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    image, _meta, _origin = programs.build(PROGRAM, "startup.cu", "emu")   # cached from here on
    delays, totals = [], []
    for _ in range(args.runs):
        t0 = time.time()
        image, _meta, origin = programs.build(PROGRAM, "startup.cu", "emu")
        done, records, _extra, _files = programs.execute(image, "startup.cu", "emu", timeout=60)
        totals.append(time.time() - t0)
        launch = next(r for r in records if r.get("event") == "launch")
        delays.append(launch["started"] - t0)
        assert origin == "disk_hits" and done.returncode == 0
    print(f"cached program, {args.runs} runs: first kernel starts {statistics.median(delays):.3f} s "
          f"after the call (min {min(delays):.3f}, max {max(delays):.3f}); whole run "
          f"{statistics.median(totals):.3f} s median")
    print(json.dumps({"first_kernel_s": delays, "total_s": totals}))


if __name__ == "__main__":
    main()
