"""Whole programs on emu split at their barriers (issue 34): tm.run's kernels take the thread
loops where tiledmm/toolchain/split/transform.py's transform applies (programs/build.py, in the
confined compile child), the fibers elsewhere, and every launch says which
(`ProgramLaunch.path`, `path_reason`). Every program runs with a timeout (RUN_S); the compile
child has its own (programs.build)."""
import json
import os
import types
import uuid

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.toolchain import compile_emu
from tiledmm.programs import build as program_build
from tiledmm.programs import run as programs
from tiledmm.programs import report

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_S = 120

with open(os.path.join(HERE, "kernels", "tiled16.cu")) as _f:
    TILED_KERNEL = _f.read()   # the lecture's tiled kernel (tests/test_barrier_split.py too)

# The lecture's tiled kernel in a whole program: sizes as arguments, A and B on stdin, C printed.
TILED_MAIN = r"""
#include <cstdio>
#include <cstdlib>
int main(int argc, char **argv)
{
    int m = atoi(argv[1]), n = atoi(argv[2]), k = atoi(argv[3]);
    size_t sa = (size_t)m * k, sb = (size_t)k * n, sc = (size_t)m * n;
    float *A = (float *)malloc(sa * 4), *B = (float *)malloc(sb * 4), *C = (float *)malloc(sc * 4);
    for (size_t i = 0; i < sa; ++i) if (scanf("%f", &A[i]) != 1) return 2;
    for (size_t i = 0; i < sb; ++i) if (scanf("%f", &B[i]) != 1) return 2;
    float *dA, *dB, *dC;
    cudaMalloc(&dA, sa * 4); cudaMalloc(&dB, sb * 4); cudaMalloc(&dC, sc * 4);
    cudaMemcpy(dA, A, sa * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sb * 4, cudaMemcpyHostToDevice);
    dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (m + TILE - 1) / TILE);
    tiled<<<grid, block>>>(dA, dB, dC, m, n, k);
    if (cudaMemcpy(C, dC, sc * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
    for (size_t i = 0; i < sc; ++i) printf("%.9g\n", C[i]);
    cudaFree(dA); cudaFree(dB); cudaFree(dC);
    free(A); free(B); free(C);
    return 0;
}
"""
TILED_PROGRAM = TILED_KERNEL + TILED_MAIN


def run(program, **kw):
    kw.setdefault("backend", "emu")
    kw.setdefault("timeout", RUN_S)
    return tm.run(program, **kw)


