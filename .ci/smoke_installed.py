"""Smoke test of an INSTALLED tiledmm (issue 28), run from a folder outside the checkout by
.ci/run: every path a user takes first must find its files in the installed copy. It exits
non-zero, naming the step, at the first failure."""
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np

import tiledmm as tm

STEP_SECONDS = 300


def step(name):
    print(f"smoke: {name}", flush=True)


def cli(*args, stdin=None):
    r = subprocess.run([sys.executable, "-m", "tiledmm", *args], capture_output=True, text=True,
                       timeout=STEP_SECONDS, input=stdin)
    if r.returncode != 0:
        sys.exit(f"smoke: `python -m tiledmm {' '.join(args)}` exited {r.returncode}\n"
                 f"{r.stdout}\n{r.stderr}")
    return r.stdout


def main():
    here = os.path.dirname(os.path.abspath(tm.__file__))
    checkout = os.environ.get("TILEDMM_CHECKOUT")
    if checkout and here.startswith(os.path.abspath(checkout)):
        sys.exit(f"smoke: tiledmm was imported from the checkout ({here}), not the installed copy")
    step(f"import tiledmm from {here}")

    step("python -m tiledmm demo")
    out = cli("demo", "--size", "64")
    assert "tiled" in out and "naive" in out, out

    rng = np.random.default_rng(28)
    x = rng.standard_normal(1000).astype(np.float32)
    source = textwrap.dedent(r"""
        __global__ void scale(const float *x, float *y, float a, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = a * x[i];
        }""")
    k = tm.compile(source, backend="emu")
    for mode in ({}, {"check": True}, {"profile": True}):
        step(f"tm.compile on emu, launched {mode or 'plain'}")
        y = np.zeros_like(x)
        res = k((4,), (256,), x, y, np.float32(2.5), np.int32(x.size), **mode)
        np.testing.assert_allclose(y, 2.5 * x.astype(np.float64), rtol=1e-6)
        if mode.get("profile"):
            assert res.profile.global_load_requests > 0, res.profile

    step("python -m tiledmm grade")
    with tempfile.TemporaryDirectory() as tmp:
        sub = os.path.join(tmp, "submission.cu")
        with open(sub, "w") as f:
            f.write(textwrap.dedent(r"""
                __global__ void matmul(const float *A, const float *B, float *C,
                                       int M, int N, int K) {
                    int row = blockIdx.y * blockDim.y + threadIdx.y;
                    int col = blockIdx.x * blockDim.x + threadIdx.x;
                    if (row < M && col < N) {
                        float acc = 0.0f;
                        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
                        C[row * N + col] = acc;
                    }
                }"""))
        report = os.path.join(tmp, "results.json")
        out = cli("grade", sub, "--assignment", "matmul", "--backend", "emu",
                  "--gradescope", report)
        assert os.path.exists(report), out
    if hasattr(tm, "run"):
        step("tm.run: a whole program on emu")
        prog = tm.run(textwrap.dedent(r"""
            #include <cstdio>
            __global__ void twice(int *v) { v[threadIdx.x] *= 2; }
            int main() {
                int h[4] = {1, 2, 3, 4}, *d;
                cudaMalloc(&d, sizeof h);
                cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
                twice<<<1, 4>>>(d);
                cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
                printf("%d %d %d %d\n", h[0], h[1], h[2], h[3]);
                cudaFree(d);
                return 0;
            }"""), backend="emu", timeout=120)
        assert prog.returncode == 0 and prog.stdout.split() == ["2", "4", "6", "8"], prog
    print("smoke: all passed")


if __name__ == "__main__":
    main()
