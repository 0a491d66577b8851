"""Check mode for whole programs: tm.run(..., check=True) and run --check (issue 32).

On emu every launch runs in check mode with the program's own allocations, and the runtime
reports the host-side mistakes compute-sanitizer reports, each as a `tiledmm:` line of stderr
naming the file and line (and the allocation with its line) and as a ProgramResult.problems
entry. tests/programs/check/mistakes.cu holds one mistake per mode (argv[1]) so that one build
serves every test; its `// @name` comments mark the lines the reports must name. On cuda,
check=True runs compute-sanitizer (benchmarks/gpu_run.sh runs the cuda tests here on the H200).
"""
import os
import re
import subprocess
import sys

import pytest

import tiledmm as tm
from tiledmm.programs import run as programs
from tiledmm.programs import sanitize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MISTAKES = os.path.join(HERE, "programs", "check", "mistakes.cu")
RUN_S = 120
with open(MISTAKES) as _f:
    LINE = {m.group(1): i + 1 for i, text in enumerate(_f)
            for m in [re.search(r"// @(\w+)", text)] if m}


def check(mode, backend="emu"):
    return tm.run(MISTAKES, args=[mode], backend=backend, check=True, timeout=RUN_S)


def kinds(r):
    return [p["kind"] for p in r.problems]


def tiledmm_lines(r):
    return [ln for ln in r.stderr.splitlines() if ln.startswith("tiledmm:")]


def test_a_correct_program_has_no_report_and_its_output_is_unchanged():
    r = check("ok")
    plain = tm.run(MISTAKES, args=["ok"], backend="emu", timeout=RUN_S)
    assert r.returncode == 0 and r.problems == [] and r.stderr == "", r.stderr
    # c = a + b = 0.5 i + 1000 - i
    assert r.stdout == plain.stdout == "c[10] = 995.0, c[999] = 500.5\n"
    assert len(r.launches) == 1 and r.launches[0].kernel == "add"


def test_out_of_bounds_names_the_parameter_the_allocation_and_the_launch():
    r = check("oob")
    assert kinds(r) == ["kernel"], r.stderr
    msg = r.problems[0]["message"]
    assert r.problems[0]["line"] == LINE["oob"] and r.problems[0]["file"] == "mistakes.cu"
    assert "out-of-bounds read of a[1000]" in msg and "has 1000 elements" in msg
    assert f"given d_a: 4000 bytes from cudaMalloc at mistakes.cu:{LINE['alloc_a']}" in msg
    assert "thread (232,0,0) of block (3,0,0)" in msg
    assert tiledmm_lines(r) == [f"tiledmm: mistakes.cu:{LINE['oob']}: {msg}"]
    # the access outside the buffer was not made: the program goes on, its output right
    assert r.returncode == 0 and r.stdout == "c[10] = 995.0, c[999] = 500.5\n"


@pytest.mark.parametrize("mode", ["past_end", "wrong_kind"])
def test_a_failed_copy_then_the_uninitialised_read_then_the_unchecked_error(mode):
    r = check(mode)
    assert kinds(r) == ["api_error", "initcheck", "unchecked"], r.stderr
    copy, read, unchecked = r.problems
    assert copy["line"] == unchecked["line"] == LINE[mode]
    assert "cudaErrorInvalidValue" in copy["message"] and "nothing was copied" in copy["message"]
    assert f"d_b: 4000 bytes of device memory from cudaMalloc at mistakes.cu:{LINE['alloc_b']}" \
        in copy["message"]
    if mode == "past_end":
        assert "cudaMemcpy of 4004 bytes runs past the end of the destination" in copy["message"]
    else:
        assert "cudaMemcpyDeviceToHost" in copy["message"] and "h_b: host memory" in \
            copy["message"]
    # the copy moved nothing, so the kernel reads d_b never written (initcheck)
    assert read["line"] == LINE["launch"]
    assert "read of uninitialised device memory: b[0]" in read["message"]
    assert f"given d_b: 4000 bytes from cudaMalloc at mistakes.cu:{LINE['alloc_b']}" in \
        read["message"]
    assert "never checked the error" in unchecked["message"]
    # c = a + (whatever d_b held: zeros here) -- the output a GPU would give differs, the report
    # is what matters; every report is also a tiledmm: line
    assert len(tiledmm_lines(r)) == 3