def run_tiled(m, n, k, seed, program=TILED_PROGRAM, **kw):
    """(C as the program printed it, A @ B in float64, the result)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    feed = " ".join(f"{v:.9g}" for v in np.concatenate([a.ravel(), b.ravel()]))
    r = run(program, args=[m, n, k], stdin=feed, **kw)
    assert r.returncode == 0, r.stderr
    c = np.array(r.stdout.split(), dtype=np.float64).reshape(m, n)
    return c, a.astype(np.float64) @ b.astype(np.float64), r


def tolerance(k):
    return 1e-5 * k + 1e-5


@pytest.mark.parametrize("m,n,k", [(37, 45, 53), (70, 33, 129), (1, 17, 16)])
def test_tiled_program_runs_as_thread_loops_and_matches_numpy(m, n, k):
    c, want, r = run_tiled(m, n, k, seed=m * n + k)
    assert [(ln.kernel, ln.path, ln.path_reason) for ln in r.launches] == \
        [("tiled", "thread loops", "")]
    assert r.paths == {"tiled": ("thread loops", "")}
    np.testing.assert_allclose(c, want, rtol=tolerance(k), atol=tolerance(k))
    assert "thread loops" in repr(r)


def test_split_off_gives_fibers_and_the_same_bits(monkeypatch):
    split, want, r_split = run_tiled(61, 47, 75, seed=3)
    monkeypatch.setenv("TILEDMM_EMU_SPLIT", "0")
    fibers, _, r_fibers = run_tiled(61, 47, 75, seed=3)
    assert r_split.launches[0].path == "thread loops"
    assert (r_fibers.launches[0].path, r_fibers.launches[0].path_reason) == \
        ("fibers", "TILEDMM_EMU_SPLIT=0")
    assert r_split.stdout == r_fibers.stdout   # bit for bit (printed with 9 digits)
    np.testing.assert_allclose(split, want, rtol=tolerance(75), atol=tolerance(75))


def test_check_builds_keep_the_fibers():
    c, want, r = run_tiled(33, 18, 40, seed=5, check=True)
    assert (r.launches[0].path, r.launches[0].path_reason) == ("fibers", "check mode")
    assert r.problems == []
    np.testing.assert_allclose(c, want, rtol=tolerance(40), atol=tolerance(40))


def _counters(launch):
    return {k: v for k, v in launch.profile.as_dict().items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def test_profile_builds_split_and_count_as_the_fibers(monkeypatch):
    """Profile mode's build splits the kernel too (without the interchange of its k loop), and
    counts every counter as its fibers do (the same program with TILEDMM_EMU_SPLIT=0)."""
    c, want, r = run_tiled(37, 45, 29, seed=6, profile=True)
    assert (r.launches[0].path, r.launches[0].path_reason) == ("thread loops", "")
    np.testing.assert_allclose(c, want, rtol=tolerance(29), atol=tolerance(29))
    monkeypatch.setenv("TILEDMM_EMU_SPLIT", "0")
    _, _, r_fibers = run_tiled(37, 45, 29, seed=6, profile=True)
    assert r_fibers.launches[0].path == "fibers"
    split, fibers = _counters(r.launches[0]), _counters(r_fibers.launches[0])
    assert fibers["shared_load_requests"] > 0 and fibers["barriers"] > 0
    assert split == fibers


def test_a_change_to_the_transform_rebuilds_the_program(monkeypatch):
    # The build applies the barrier transform, so the cache key holds its source: a program
    # built before the transform changed is rebuilt, not served from the cache.
    program = f"// {uuid.uuid4()}\n" + TILED_PROGRAM
    run_tiled(16, 16, 16, seed=7, program=program)
    compiled = tm.cache_info()["compiled"]
    run_tiled(16, 16, 16, seed=7, program=program)
    assert tm.cache_info()["compiled"] == compiled   # the same program: from the cache
    monkeypatch.setattr(compile_emu, "SPLIT_SOURCE", "a changed transform")
    c, want, r = run_tiled(16, 16, 16, seed=7, program=program)
    assert tm.cache_info()["compiled"] == compiled + 1
    np.testing.assert_allclose(c, want, rtol=tolerance(16), atol=tolerance(16))


# A barrier only half the block's threads reach: line 5 (tests/programs/check/).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "check",
                       "divergent_barrier.cu")) as _f:
    DIVERGENT = _f.read()


def test_a_divergent_barrier_keeps_the_fibers_and_is_reported_with_its_line():
    r = run(DIVERGENT)
    assert r.stdout.strip() == "cudaErrorLaunchFailure", r.stdout
    assert "__syncthreads() at program.cu:5" in r.stderr, r.stderr
    assert "no thread can proceed" in r.stderr
    ln, = r.launches
    # the reason names the `if` (line 4) around the barrier
    assert ln.path == "fibers" and "barrier" in ln.path_reason and "(line 4)" in ln.path_reason


# A kernel with a shuffle between barriers: fibers (32-lane semantics), a right answer; and a
# split one beside it in the same program.
SHUFFLE = r"""
#include <cstdio>
__global__ void warp_sums(const int *x, int *out)
{
    __shared__ int s[64];
    int v = x[threadIdx.x];
    for (int d = 16; d > 0; d >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, d);
    if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) *out = s[0] + s[1];
}
__global__ void reverse(int *x)
{
    __shared__ int s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    x[t] = s[63 - t];
}
int main()
{
    int h[64], *d, *out, sum = 0;
    for (int i = 0; i < 64; ++i) h[i] = (i * 37) % 11 - 5;
    cudaMalloc(&d, sizeof h); cudaMalloc(&out, sizeof(int));
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    warp_sums<<<1, 64>>>(d, out);
    reverse<<<1, 64>>>(d);
    cudaMemcpy(&sum, out, sizeof(int), cudaMemcpyDeviceToHost);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("%d %d %d\n", sum, h[0], h[63]);
    return 0;
}
"""


def test_a_warp_shuffle_reduction_splits_beside_another_split_kernel():
    """Full-mask shuffles in a block-uniform loop take the thread loops too (issue 34: one
    thread loop stores each lane's value, the next reads its source lane's)."""
    r = run(SHUFFLE)
    assert r.returncode == 0, r.stderr
    h = [(i * 37) % 11 - 5 for i in range(64)]
    assert r.stdout == f"{sum(h)} {h[63]} {h[0]}\n"
    paths = r.paths
    assert paths["warp_sums"] == ("thread loops", "")
    assert paths["reverse"] == ("thread loops", "")


def test_a_shuffle_hidden_in_a_header_macro_keeps_the_fibers(tmp_path):
    # the transform reads the .cu alone: a shuffle in a macro of the program's header is not
    # seen as one, so the kernel must keep the fibers
    (tmp_path / "warp.cuh").write_text(
        "#define WARP_STEP(v, d) v += __shfl_down_sync(0xffffffffu, v, d)\n")
    (tmp_path / "sum.cu").write_text(SHUFFLE.replace(
        "#include <cstdio>", '#include <cstdio>\n#include "warp.cuh"').replace(
        "v += __shfl_down_sync(0xffffffffu, v, d);", "WARP_STEP(v, d);"))
    r = run(str(tmp_path / "sum.cu"))
    assert r.returncode == 0, r.stderr
    h = [(i * 37) % 11 - 5 for i in range(64)]
    assert r.stdout == f"{sum(h)} {h[63]} {h[0]}\n"
    path, reason = r.paths["warp_sums"]
    assert path == "fibers" and "WARP_STEP" in reason and "warp.cuh" in reason
    assert r.paths["reverse"] == ("thread loops", "")


TEMPLATE = r"""
#include <cstdio>
template <typename T, int N>
__global__ void scale_reversed(T *x, T by)
{
    __shared__ T s[N];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    x[t] = s[N - 1 - t] * by;
}
int main()
{
    double h[48], *d;
    for (int i = 0; i < 48; ++i) h[i] = 0.25 * i - 3.0;
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    scale_reversed<double, 48><<<1, 48>>>(d, 3.0);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 48; ++i) printf("%.17g\n", h[i]);
    return 0;
}
"""


def test_a_template_kernel_takes_the_thread_loops():
    r = run(TEMPLATE)
    assert r.returncode == 0, r.stderr
    want = (0.25 * np.arange(48) - 3.0)[::-1] * 3.0
    np.testing.assert_array_equal(np.array(r.stdout.split(), dtype=np.float64), want)
    assert r.paths == {"scale_reversed": ("thread loops", "")}


def test_a_kernel_launched_before_its_definition_and_through_a_pointer_is_split():
    src = r"""
