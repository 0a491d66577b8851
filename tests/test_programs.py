"""Whole CUDA programs: tm.run and python -m tiledmm run (issue 30).

The tests that take the `backend` fixture run on emu, and on cuda where a GPU is present (the
same stdout on both: tests/programs/*.expected); the rest are the emulator's. Every program runs
with a timeout (RUN_S); compiles are cached, so a second run of a program is quick.
benchmarks/programs_gpu.py runs every program on both backends and compares their stdout.
"""
import os
import re
import subprocess
import sys

import pytest

import tiledmm as tm
from conftest import pythonpath
from tiledmm.programs import run as programs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROGRAMS = os.path.join(HERE, "programs")
LECTURES = os.path.join(HERE, "lectures", "programs")
RUN_S = 120


def run(program, **kw):
    kw.setdefault("backend", "emu")
    kw.setdefault("timeout", RUN_S)
    return tm.run(program, **kw)


# ---- the lectures' programs --------------------------------------------------------------------

def test_lecture_000_vecadd(backend):
    r = run(os.path.join(LECTURES, "000_vecAdd.cu"), backend=backend)
    assert r.returncode == 0, r.stderr
    # C = 0.5 i + (1000 - i)
    assert r.stdout == "C[0] = 1000.0, C[999] = 500.5\n0 of 1000 elements wrong\n"
    assert [(ln.kernel, ln.grid, ln.block, ln.shared_bytes) for ln in r.launches] == \
        [("vecAddKernel", (4, 1, 1), (256, 1, 1), 0)]
    assert r.launches[0].ms is not None and r.launches[0].ms >= 0
    assert ("CPU" if backend == "emu" else "cuda events") in r.launches[0].clock
    assert not r.timed_out and r.stderr == ""


