"""Whether a program run by tm.run can write a file in its working folder, on each backend
(NVIDIA's dwtHaar1D writes result.dat): prints each backend's stdout, stderr and the files that
came back, and the sandbox's status (`tm info`'s confinement lines).

    python3 benchmarks/program_files_probe.py [--backend emu cuda]
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tiledmm as tm  # noqa: E402
from tiledmm.confine import sandbox  # noqa: E402

PROGRAM = r"""
#include <cerrno>
#include <cstdio>
#include <cstring>
__global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }
int main()
{
    float h[4] = {1, 2, 3, 4}, *d;
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    twice<<<1, 4>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    FILE *f = fopen("result.dat", "w");
    if (!f) { printf("fopen: %s\n", strerror(errno)); return 1; }
    fprintf(f, "%g %g %g %g\n", h[0], h[1], h[2], h[3]);
    fclose(f);
    printf("written\n");
    return 0;
}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", nargs="*", default=["emu", "cuda"])
    a = ap.parse_args()
    print("sandbox:", sandbox.status())
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "writes.cu")
        with open(path, "w") as f:
            f.write(PROGRAM)
        for backend in a.backend:
            r = tm.run(path, backend=backend, timeout=120)
            print(f"{backend}: exit {r.returncode}; stdout {r.stdout!r}; stderr {r.stderr[-600:]!r};"
                  f" files {sorted(r.files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
