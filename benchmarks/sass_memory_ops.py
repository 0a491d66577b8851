"""The memory instructions nvcc emitted for each float32 kernel of the built cuda backend, from
`cuobjdump -sass` (static counts per kernel: where a thread's adjacent accesses became one
wider instruction, e.g. four A_tile[ty][k] reads as one LDS.128, Nsight Compute counts fewer
requests than the kernel source makes; docs/profile.md lists those kernels).

    python3 benchmarks/sass_memory_ops.py [--out DIR]      (needs cuobjdump and a built _cuda)
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess

OPS = re.compile(r"\b(LDS|STS|LDG|STG|LDGSTS|ATOMG|REDG|RED|ATOMS|LDSM)(\.[A-Z0-9_.]+)?\b")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lib = glob.glob(os.path.join(here, "tiledmm", "_cuda*.so"))[0]
    sass = subprocess.run(["cuobjdump", "-sass", "-arch", "sm_90", lib], capture_output=True,
                          text=True, check=True).stdout
    os.makedirs(args.out, exist_ok=True)
    counts = collections.OrderedDict()
    function = None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            function = m.group(1)
            counts[function] = collections.Counter()
            continue
        if function:
            for op in OPS.finditer(line.split("/*")[1] if line.count("/*") >= 2 else ""):
                counts[function][op.group(0)] += 1
    names = list(counts)
    if shutil.which("c++filt"):
        names = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                               text=True).stdout.splitlines()
    lines = []
    for name, c in zip(names, counts.values()):
        if "double" in name:
            continue
        ops = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
        lines.append(f"{name}\n    {ops}")
    with open(os.path.join(args.out, "sass_memory_ops.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} float kernels; {os.path.join(args.out, 'sass_memory_ops.txt')}")


if __name__ == "__main__":
    main()