def test_lecture_000_device_query_names_the_emulated_preset():
    r = run(os.path.join(LECTURES, "000_device_query.cu"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "1 device(s)"
    assert "H100" in lines[1] and "emulated" in lines[1]
    assert "compute capability 9.0, 132 SMs" in r.stdout
    assert "maxThreadsPerBlock 1024" in r.stdout and "warpSize 32" in r.stdout


def test_device_query_preset_from_environment(monkeypatch):
    monkeypatch.setenv("TILEDMM_EMU_DEVICE", "A100")
    r = run(os.path.join(LECTURES, "000_device_query.cu"))
    assert "A100" in r.stdout and "compute capability 8.0, 108 SMs" in r.stdout


def test_lecture_001_matadd(backend):
    r = run(os.path.join(LECTURES, "001_matadd.cu"), backend=backend)
    assert r.returncode == 0, r.stderr
    a = [float(i % 97) for i in range(64 * 96)]
    b = [float(3 * i % 89) * 0.25 for i in range(64 * 96)]
    assert r.stdout == f"sum of C = {sum(a) + sum(b):.2f}; 0 of 6144 elements wrong\n"
    assert r.launches[0].grid == (4, 3, 1) and r.launches[0].block == (16, 32, 1)


def test_lecture_001_vector_memory_with_args():
    r = run(os.path.join(LECTURES, "001_vector_memory.cu"), args=["5000"])
    assert r.returncode == 0, r.stderr
    want = sum(float(i % 1000) + 2.0 * (i % 500) for i in range(5000))
    assert r.stdout == f"length 5000, sum {want:.1f}\n"
    assert r.launches[0].grid == (20, 1, 1)


def test_lecture_001_reduction_host_loops(backend):
    r = run(os.path.join(LECTURES, "001_reduce_host_loop.cu"), args=["4096"], backend=backend)
    assert r.returncode == 0, r.stderr
    total = 4096 * 4097 // 2
    assert r.stdout == (f"reduce_1: 12 launches, sum {total}\n"
                        f"reduce_2_2: 2 launches, sum {total}\n")
    assert [ln.kernel for ln in r.launches] == ["reduce_1"] * 12 + ["reduce_2_2"] * 2


def test_lecture_003_matmul_host(backend):
    r = run(os.path.join(LECTURES, "003_matmul_host.cu"), args=["24"], backend=backend)
    assert r.returncode == 0, r.stderr
    m = [float((i * 7) % 13) - 6 for i in range(24 * 24)]
    n = [float((i * 5) % 11) * 0.5 - 2.5 for i in range(24 * 24)]
    p00 = sum(m[k] * n[k * 24] for k in range(24))
    assert r.stdout == f"Width 24: P[0] = {p00:.2f}, largest difference from the host 0\n"
    assert r.launches[0].block == (24, 24, 1)


# ---- the runtime API ---------------------------------------------------------------------------

def test_runtime_api_program_matches_expected_stdout(backend):
    r = run(os.path.join(PROGRAMS, "runtime_api.cu"), backend=backend)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(PROGRAMS, "runtime_api.expected")) as f:
        expected = f.read()
    assert r.stdout == expected
    # the facts the expected output holds, spelled out
    assert "past the end: cudaErrorInvalidValue (invalid argument)\nnothing copied: 1\n" in r.stdout
    assert "get after 2048 threads: cudaErrorInvalidValue (invalid argument)\nget again: " \
           "cudaSuccess" in r.stdout
    assert "kernel ran: 0\n" in r.stdout and "counter = 192\n" in r.stdout
    assert "before the launch\nafter the launch\nkernel says 42\n" in r.stdout
    assert "in order: pinned[7] = 3\n" in r.stdout and "managed m[3] = 7\n" in r.stdout
    if backend == "emu":
        assert "tiledmm: runtime_api.cu:99: kernel 'count_threads' launched with 2048 threads" \
            in r.stderr
    errors = {ln.kernel: ln.error for ln in r.launches if ln.error}
    assert errors == {"count_threads": 1, "dyn_shared": 1}


def test_unsupported_runtime_call_is_a_compile_error_naming_it():
    src = ("#include <cuda_runtime.h>\nint main() {\n  cudaSurfaceObject_t s;\n"
           "  cudaCreateSurfaceObject(&s, 0);\n  return 0;\n}\n")
    with pytest.raises(tm.CompileError) as err:
        run(src)
    assert "program.cu:3" in str(err.value) or "program.cu:4" in str(err.value)
    src = ("#include <cuda_runtime.h>\nint main() {\n  cudaGraphExecUpdate(0, 0, 0);\n"
           "  return 0;\n}\n")
    with pytest.raises(tm.CompileError) as err:
        run(src)
    assert "cudaGraphExecUpdate is not part of the CUDA runtime API that the emulator supports" \
        in str(err.value)
    assert "program.cu:3" in str(err.value)


def test_compile_error_at_the_programs_own_line():
    src = ("#include <stdio.h>\n__global__ void k(float *x) { x[0] = 1; }\n"
           "int main() {\n  float *d;\n  k<<<1, 1>>>(d, 3);\n  return undefined_name;\n}\n")
    with pytest.raises(tm.CompileError) as err:
        run(src)
    text = str(err.value)
    assert "program.cu:6" in text and "undefined_name" in text
    assert "program.cu:5" in text   # the launch's arguments are checked as nvcc checks them


def test_a_launch_inside_a_macro_is_reported_not_miscompiled():
    src = ("__global__ void k(int *x) {}\n#define LAUNCH(p) k<<<1, 1>>>(p)\n"
           "int main() {\n  int *d = 0;\n  LAUNCH(d);\n  return 0;\n}\n")
    try:
        r = run(src)
    except tm.CompileError as exc:
        assert "program.cu:" in str(exc)
    else:
        assert r.returncode == 0 and [ln.kernel for ln in r.launches] == ["k"]


# ---- the two week-one bugs ---------------------------------------------------------------------

def test_host_reading_device_memory_ends_with_sigsegv_and_names_the_lines(backend):
    r = run(os.path.join(PROGRAMS, "host_reads_device.cu"), backend=backend)
    assert r.returncode == -11
    assert r.stdout == "about to read\n"
    if backend != "emu":
        return
    assert ("tiledmm: host code read device memory at host_reads_device.cu:12 (allocated by "
            "cudaMalloc at host_reads_device.cu:8)") in r.stderr
    assert "SIGSEGV" in r.stderr.splitlines()[-1]


def test_host_writing_device_memory():
    src = ("#include <cuda_runtime.h>\nint main() {\n  int *d;\n  cudaMalloc(&d, 40);\n"
           "  d[1] = 5;\n  return 0;\n}\n")
    r = run(src)
    assert r.returncode == -11
    assert re.search(r"tiledmm: host code wrote device memory at program\.cu:5 \(allocated by "
                     r"cudaMalloc at program\.cu:4\)", r.stderr), r.stderr


def test_kernel_given_host_memory_fails_at_the_next_synchronising_call(backend):
    r = run(os.path.join(PROGRAMS, "kernel_gets_malloc.cu"), backend=backend)
    assert r.returncode == 1
    assert r.stdout == ("launch: no error\n"
                        "sync: cudaErrorIllegalAddress (an illegal memory access was encountered)\n"
                        "after: cudaErrorIllegalAddress\n")
    if backend == "emu":
        assert ("tiledmm: kernel_gets_malloc.cu:17: kernel 'fill' argument 'y' points to host "
                "memory (malloc); give it device memory from cudaMalloc, filled by cudaMemcpy") \
            in r.stderr


# ---- cooperative groups ------------------------------------------------------------------------

def test_cooperative_groups_program(backend):
    r = run(os.path.join(PROGRAMS, "cg_reduce.cu"), backend=backend)
    assert r.returncode == 0, r.stderr
    want = sum(float(i % 17) - 8.0 + 0.25 for i in range(100000))
    got = float(r.stdout.split()[1].rstrip(","))
    assert abs(got - want) <= 1e-6 * 100000 * 8, r.stdout


CG_KERNEL = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void tile_sums(const float *x, float *out, int n)
{
    cg::thread_block block = cg::this_thread_block();
    auto tile = cg::tiled_partition<8>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    float s = cg::reduce(tile, v, cg::plus<float>());
    float m = cg::reduce(tile, v, cg::greater<float>());
    float first = tile.shfl(v, 0);
    if (tile.thread_rank() == 0 && i < n) {
        out[3 * (i / 8)] = s;
        out[3 * (i / 8) + 1] = m;
        out[3 * (i / 8) + 2] = first;
    }
    block.sync();
}
"""


def test_cooperative_groups_in_tm_compile():
    # emu only: NVRTC finds <cooperative_groups.h> only with -I$CUDA_HOME/include and
    # -I$CUDA_HOME/include/cccl, which tiledmm/toolchain/compile_nvrtc.py does not pass yet
    np = pytest.importorskip("numpy")
    k = tm.compile(CG_KERNEL, "tile_sums", backend="emu")
    rng = np.random.default_rng(5)
    n = 200
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(3 * (n // 8), dtype=np.float32)
    out = k((n + 63) // 64, 64, x, out, n, timeout=RUN_S).out
    tiles = x.astype(np.float64).reshape(-1, 8)
    np.testing.assert_allclose(out[0::3], tiles.sum(axis=1), rtol=1e-5, atol=1e-5 * 8)
    np.testing.assert_array_equal(out[1::3], tiles.max(axis=1).astype(np.float32))
    np.testing.assert_array_equal(out[2::3], tiles[:, 0].astype(np.float32))


# ---- results, faults, timeouts, options --------------------------------------------------------

EXITS = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    char line[100];
    if (fgets(line, sizeof line, stdin)) printf("stdin: %s", line);
    for (int i = 1; i < argc; ++i) printf("arg %d: %s\n", i, argv[i]);
    fprintf(stderr, "to stderr\n");
    if (argc > 1 && argv[1][0] == 'a') abort();
    exit(argc + 2);
}
"""


def test_exit_code_stdin_args_and_stderr():
    r = run(EXITS, args=["x y", "-z"], stdin="hello\n")
    assert r.returncode == 5
    assert r.stdout == "stdin: hello\narg 1: x y\narg 2: -z\n"
    assert r.stderr == "to stderr\n"
    assert r.launches == [] and not r.timed_out
    r = run(EXITS, stdin=b"")
    assert r.returncode == 3 and r.stdout == ""


def test_abort_is_a_signal_not_an_exception():
    r = run(EXITS, args=["abort"])
    assert r.returncode == -6
    assert "SIGABRT" in r.stderr.splitlines()[-1]


def test_timeout_stops_the_program():
    src = ("#include <stdio.h>\nint main() {\n  printf(\"spinning\\n\"); fflush(stdout);\n"
           "  volatile int x = 0;\n  for (;;) x++;\n}\n")
    r = run(src, timeout=2)
    assert r.timed_out and r.returncode == -9
    assert r.stdout == "spinning\n"
    assert r.stderr.splitlines()[-1].startswith("tiledmm: the program ran past its timeout of 2 s")


def test_kernel_that_hangs_is_stopped_by_the_timeout():
    src = ("__global__ void spin(int *x) { while (*(volatile int *)x == 0) {} }\n"
           "int main() {\n  int *d;\n  cudaMalloc(&d, 4);\n  cudaMemset(d, 0, 4);\n"
           "  spin<<<1, 1>>>(d);\n  cudaDeviceSynchronize();\n  return 0;\n}\n")
    r = run(src, timeout=3)
    assert r.timed_out and r.returncode == -9


def test_repr_shows_output_then_launches():
    r = run(os.path.join(LECTURES, "000_vecAdd.cu"))
    text = repr(r)
    assert text.startswith("<ProgramResult returncode=0")
    assert "0 of 1000 elements wrong" in text
    assert re.search(r"vecAddKernel\s+4x1x1\s+256x1x1\s+0\s+\d+\.\d{3}", text), text
    assert "<table>" in r._repr_html_() and "vecAddKernel" in r._repr_html_()


def test_compiler_args_on_emu():
    src = ("#include <stdio.h>\nint main() { printf(\"%d\\n\", N * 2); return 0; }\n")
    r = run(src, compiler_args=["-DN=21", "-O1", "-arch=sm_90", "-std=c++17"])
    assert r.stdout == "42\n"
    with pytest.raises(ValueError, match="-fsanitize=address"):
        run(src, compiler_args=["-DN=1", "-fsanitize=address"])


def test_check_runs_the_program_too():
    # check mode itself is tested in tests/test_program_check.py (issue 32)
    r = run(EXITS, check=True)
    assert r.returncode == run(EXITS).returncode and r.stdout == run(EXITS).stdout


def test_program_argument_validation(tmp_path):
    with pytest.raises(ValueError, match="backend"):
        tm.run(EXITS, backend="gpu")
    with pytest.raises(TypeError):
        tm.run(12)
    with pytest.raises(ValueError, match="timeout"):
        tm.run(EXITS, backend="emu", timeout=-1)
    with pytest.raises(FileNotFoundError):
        tm.run(tmp_path / "missing.cu", backend="emu")


def test_compiles_are_cached():
    src = open(os.path.join(LECTURES, "000_vecAdd.cu")).read()
    programs.build(src, "000_vecAdd.cu", "emu")
    _image, _meta, origin = programs.build(src, "000_vecAdd.cu", "emu")
    assert origin == "disk_hits"


def test_the_program_prelude_is_precompiled_once_per_cache(tmp_path, monkeypatch):
    """The prelude every program starts with (tiledmm's kernel header and the program runtime)
    is precompiled once per cache folder and compile command (toolchain/compile_emu.prelude_pch):
    two programs share it, and messages still name the program's own lines."""
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path / "cache"))
    first = ("#include <cstdio>\n__global__ void k(int *x) { x[threadIdx.x] = 3 * threadIdx.x; }"
             "\nint main() {\n  int *d, h[8];\n  cudaMalloc(&d, sizeof h);\n  k<<<1, 8>>>(d);\n"
             "  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);\n  printf(\"%d\\n\", h[7]);\n}\n")
    assert run(first).stdout == "21\n"
    precompiled = [n for n in os.listdir(tmp_path / "cache") if n.endswith(".gch")]
    assert len(precompiled) == 1 and precompiled[0].startswith("user-prelude-")
    with pytest.raises(tm.CompileError) as err:
        run(first.replace("h[7]", "h[7] + missing_name"))
    assert "program.cu:8" in str(err.value) and "missing_name" in str(err.value)
    assert [n for n in os.listdir(tmp_path / "cache") if n.endswith(".gch")] == precompiled