def test_a_failed_copy_whose_error_is_checked_is_not_reported_as_unchecked():
    r = check("checked_copy")
    assert kinds(r) == ["api_error"], r.stderr
    assert r.problems[0]["line"] == LINE["checked_copy"]
    assert r.stdout.startswith("error: invalid argument\n")


def test_uninitialised_device_memory_read_by_a_kernel():
    r = check("uninit")
    assert kinds(r) == ["initcheck"], r.stderr
    assert r.problems[0]["line"] == LINE["launch"]
    assert "b[0]" in r.problems[0]["message"] and "and 999 more such reads" in \
        r.problems[0]["message"]


def test_a_launch_error_never_checked_is_reported_at_exit():
    r = check("unchecked_launch")
    assert kinds(r) == ["unchecked"], r.stderr
    assert r.problems[0]["line"] == LINE["bad_launch"]
    assert "the launch of kernel 'add' failed with cudaErrorInvalidValue" in \
        r.problems[0]["message"]
    assert "cudaGetLastError()" in r.problems[0]["message"]


def test_a_launch_error_read_with_cudaGetLastError_is_checked():
    r = check("checked_launch")
    assert r.problems == [], r.stderr
    assert r.stdout.startswith("launch: cudaErrorInvalidValue\n")


def test_a_shared_memory_race_is_reported_with_the_launch():
    r = check("race")
    assert kinds(r) == ["kernel"], r.stderr
    assert r.problems[0]["line"] == LINE["race"]
    assert "shared memory" in r.problems[0]["message"] and "tile[" in r.problems[0]["message"]


def test_device_memory_never_freed_is_reported_with_its_allocation_line():
    r = check("leak")
    assert kinds(r) == ["leak"], r.stderr
    assert r.problems[0]["line"] == LINE["alloc_b"]
    assert "4000 bytes of device memory from cudaMalloc (d_b) were never freed" in \
        r.problems[0]["message"] and "cudaFree(d_b)" in r.problems[0]["message"]


# A barrier only half the block's threads reach: line 5 (tests/programs/check/).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "check",
                       "divergent_barrier.cu")) as _f:
    DIVERGENT = _f.read()


def test_a_divergent_barrier_is_reported_with_its_line():
    r = tm.run(DIVERGENT, backend="emu", check=True, timeout=RUN_S)
    assert "__syncthreads" in r.stderr and "program.cu:5" in r.stderr, r.stderr
    assert r.stdout.strip() != "cudaSuccess"