#include <cstdio>
__global__ void rev(int *x);
int main()
{
    int h[64], *d;
    for (int i = 0; i < 64; ++i) h[i] = 3 * i - 50;
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    rev<<<1, 64>>>(d);
    void (*again)(int *) = rev;
    again<<<2, 32>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 64; ++i) printf("%d ", h[i]);
    return 0;
}
__global__ void rev(int *x)
{
    __shared__ int s[64];
    int t = threadIdx.x + blockIdx.x * blockDim.x;
    s[threadIdx.x] = x[t] + 1;
    __syncthreads();
    x[t] = s[blockDim.x - 1 - threadIdx.x];
}
"""
    r = run(src)
    assert r.returncode == 0, r.stderr
    h = np.arange(64) * 3 - 50
    h = (h + 1)[::-1]                                        # one block of 64
    h = np.concatenate([(h[:32] + 1)[::-1], (h[32:] + 1)[::-1]])   # two blocks of 32
    assert r.stdout.split() == [str(v) for v in h]
    assert [(ln.kernel, ln.path) for ln in r.launches] == \
        [("rev", "thread loops"), ("again", "thread loops")]


def _rev_main(element, fill, launch, fmt):
    """A program's main for the 64-element reversal kernels below: h[i] = fill, the launch,
    and the first and last elements printed."""
    return f"""