def test_cli_run_exit_code_and_arguments(tmp_path):
    prog = tmp_path / "exits.cu"
    prog.write_text(EXITS)
    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT))
    done = subprocess.run([sys.executable, "-m", "tiledmm", "run", str(prog), "--backend", "emu",
                           "--timeout", str(RUN_S), "--", "one", "--two"],
                          input=b"typed\n", capture_output=True, timeout=RUN_S * 3, env=env)
    assert done.returncode == 5, done.stderr
    assert done.stdout == b"stdin: typed\narg 1: one\narg 2: --two\n"
    assert b"to stderr" in done.stderr
    done = subprocess.run([sys.executable, "-m", "tiledmm", "run", str(prog), "--backend", "emu",
                           "--", "abort"], capture_output=True, timeout=RUN_S * 3, env=env)
    assert done.returncode == 128 + 6


# ---- the cuda path, built here (run on a GPU by benchmarks/programs_gpu.py) ---------------------

@pytest.mark.skipif(programs._nvcc() is None, reason="nvcc is not installed")
def test_cuda_build_with_nvcc_rewrites_launches():
    src = open(os.path.join(PROGRAMS, "runtime_api.cu")).read()
    image, meta, _origin = programs.build(src, "runtime_api.cu", "cuda")
    assert image[:4] == b"\x7fELF"
    assert [ln["kernel"] for ln in meta["launches"]] == [
        "scale", "count_threads", "count_threads", "say", "dyn_shared", "dyn_shared", "add_one",
        "add_one", "add_one"]
    assert b"tm_prog_setup" in image and b"tm_prog_exit" in image