def test_the_terminal_run_check():
    done = subprocess.run([sys.executable, "-m", "tiledmm", "run", "--check", "--backend", "emu",
                           MISTAKES, "--", "leak"], capture_output=True, text=True,
                          timeout=RUN_S * 2, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "c[10] = 995.0, c[999] = 500.5\n"
    assert f"tiledmm: mistakes.cu:{LINE['alloc_b']}: 4000 bytes of device memory" in done.stderr


def test_check_and_profile_together_are_refused():
    with pytest.raises(ValueError, match="check=True and profile=True"):
        tm.run(MISTAKES, backend="emu", check=True, profile=True)


def test_cuda_check_without_compute_sanitizer_names_emu(monkeypatch):
    monkeypatch.setattr(sanitize, "compute_sanitizer", lambda: None)
    with pytest.raises(RuntimeError, match='compute-sanitizer.*backend="emu"'):
        tm.run(MISTAKES, backend="cuda", check=True)


SANITIZER_LOG = """\
========= COMPUTE-SANITIZER
========= Program hit cudaErrorInvalidValue (error 1) on CUDA API call to cudaMemcpy.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: main in /tmp/x/mistakes.cu:51 [0x1234] in program.so
=========
========= Leaked 4000 bytes at 0x7f0000000000
=========     Saved host backtrace up to driver entry point at cudaMalloc time
=========         Host Frame: main in /tmp/x/mistakes.cu:47 [0x99] in program.so
=========
========= LEAK SUMMARY: 4000 bytes leaked in 1 allocations
========= ERROR SUMMARY: 2 errors
"""


def test_compute_sanitizer_log_becomes_problems_with_lines():
    found = sanitize.sanitizer_problems(SANITIZER_LOG, "memcheck")
    assert [(p["file"], p["line"]) for p in found] == [("mistakes.cu", 51), ("mistakes.cu", 47)]
    assert found[0]["message"].startswith("compute-sanitizer memcheck: Program hit "
                                          "cudaErrorInvalidValue")
    assert "Leaked 4000 bytes" in found[1]["message"]


@pytest.mark.skipif(sanitize.compute_sanitizer() is None or not programs._gpu_arch(),
                    reason="needs a GPU and compute-sanitizer")
@pytest.mark.parametrize("mode,kind", [("past_end", "cudaMemcpy"), ("leak", "Leaked 4,000 bytes"),
                                       ("oob", "Invalid __global__ read"),
                                       ("uninit", "Uninitialized __global__ memory read")])
def test_compute_sanitizer_finds_the_same_on_cuda(mode, kind):
    r = check(mode, backend="cuda")
    assert any(kind in p["message"] for p in r.problems), r.stderr


def test_the_sanitizer_runs_its_binary_not_the_toolkits_shell_wrapper(tmp_path, monkeypatch):
    # CUDA's bin/compute-sanitizer is a #!/bin/sh wrapper of <toolkit>/compute-sanitizer/...
    (tmp_path / "bin").mkdir()
    (tmp_path / "compute-sanitizer").mkdir()
    wrapper = tmp_path / "bin" / "compute-sanitizer"
    binary = tmp_path / "compute-sanitizer" / "compute-sanitizer"
    wrapper.write_text('#!/bin/sh\nexec "$(dirname "$0")/../compute-sanitizer/compute-sanitizer"\n')
    binary.write_bytes(b"\x7fELF")
    for f in (wrapper, binary):
        f.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert sanitize.compute_sanitizer() == str(binary)


def test_error_checking_idioms_compile_and_a_correct_program_gets_no_report():
    path = os.path.join(HERE, "programs", "check", "idioms.cu")
    r = tm.run(path, backend="emu", check=True, timeout=RUN_S)
    plain = tm.run(path, backend="emu", timeout=RUN_S)
    assert r.returncode == 0 and r.problems == [] and r.stderr == "", r.stderr
    assert r.stdout == plain.stdout == ("in[0] = 1.500000, out[0] = 3.000000\n"
                                        "rc 0 ok 1 h[299] = 3.0 last 0\nno error\n")


def test_a_program_of_two_files_is_checked_in_both(tmp_path):
    (tmp_path / "kernels.cu").write_text(
        "__global__ void shift(const float *in, float *out, int n)\n"
        "{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) out[i] = in[i + 1];\n}\n")
    (tmp_path / "main.cu").write_text(
        "#include <cstdio>\n__global__ void shift(const float *in, float *out, int n);\n"
        "int main()\n{\n    float h[64], *d_in, *d_out;\n"
        "    for (int i = 0; i < 64; ++i) h[i] = i;\n"
        "    cudaMalloc(&d_in, sizeof h);\n    cudaMalloc(&d_out, sizeof h);\n"
        "    cudaMemcpy(d_in, h, sizeof h, cudaMemcpyHostToDevice);\n"
        "    shift<<<2, 32>>>(d_in, d_out, 64);\n"
        "    cudaMemcpy(h, d_out, sizeof h, cudaMemcpyDeviceToHost);\n"
        "    printf(\"%g\\n\", h[10]);\n    cudaFree(d_in);\n    cudaFree(d_out);\n    return 0;\n}\n")
    r = tm.run([str(tmp_path / "main.cu"), str(tmp_path / "kernels.cu")], backend="emu",
               check=True, timeout=RUN_S)
    assert r.returncode == 0 and r.stdout == "11\n", r.stderr
    assert kinds(r) == ["kernel"], r.stderr
    assert r.problems[0]["file"] == "main.cu" and r.problems[0]["line"] == 10
    assert "out-of-bounds read of in[64]" in r.problems[0]["message"]
    assert "given d_in: 256 bytes from cudaMalloc at main.cu:7" in r.problems[0]["message"]