int main()
{{
    {element} h[64], *d;
    for (int i = 0; i < 64; ++i) h[i] = {fill};
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    {launch};
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("{fmt} {fmt}\\n", h[0], h[63]);
    return 0;
}}
"""


def test_a_helper_from_the_programs_own_header_keeps_the_fibers(tmp_path):
    # the transform reads the .cu alone: a barrier in a macro of the program's header must
    # not be taken for plain code
    (tmp_path / "sync.cuh").write_text("#define BLOCK_SYNC() __syncthreads()\n")
    (tmp_path / "rev.cu").write_text(r"""
#include <cstdio>
#include "sync.cuh"
__device__ void wait_all() { BLOCK_SYNC(); }
__global__ void rev(int *x)
{
    __shared__ int s[64];
    int t = threadIdx.x;
    s[t] = x[t] * 3;
    wait_all();
    x[t] = s[63 - t];
}
""" + _rev_main("int", "i * i - 7", "rev<<<1, 64>>>(d)", "%d"))
    r = run(str(tmp_path / "rev.cu"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{(63 * 63 - 7) * 3} {-7 * 3}\n"
    path, reason = r.paths["rev"]
    assert path == "fibers" and "BLOCK_SYNC" in reason and "sync.cuh" in reason


def test_a_plain_typedef_from_the_programs_own_header_still_splits(tmp_path):
    # NVIDIA's scan sample: `typedef unsigned int uint;` in scan_common.h; the transform gets
    # such typedefs (of arithmetic types) as it gets the header's plain constants
    (tmp_path / "types.h").write_text("#pragma once\ntypedef unsigned int word_t;\n"
                                      "typedef float real_t;\n#define WIDTH 64\n")
    (tmp_path / "rev.cu").write_text(r"""
#include <cstdio>
#include "types.h"
__global__ void rev(word_t *x, real_t scale)
{
    __shared__ word_t s[WIDTH];
    word_t t = threadIdx.x;
    s[t] = x[t] * (word_t)scale;
    __syncthreads();
    x[t] = s[WIDTH - 1 - t];
}
""" + _rev_main("word_t", "i * i + 7", "rev<<<1, 64>>>(d, 3.0f)", "%u"))
    r = run(str(tmp_path / "rev.cu"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{(63 * 63 + 7) * 3} {7 * 3}\n"
    assert r.paths["rev"] == ("thread loops", "")


def test_shared_alignas_compiles_and_splits(tmp_path):
    # NVIDIA's globalToShmemAsyncCopy writes `__shared__ alignas(alignof(float4))`: nvcc takes
    # the attribute after the qualifier, g++ and clang only in front (the dialect moves it)
    (tmp_path / "rev.cu").write_text(r"""
#include <cstdio>
template <int N>
__global__ void rev(float4 *x)
{
    __shared__ alignas(alignof(float4)) float s[4 * N];
    const int t = threadIdx.x;
    reinterpret_cast<float4 *>(s)[t] = x[t];
    __syncthreads();
    x[t] = reinterpret_cast<float4 *>(s)[N - 1 - t];
}
int main()
{
    float4 h[32], *d;
    for (int i = 0; i < 32; ++i) h[i] = make_float4(i, 2 * i, 3 * i, -i);
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    rev<32><<<1, 32>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("%g %g %g\n", h[0].x, h[0].w, h[31].y);
    return 0;
}
""")
    r = run(str(tmp_path / "rev.cu"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "31 -31 0\n"
    assert r.paths["rev"] == ("thread loops", "")


def test_a_program_of_several_files_splits_kernels_launched_from_another_file(tmp_path):
    # main.cu launches `tiled`, declared in the program's header (with TILE, a plain constant)
    # and defined in kernel.cu; each file has a static kernel `local_k` of its own
    (tmp_path / "kernel.cuh").write_text(
        "#pragma once\n#define TILE 16\n"
        "__global__ void tiled(const float *A, const float *B, float *C, int m, int n, int k);\n"
        "void run_local(int *d);\n")
    body = TILED_KERNEL[TILED_KERNEL.index("__global__"):]
    (tmp_path / "kernel.cu").write_text('#include "kernel.cuh"\n' + body + r"""