def test_cuda_without_nvcc_says_so_and_names_emu(monkeypatch):
    monkeypatch.setattr(programs, "_nvcc", lambda: None)
    with pytest.raises(RuntimeError, match='nvcc.*backend="emu"'):
        tm.run(EXITS, backend="cuda", timeout=RUN_S)


def test_kernel_wild_access_names_the_kernel():
    src = ("__global__ void wild(float *x) { x[threadIdx.x + (1 << 28)] = 1.0f; }\n"
           "int main() {\n  float *d;\n  cudaMalloc(&d, 64);\n  wild<<<1, 32>>>(d);\n"
           "  cudaDeviceSynchronize();\n  return 0;\n}\n")
    r = run(src)
    assert r.returncode == -11
    assert "tiledmm: kernel 'wild' made an invalid memory access" in r.stderr, r.stderr


def test_device_printf_shown_when_the_program_exits_without_synchronising():
    src = ("#include <stdio.h>\n#include <stdlib.h>\n__managed__ int seen;\n"
           "__global__ void hello() { printf(\"block %d\\n\", blockIdx.x); seen = 1; }\n"
           "int main() {\n  hello<<<1, 1>>>();\n  printf(\"host first\\n\");\n  exit(0);\n}\n")
    r = run(src)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "host first\nblock 0\n"


def test_launches_in_templates_and_lambdas(backend):
    r = run(os.path.join(PROGRAMS, "template_launches.cu"), backend=backend)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(PROGRAMS, "template_launches.expected")) as f:
        assert r.stdout == f.read()
    assert [(ln.kernel, ln.grid, ln.block) for ln in r.launches] == \
        [("fill", (3, 1, 1), (128, 1, 1)), ("fill", (1, 1, 1), (64, 1, 1)),
         ("fill", (1, 1, 1), (4, 1, 1))]


def test_pitched_memory_and_stream_queries(backend):
    r = run(os.path.join(PROGRAMS, "pitched.cu"), backend=backend)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(PROGRAMS, "pitched.expected")) as f:
        assert r.stdout == f.read()


def test_cli_reports_the_host_fault_and_a_compile_error(tmp_path):
    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT))
    cli = [sys.executable, "-m", "tiledmm", "run"]
    done = subprocess.run(cli + [os.path.join(PROGRAMS, "host_reads_device.cu"), "--backend",
                                 "emu"], capture_output=True, timeout=RUN_S * 3, env=env)
    assert done.returncode == 128 + 11
    assert b"tiledmm: host code read device memory at host_reads_device.cu:12" in done.stderr
    bad = tmp_path / "bad.cu"
    bad.write_text("int main() {\n  return nope;\n}\n")
    done = subprocess.run(cli + [str(bad), "--backend", "emu"], capture_output=True,
                          timeout=RUN_S * 3, env=env)
    assert done.returncode == 1 and b"bad.cu:2" in done.stderr
    done = subprocess.run(cli + [str(tmp_path / "missing.cu"), "--backend", "emu"],
                          capture_output=True, timeout=RUN_S * 3, env=env)
    assert done.returncode == 2 and b"no program file" in done.stderr
    done = subprocess.run(cli + [os.path.join(LECTURES, "003_matmul_host.cu"), "--backend", "emu",
                                 "--profile", "--", "16"],
                          capture_output=True, timeout=RUN_S * 3, env=env)
    assert done.returncode == 0 and done.stdout.startswith(b"Width 16:")
    assert re.search(rb"MatrixMulKernel\s+1x1x1\s+16x16x1\s+0\s+[\d.]+\s+[\d.]+",
                     done.stderr), done.stderr