static __global__ void local_k(int *x)
{
    __shared__ int s[32];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = s[31 - threadIdx.x];
}
void run_local(int *d) { local_k<<<1, 32>>>(d); }
""")
    (tmp_path / "main.cu").write_text('#include <cstdio>\n#include <cstdlib>\n'
                                      '#include "kernel.cuh"\n'
                                      "static __global__ void local_k(int *x) "
                                      "{ x[threadIdx.x] += 100; }\n" +
                                      TILED_MAIN.replace("return 0;\n}", r"""
    int hi[32], *d;
    for (int i = 0; i < 32; ++i) hi[i] = i;
    cudaMalloc(&d, sizeof hi);
    cudaMemcpy(d, hi, sizeof hi, cudaMemcpyHostToDevice);
    local_k<<<1, 32>>>(d);
    run_local(d);
    cudaMemcpy(hi, d, sizeof hi, cudaMemcpyDeviceToHost);
    fprintf(stderr, "%d %d\n", hi[0], hi[31]);
    return 0;
}"""))
    files = [str(tmp_path / n) for n in ("main.cu", "kernel.cu", "kernel.cuh")]
    c, want, r = run_tiled(29, 35, 41, seed=11, program=files)
    np.testing.assert_allclose(c, want, rtol=tolerance(41), atol=tolerance(41))
    assert r.stderr == "131 100\n"
    assert [(ln.kernel, ln.path) for ln in r.launches] == \
        [("tiled", "thread loops"), ("local_k", "thread loops"), ("local_k", "thread loops")]


def test_per_thread_arrays_too_large_for_a_block_run_on_fibers():
    src = r"""