def test_profile_counts_equal_tm_compile_profile_of_the_same_kernel():
    np = pytest.importorskip("numpy")
    r = run(os.path.join(LECTURES, "003_matmul_host.cu"), args=["24"], profile=True)
    assert r.returncode == 0, r.stderr
    (launch,) = r.launches
    prog = launch.profile
    assert prog is not None and launch.predicted_ms is not None and launch.predicted_ms > 0
    assert "predicted H100 ms" in repr(r)
    # 18 warps, each 24 iterations of two loads, then one store; no shared memory
    assert (prog.global_load_requests, prog.global_store_requests) == (18 * 24 * 2, 18)
    assert prog.shared_load_requests == prog.shared_store_requests == 0
    with open(os.path.join(HERE, "lectures", "003_MatrixMulKernel_one_block.cu")) as f:
        k = tm.compile(f.read(), "MatrixMulKernel", backend="emu")
    rng = np.random.default_rng(3)
    M = rng.standard_normal((24, 24)).astype(np.float32)
    N = rng.standard_normal((24, 24)).astype(np.float32)
    P = np.zeros((24, 24), np.float32)
    res = k((1, 1), (24, 24), M, N, P, 24, profile=True, timeout=RUN_S)
    for name in ("global_load_requests", "global_load_sectors", "global_store_requests",
                 "global_store_sectors", "shared_load_requests", "barriers"):
        assert getattr(prog, name) == getattr(res.profile, name), name
    with pytest.raises(NotImplementedError, match="emulator only"):
        tm.run(EXITS, backend="cuda", profile=True)


def test_failed_device_assert_names_the_kernel():
    src = ("#include <assert.h>\n__global__ void check(int n) { assert(n > 5); }\n"
           "int main() {\n  check<<<1, 1>>>(3);\n  cudaDeviceSynchronize();\n  return 0;\n}\n")
    r = run(src)
    # as on a GPU (issue 43): the GPU's message names the kernel's function, the thread ends,
    # and the launch's error (cudaErrorAssert) is the next synchronising call's; the program goes on
    assert r.returncode == 0, r.stderr
    assert "program.cu:2: void check(int): block: [0,0,0], thread: [0,0,0] Assertion `n > 5` failed." \
        in r.stderr