#include <cstdio>
__global__ void big(float *x)
{
    float a[200];
    for (int i = 0; i < 200; ++i) a[i] = x[threadIdx.x] + i;
    __syncthreads();
    float s = 0;
    for (int i = 0; i < 200; ++i) s += a[i];
    x[threadIdx.x] = s;
}
int main()
{
    float *d, h[1024];
    for (int i = 0; i < 1024; ++i) h[i] = 0.5f * (i % 7);
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    big<<<1, 1024>>>(d);
    big<<<1, 32>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("%.9g %.9g\n", h[5], h[1000]);
    return 0;
}
"""
    r = run(src)
    assert r.returncode == 0, r.stderr
    first = 200 * 2.5 + 19900                 # x[5] = 2.5, then sum of x + i over 200 i
    twice = 200 * first + 19900               # thread 5 is also in the second launch
    once = 200 * (0.5 * (1000 % 7)) + 19900   # thread 1000 only in the first
    assert [float(v) for v in r.stdout.split()] == [np.float32(twice), np.float32(once)]
    (big1, big2) = r.launches
    assert big1.path == "fibers" and "per-thread arrays" in big1.path_reason
    assert (big2.path, big2.path_reason) == ("thread loops", "")


# ---- the transform fails or its text does not compile: fibers, never a failed build ----

@pytest.fixture
def compile_child_here(monkeypatch):
    """programs.build's compile child run in this process (so that the transform can be
    replaced); the program itself still runs confined."""
    real = programs.sandbox.run_python

    def run_python(module, args, *a, **kw):
        if module != "programs.build":
            return real(module, args, *a, **kw)
        program_build.main(args)
        return types.SimpleNamespace(returncode=0, stderr=b"", stdout=b"")
    monkeypatch.setattr(programs.sandbox, "run_python", run_python)


@pytest.mark.parametrize("failure", ["raises", "bad text"])
def test_a_failing_transform_falls_back_to_fibers(compile_child_here, monkeypatch, failure):
    def broken(source, name, define_lines=(), templates=False, profile=False):
        if failure == "raises":
            raise RuntimeError("transform crashed")
        # a plan as split_kernel gives it (text, reason, end, template_args), its text broken
        return types.SimpleNamespace(text="static void tm_split_tiled( { this is not C++",
                                     reason="", profile_reason="", regions=1, frame=0,
                                     end=source.index("int main") - 1, template_args="")
    monkeypatch.setattr(program_build.barrier_split, "split_kernel", broken)
    fresh = f"// {uuid.uuid4()}\n" + TILED_PROGRAM   # a new cache entry
    c, want, r = run_tiled(19, 23, 29, seed=9, program=fresh)
    np.testing.assert_allclose(c, want, rtol=tolerance(29), atol=tolerance(29))
    path, reason = r.paths["tiled"]
    assert path == "fibers"
    assert ("transform crashed" in reason) if failure == "raises" else \
        ("did not compile" in reason)


def test_a_split_that_does_not_compile_costs_only_its_own_kernel(compile_child_here,
                                                                 monkeypatch):
    """One kernel's split that g++ rejects: the program is built again without that split
    alone (the compiler's log names its tm_split_ function); the other kernel keeps its."""
    real = program_build.barrier_split.split_kernel

    def broken_for_tiled(source, name, define_lines=(), templates=False, profile=False):
        plan = real(source, name, define_lines, templates=templates, profile=profile)
        if name == "tiled":
            plan.text = "static void tm_split_tiled( { this is not C++"
        return plan
    monkeypatch.setattr(program_build.barrier_split, "split_kernel", broken_for_tiled)
    flip = ("__global__ void flip(float *x)\n{\n    __shared__ float s[32];\n"
            "    s[threadIdx.x] = x[threadIdx.x];\n    __syncthreads();\n"
            "    x[threadIdx.x] = s[31 - threadIdx.x];\n}\n")
    main = TILED_MAIN.replace("    cudaFree(dA);", "    flip<<<1, 32>>>(dC);\n    cudaFree(dA);")
    fresh = f"// {uuid.uuid4()}\n" + TILED_KERNEL + flip + main   # a new cache entry
    c, want, r = run_tiled(19, 23, 29, seed=9, program=fresh)
    np.testing.assert_allclose(c, want, rtol=tolerance(29), atol=tolerance(29))
    assert r.paths["tiled"][0] == "fibers" and "did not compile" in r.paths["tiled"][1]
    assert r.paths["flip"] == ("thread loops", ""), r.paths


def test_a_program_that_does_not_compile_still_says_why():
    with pytest.raises(tm.CompileError, match="undeclared|not declared"):
        run(TILED_KERNEL + "int main() { return missing_name; }\n")


# ---- the caller checks what the children say ----

def test_launch_records_outside_the_schema_give_no_path():
    rec = {"event": "launch", "kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1],
           "shared_bytes": 0, "ms": 1.0, "error": 0}
    paths = {"k": "a reason from the build"}
    assert report.launch_path(dict(rec, path="thread loops", path_reason="x"), paths) == \
        ("thread loops", "")
    assert report.launch_path(dict(rec, path="fibers", path_reason=""), paths) == \
        ("fibers", "a reason from the build")
    assert report.launch_path(dict(rec, path="fibers", path_reason="y" * 10**6), paths) == \
        ("fibers", "y" * report.PATH_REASON_CHARS)
    for bad in ("rm -rf", 7, None, ["fibers"]):
        assert report.launch_path(dict(rec, path=bad), paths) == (None, "")
    ln, = report.launches([dict(rec, path="fibers", path_reason=3)], "emu", paths)
    assert (ln.path, ln.path_reason) == ("fibers", "a reason from the build")


def test_build_paths_outside_the_schema_are_refused():
    assert programs._build_paths({"k": "", "j": "why"}) == {"k": "", "j": "why"}
    assert programs._build_paths({"k": "z" * 1500})["k"] == "z" * report.PATH_REASON_CHARS
    for bad in (["k"], {"k": 1}, {1: "x"}, {"k" * 500: ""},
                {f"k{i}": "" for i in range(report.PATHS_MOST + 1)}, "k"):
        with pytest.raises(RuntimeError, match="schema"):
            programs._build_paths(bad)
    json.dumps(programs._build_paths(None))
