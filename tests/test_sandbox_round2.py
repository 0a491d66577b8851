"""The sandbox, second round (issue 45): the caller trusts nothing the student touched, and
grades cannot be bought. Every subprocess here runs under a time limit."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.programs.report import RECORDS_MOST
from conftest import HAVE_GPU, pythonpath
from tiledmm.confine import isolation, sandbox

HERE = Path(__file__).resolve().parent
ROOT = str(HERE.parent)


def _env(**extra):
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p), **extra)


def _attacks(tmp_path, names, timeout=300):
    """tests/attacks/attacks.py on `names` in a process of its own: (returncode, results)."""
    sys.path.insert(0, str(HERE / "attacks"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"names": names, "fill": {"OUTSIDE": str(tmp_path / "out")}}))
    proc = subprocess.run([sys.executable, str(HERE / "attacks" / "attacks.py"), str(config)],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env=_env())
    out = proc.stdout.rsplit("@@attacks@@", 1)
    return proc, (json.loads(out[1]) if len(out) == 2 else None)


# -- 1. shared memory is sealed; scratch folders are swept ------------------------------------

def test_the_arguments_file_can_be_neither_shrunk_nor_grown():
    f = isolation.ArgumentFile()
    try:
        f.reserve(1000)
        size = os.fstat(f.fd).st_size
        for new in (0, size // 2, size * 4):
            with pytest.raises(PermissionError):
                os.ftruncate(f.fd, new)
        assert os.fstat(f.fd).st_size == size
    finally:
        f.release()


def test_a_kernel_truncating_the_arguments_file_does_not_kill_the_caller(tmp_path):
    proc, out = _attacks(tmp_path, ["truncate_arguments", "grow_arguments"])
    assert proc.returncode == 0 and out is not None, (proc.returncode, proc.stderr[-2000:])
    assert "LEAK:" not in proc.stdout
    for name in ("truncate_arguments", "grow_arguments"):
        assert out[name]["correct"], (name, out[name])


def test_scratch_folders_of_a_gone_owner_are_swept_and_a_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)
    gone = tmp_path / f"tiledmm-worker-{dead.pid}.12345-abc"
    gone.mkdir()
    (gone / "big").write_bytes(b"x" * 1000)
    mine = Path(sandbox.scratch_folder("worker"))
    try:
        live = tmp_path / mine.name
        live.mkdir()
        other = tmp_path / "tiledmm-cache-1000"
        other.mkdir()
        sandbox.sweep_scratch(str(tmp_path))
        assert not gone.exists()
        assert live.exists() and other.exists()
        assert mine.name.startswith(f"tiledmm-worker-{os.getpid()}.")
    finally:
        os.rmdir(mine)


def test_the_worker_scratch_folder_names_its_owner():
    k = tm.compile("__global__ void f(float *x) { x[threadIdx.x] += 1; }", backend="emu")
    x = np.zeros(4, np.float32)
    k(1, 4, x, backend="emu", timeout=30)
    assert x.tolist() == [1, 1, 1, 1]
    scratch = isolation.worker("emu").scratch
    assert os.path.basename(scratch).startswith(f"tiledmm-worker-{os.getpid()}.")


def test_a_worker_whose_exit_hangs_is_killed_not_raised(monkeypatch):
    w = isolation.Worker()
    try:
        w.call({"op": "ping"}, timeout=60)
        monkeypatch.setattr(w, "_wait", lambda *a: {"ok": True, "pid": 1, "confined": True,
                                                    "exit": True})
        start = time.monotonic()
        reply = w.call({"op": "ping"}, timeout=60)   # the worker does not end: waited 10 s
        assert reply["exit"] and time.monotonic() - start < 40
        assert w.proc is None
    finally:
        w.stop()


# -- 6. seccomp: no owner to signal; the terminal's ioctls by their type --------------------

def test_signal_owner_and_tcsets2_are_refused(tmp_path):
    proc, out = _attacks(tmp_path, ["signal_owner", "tcsets2"])
    assert proc.returncode == 0 and out is not None, (proc.returncode, proc.stderr[-2000:])
    assert "LEAK:" not in proc.stdout, proc.stdout[-2000:]
    assert out["signal_owner"]["correct"] and out["tcsets2"]["correct"], out


# -- 2. one bounded reader; bounded output -------------------------------------------------

def test_read_bounded_follows_no_link_waits_on_no_fifo_and_stops_at_its_bound(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert sandbox.read_bounded(str(tmp_path / "f"), 10) == b"x" * 10
    with pytest.raises(sandbox.UnsafeFile):
        sandbox.read_bounded(str(tmp_path / "f"), 10, whole=True)
    (tmp_path / "link").symlink_to(tmp_path / "f")
    with pytest.raises(sandbox.UnsafeFile):
        sandbox.read_bounded(str(tmp_path / "link"), 1000)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(sandbox.UnsafeFile):
        sandbox.read_bounded("fifo", 1000, folder=str(tmp_path))
    with pytest.raises(OSError):
        sandbox.read_bounded("../f", 1000, folder=str(tmp_path))


def _program(tmp_path, body, name="p.cu", timeout=120, **kw):
    """tm.run of `body` (main's statements) in a process of its own, under a time limit:
    (returncode, stdout length, stdout head, stderr, launches)."""
    src = tmp_path / name
    src.write_text("#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <unistd.h>\n"
                   "#include <sys/stat.h>\n__global__ void k(int *x) { x[0] = 1; }\n"
                   f"int main() {{\n{body}\n return 0; }}\n")
    code = ("import sys, json, tiledmm as tm\n"
            f"r = tm.run({str(src)!r}, backend='emu', timeout=60)\n"
            "print(json.dumps([r.returncode, len(r.stdout), r.stdout[:200], r.stderr[-2000:], "
            "len(r.launches)]))")
    r, w = os.pipe()   # the caller's stdin: a pipe nobody writes or closes (a terminal)
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, cwd=kw.get("cwd", tmp_path), env=_env(), stdin=r)
    finally:
        os.close(r)
        os.close(w)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_report_replaced_by_a_link_to_the_callers_stdin_does_not_hang_the_caller(tmp_path):
    rc, _, out, err, _ = _program(tmp_path, r'''
        char p[512]; snprintf(p, sizeof p, "%s/report.jsonl", getenv("TMPDIR"));
        unlink(p); printf("link %d\n", symlink("/proc/self/fd/0", p));''')
    assert rc == 0 and out == "link 0\n", (out, err)


def test_forged_launch_records_are_capped(tmp_path):
    rc, _, _, err, launches = _program(tmp_path, r'''
        char p[512]; snprintf(p, sizeof p, "%s/report.jsonl", getenv("TMPDIR"));
        FILE *f = fopen(p, "a");
        for (int i = 0; f && i < 30000; i++)
            fprintf(f, "{\"event\": \"launch\", \"kernel\": \"k\", \"grid\": [1,1,1], "
                       "\"block\": [1,1,1], \"ms\": 0.1}\n");
        if (f) fclose(f);''')
    assert rc == 0, err
    assert 0 < launches <= RECORDS_MOST


def test_program_output_is_read_with_a_bound(tmp_path):
    rc, n, _, err, _ = _program(tmp_path, r'''
        static char line[1 << 16]; memset(line, 'y', sizeof line - 1);
        for (int i = 0; i < 512; i++) fputs(line, stdout);''')   # 32 MiB
    assert rc == 0, err
    assert n <= sandbox.OUTPUT_MOST + 200


def test_the_cache_key_holds_a_cu_file_the_program_includes(tmp_path):
    (tmp_path / "kernel.cu").write_text("#define ANSWER 1\n")
    main = tmp_path / "main.cu"
    main.write_text('#include <cstdio>\n#include "kernel.cu"\n'
                    'int main() { printf("%d\\n", ANSWER); return 0; }\n')
    first = tm.run(main, backend="emu", timeout=60)
    (tmp_path / "kernel.cu").write_text("#define ANSWER 2\n")
    second = tm.run(main, backend="emu", timeout=60)
    assert (first.stdout, second.stdout) == ("1\n", "2\n"), (first.stderr, second.stderr)


# -- 3. the caller's working folder is never granted ----------------------------------------

def test_a_program_cannot_read_the_callers_working_folder(tmp_path):
    grader = tmp_path / "grader"
    grader.mkdir()
    (grader / "hidden_tests.py").write_text("SECRET = 'the answer'\n")
    rc, _, out, err, _ = _program(tmp_path, r'''
        FILE *f = fopen("hidden_tests.py", "r");
        char cwd[512] = {0}; getcwd(cwd, sizeof cwd);
        printf("%s\n", f ? "read" : "denied");''', cwd=grader)
    assert rc == 0 and out == "denied\n", (out, err)


# -- 4. marks that cannot be bought ---------------------------------------------------------

def test_the_sum_tolerance_is_zero_for_exact_inputs_and_log2_for_floats():
    from tiledmm import testing
    from tiledmm.grading import compare
    rng = np.random.default_rng(1)
    ints = testing.exact_integer_matrix(rng, 1 << 20, np.float32) / 4
    assert testing.sum_tolerance(ints) == 0.0
    floats = rng.standard_normal(1 << 16).astype(np.float32)
    tol = testing.sum_tolerance(floats)
    assert 0 < tol <= 2 * 18 * np.finfo(np.float32).eps * np.abs(floats).sum() * 1.0001
    # do nothing (0) and do half fail both kinds
    for x in (ints, floats):
        t = testing.sum_tolerance(x)
        assert abs(x.astype(np.float64).sum()) > t
        assert abs(x[len(x) // 2:].astype(np.float64).sum()) > t
    with pytest.raises(AssertionError):
        testing.assert_sum_close(0.0, ints)
    # one place: the grader's 'sum' is testing's
    from tiledmm.grading.builtin import BUILTIN
    assert compare.tolerance(BUILTIN["reduce"](), None, {"x": ints}, np.float32) == 0.0


LAZY = {
    "matmul": ("__global__ void mm(const float *A, const float *B, float *C, int M, int N, int K)",
               "int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;"
               " if (r < M / 2 && c < N) { float s = 0; for (int k = 0; k < K; k++)"
               " s += A[r * K + k] * B[k * N + c]; C[r * N + c] = s; }"),
    "matmul_square": ("__global__ void mm(const float *M, const float *N, float *P, int Width)",
                      "int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;"
                      " if (r < Width / 2 && c < Width) { float s = 0; for (int k = 0; k < Width; k++)"
                      " s += M[r * Width + k] * N[k * Width + c]; P[r * Width + c] = s; }"),
    "reduce": ("__global__ void sum(const float *x, float *out, int n)",
               "int i = blockIdx.x * blockDim.x + threadIdx.x;"
               " if (i < n / 2) atomicAdd(&out[0], x[i]);"),
    # right up to 65536 elements, nothing above (the sum tolerance was larger than the sum)
    "reduce_above_65536": ("__global__ void sum(const float *x, float *out, int n)",
                           "int i = blockIdx.x * blockDim.x + threadIdx.x;"
                           " if (n <= 65536 && i < n) atomicAdd(&out[0], x[i]);"),
    "vec_add": ("__global__ void add(const float *A, const float *B, float *C, int n)",
                "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n / 2) C[i] = A[i] + B[i];"),
    "mat_add": ("__global__ void add(const float *A, const float *B, float *C, int M, int N)",
                "int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;"
                " if (r < M / 2 && c < N) C[r * N + c] = A[r * N + c] + B[r * N + c];"),
}


@pytest.mark.parametrize("assignment", sorted(LAZY))
def test_do_nothing_and_do_half_fail_every_builtin_assignment(assignment):
    head, half = LAZY[assignment]
    for body in ("", half):
        report = tm.grade(f"{head} {{ {body} }}\n", assignment.split("_above")[0],
                          backend="emu", check=False,
                          speed=False, seed=5, timeout=30)
        assert report.score < report.max_score, (assignment, body, report.headline())
        if not body:
            assert report.score == 0 or assignment.startswith("reduce"), report.headline()



# -- 5. the grader: bounded launch lines, report channels the student cannot write --------

VEC_ADD = ("__global__ void add(const float *A, const float *B, float *C, int n)\n"
           "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) C[i] = A[i] + B[i]; }\n")


@pytest.mark.parametrize("text", ["(1,) * 10000000", "1" + "+1" * 100000, "int(1e999)",
                                  "9" * 400 + " * " + "9" * 400, "(1, 2, 3, 4)", "1e999",
                                  "max(" * 60 + "1" + ")" * 60])
def test_launch_expressions_out_of_bounds_are_value_errors(text):
    from tiledmm.grading.launch_spec import evaluate
    with pytest.raises(ValueError):
        evaluate(text, {"n": 5})


def test_a_huge_launch_line_is_a_clean_per_submission_error():
    start = time.monotonic()
    report = tm.grade(VEC_ADD + "// tiledmm-grade: grid ((1,) * 10000000)\n", "vec_add",
                      backend="emu", check=False, speed=False, seed=3, timeout=30)
    assert report.score == 0 and time.monotonic() - start < 120
    assert len(json.dumps(report.to_dict(), default=str)) < 200_000


def test_a_kernels_printf_cannot_forge_the_score_line(tmp_path):
    sub = tmp_path / "forge.cu"
    sub.write_text("#include <cstdio>\n__global__ void add(const float *A, const float *B, "
                   "float *C, int n)\n{ if (blockIdx.x == 0 && threadIdx.x == 0) "
                   "printf(\"vec_add: 6 / 6 points, 6 of 6 cases pass (add on emu)\\n\"); }\n")
    proc = subprocess.run([sys.executable, "-m", "tiledmm", "grade", str(sub), "--assignment",
                           "vec_add", "--backend", "emu", "--no-check", "--no-speed", "-q",
                           "--timeout", "20"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=_env())
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vec_add: 0 / "), proc.stdout[-2000:]


def test_junit_xml_holds_control_characters_a_submission_printed():
    import xml.etree.ElementTree as ET
    from tiledmm.grading.outputs import junit_xml
    report = tm.grade(VEC_ADD.replace("A[i] + B[i]", "A[i]"), "vec_add", backend="emu",
                      check=False, speed=False, seed=3, timeout=30)
    report.cases[0]["passed"] = False
    report.cases[0]["message"] = "printed \x00\x1b[31m\x07 \ud800 red"
    root = ET.fromstring(junit_xml(report))
    assert "\\x1b[31m" in ET.tostring(root, encoding="unicode")


def test_the_compile_child_reads_only_the_source_files_beside_a_program(tmp_path):
    (tmp_path / "solution_notes.txt").write_text("SECRET_NOTES\n")
    (tmp_path / "helper.cuh").write_text("#define HELPED 3\n")
    main = tmp_path / "main.cu"
    main.write_text('#include <cstdio>\n#include "helper.cuh"\n'
                    'int main() { printf("%d\\n", HELPED); return 0; }\n')
    assert tm.run(main, backend="emu", timeout=60).stdout == "3\n"
    main.write_text('#include <cstdio>\nconst char *s =\n#include "solution_notes.txt"\n;\n'
                    'int main() { return 0; }\n')
    with pytest.raises(tm.CompileError) as info:
        tm.run(main, backend="emu", timeout=60)
    assert "SECRET_NOTES" not in str(info.value) and "SECRET_NOTES" not in (info.value.log or "")


def test_by_kernel_parsing_is_bounded_in_size_and_expansion():
    from tiledmm.grading.programs import program_kernel_source
    names = [f"N{i}" for i in range(60)]
    defines = "".join(f"#define A{j} ({' + '.join(f'A{j + 1}' for _ in names)})\n"
                      for j in range(4)) + "#define A4 1\n"
    program = (defines + "__global__ void k(float *x) { }\n"
               "int main() { float *x = 0; k<<<A0, 256>>>(x); return 0; }\n")
    start = time.monotonic()
    with pytest.raises(ValueError):
        program_kernel_source(program)
    with pytest.raises(ValueError):
        program_kernel_source("// pad\n" * 100_000 + program)
    assert time.monotonic() - start < 10


# -- 7. limits that hold for root -------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="RLIMIT_NPROC binds a non-root user already")
def test_threads_are_bounded_for_root_too(tmp_path):
    import re
    proc, out = _attacks(tmp_path, ["small_stack_threads"])
    assert proc.returncode == 0 and out is not None, proc.stderr[-2000:]
    made = [int(m) for m in re.findall(r"THREADS:(\d+)", proc.stdout)]
    assert made and made[0] < sandbox.threads_most(), made
    assert out["small_stack_threads"]["correct"], out


# -- 2 (issue 45, round 2). between calls: no thread a kernel left behind runs ---------------

def _cpu_seconds(pid):
    """utime + stime of process `pid` (all its threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_a_thread_left_running_after_a_launch_burns_no_cpu_and_the_next_call_works():
    import sys as _sys
    _sys.path.insert(0, str(HERE / "attacks"))
    import attacks
    k = tm.compile(attacks.source("spinning_thread", {}), backend="emu")
    A, B = np.arange(1000, dtype=np.float32), np.ones(1000, np.float32)
    C = np.zeros_like(A)
    k(4, 256, A, B, C, 1000, backend="emu", timeout=60)
    assert np.array_equal(C, A + B)
    pid = isolation.worker("emu").pid
    if pid is not None:   # still there: stopped, and burning nothing
        before = _cpu_seconds(pid)
        time.sleep(0.5)
        assert _cpu_seconds(pid) - before <= 1, "the worker burnt CPU between calls"
    C[:] = 0
    plain = tm.compile(attacks.source("environment", {}), backend="emu")
    plain(4, 256, A, B, C, 1000, backend="emu", timeout=60)
    assert np.array_equal(C, A + B)
    # the worker that served the spinning kernel is gone; the new one is stopped between calls
    assert isolation.worker("emu").pid != pid
    now = isolation.worker("emu").pid
    with open(f"/proc/{now}/stat") as f:
        assert f.read().rsplit(")", 1)[1].split()[0] == "T"


# -- 9 (issue 45). NVRTC has a time limit ----------------------------------------------------

# 100,000 dependent statements: NVRTC takes about 20 s on this 2-core machine (10.5 s for half),
# far past a limit of a second or two on any machine. (A constant expression of 10^10 steps was
# used before: NVRTC gives up on it as too complex, within the limit on an idle machine.)
_SLOW_FOR_NVRTC = ('extern "C" __global__ void k(float *o)\n{\n    float a = o[threadIdx.x];\n' +
                   "".join(f"    a = a * o[{i % 97}] + {i}.5f;\n" for i in range(100000)) +
                   "    o[threadIdx.x] = a;\n}\n")


def test_nvrtc_stops_at_its_time_limit():
    from tiledmm.toolchain import compile_nvrtc
    try:
        lib = compile_nvrtc._load_nvrtc()
    except RuntimeError:
        pytest.skip("no NVRTC here")
    if not hasattr(lib, "nvrtcSetFlowCallback"):
        pytest.skip("this NVRTC has no flow callback (the caller's timeout on the worker holds)")
    start = time.monotonic()
    with pytest.raises(compile_nvrtc.CompileTimeout, match="more than 1 s"):
        compile_nvrtc._nvrtc_compile(lib, _SLOW_FOR_NVRTC, "k", (),
                                     ["--gpu-architecture=compute_90"], False, seconds=1)
    assert time.monotonic() - start < 30


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA device")
def test_the_graders_compile_limit_bounds_nvrtc():
    """grade --compile-timeout reaches NVRTC, which compiles in the worker on cuda: the grader
    makes its Kernel with compile_seconds (grading/compile_limits.py)."""
    from tiledmm.toolchain.compile_emu import CompileTimeout
    from tiledmm.user_kernels.kernel import Kernel
    start = time.monotonic()
    with pytest.raises(CompileTimeout, match="more than 3 s"):
        Kernel(_SLOW_FOR_NVRTC, "k", backend="cuda", compile_seconds=3)
    assert time.monotonic() - start < 120


# -- 3 (issue 45, round 2). file metadata: nothing outside the grants exists ----------------

_STAT_KERNEL = r"""
#include <sys/stat.h>
#include <cstdio>
#if __has_include("@SECRET@")
#define SEEN 1
#else
#define SEEN 0
#endif
__global__ void add(const float *A, const float *B, float *C, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
        struct stat st;
        printf("STAT:%d:%d:%d\n", stat("@SECRET@", &st), stat("@FOLDER@", &st), SEEN);
    }
    if (i < n) C[i] = A[i] + B[i];
}
"""


def test_stat_and_has_include_see_nothing_outside_the_grants(tmp_path, capfd):
    if sandbox.status().get("metadata"):   # this host allows no mount namespace: said so
        pytest.skip(f"no private root here: {sandbox.status().get('metadata')}")
    secret = tmp_path / "solution_notes.txt"
    secret.write_text("the answer")
    src = _STAT_KERNEL.replace("@SECRET@", str(secret)).replace("@FOLDER@", str(HERE))
    k = tm.compile(src, backend="emu")
    A, B = np.arange(300, dtype=np.float32), np.ones(300, np.float32)
    C = np.zeros_like(A)
    k(2, 256, A, B, C, 300, backend="emu", timeout=60)
    assert np.array_equal(C, A + B)
    assert "STAT:-1:-1:0" in capfd.readouterr().out
    assert "private root" in sandbox.describe()


_FALLBACK = """
import sys, numpy as np, tiledmm as tm
from tiledmm.confine import sandbox
k = tm.compile(sys.stdin.read(), backend="emu")
A, B = np.arange(300, dtype=np.float32), np.ones(300, np.float32)
C = np.zeros_like(A)
k(2, 256, A, B, C, 300, backend="emu", timeout=60)
sys.stdout.flush()
print("SUM-OK" if np.array_equal(C, A + B) else "SUM-WRONG")
print(sandbox.describe())
"""


def test_without_a_private_root_the_sandbox_still_holds_and_says_metadata_is_exposed(tmp_path):
    """The fallback where a host allows no mount namespace (Docker's default profile), forced
    with TILEDMM_SANDBOX_PRIVATE_ROOT=off: the kernel still runs confined (Landlock, seccomp),
    stat() and __has_include then see a path outside the grants, and describe() (python -m
    tiledmm info) says that file metadata is exposed and why."""
    if not sandbox.status().get("confined"):
        pytest.skip(f"no sandbox here: {sandbox.status().get('reason')}")
    secret = tmp_path / "solution_notes.txt"
    secret.write_text("the answer")
    # stat() only: __has_include of a file that exists but may not be read stops the compile
    # ("Permission denied"), which exposes it the same way
    src = _STAT_KERNEL.replace('__has_include("@SECRET@")', '__has_include("/no/such/file.h")') \
        .replace("@SECRET@", str(secret)).replace("@FOLDER@", str(HERE))
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(tm.__file__)))
    env = dict(os.environ, TILEDMM_SANDBOX_PRIVATE_ROOT="off",
               TILEDMM_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=pythonpath(package_parent))
    done = subprocess.run([sys.executable, "-c", _FALLBACK], input=src, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SUM-OK" in done.stdout
    assert "STAT:0:0:0" in done.stdout   # seen (Landlock still refuses to open them)
    assert "file metadata (stat, __has_include) exposed: switched off by " \
        "TILEDMM_SANDBOX_PRIVATE_ROOT=off" in done.stdout
    assert "sandbox: confined" in done.stdout


# -- 9 (issue 45). a child with the GPU: RLIMIT_DATA and a /dev/shm of its own ---------------

_GPU_CHILD = ("import os, resource\n"
              "print(resource.getrlimit(resource.RLIMIT_DATA)[0], sorted(os.listdir('/dev/shm')),"
              " os.path.exists(@PLANTED@))")


def test_a_child_with_the_gpu_has_a_data_limit_and_sees_no_other_shared_memory(tmp_path):
    planted = f"/dev/shm/tiledmm-test-{os.getpid()}"
    Path(planted).write_text("another process's shared memory")
    try:
        argv = [sys.executable, "-I", "-c", sandbox._bootstrap(
            sandbox.run_policy(str(tmp_path), devices=True),
            _GPU_CHILD.replace("@PLANTED@", repr(planted)), True)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env=sandbox.minimal_env())
    finally:
        os.unlink(planted)
    assert done.returncode == 0, done.stderr[-2000:]
    data = int(done.stdout.split()[0])
    assert 0 < data == sandbox._gpu_memory(), done.stdout
    if not sandbox.status().get("metadata"):   # a private root: an empty /dev/shm of its own
        assert done.stdout.split(None, 1)[1].strip() == "[] False", done.stdout


_CUDA_PROGRAM = r"""
#include <cstdio>
#include <cstring>
__global__ void twice(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }
int main() {
    const int n = 1 << 26;   // 256 MiB of device memory, and as much pinned host memory
    float *h, *d;
    if (cudaMallocHost(&h, n * sizeof(float)) != cudaSuccess) { puts("no pinned memory"); return 1; }
    for (int i = 0; i < n; ++i) h[i] = (float)(i % 1000);
    cudaMalloc(&d, n * sizeof(float));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    twice<<<n / 256, 256>>>(d, n);
    cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += h[i] != 2.0f * (float)(i % 1000);
    char line[256]; FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f)) if (!strncmp(line, "VmData:", 7)) printf("%s", line);
    printf("bad=%d err=%s\n", bad, cudaGetErrorString(cudaGetLastError()));
    cudaFree(d); cudaFreeHost(h);
    return bad != 0;
}
"""


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("tiledmm")._backend.cuda_device_count(),
                    reason="needs a CUDA device")
def test_a_cuda_program_runs_within_its_data_limit(tmp_path):
    """The lead's GPU check of TILEDMM_SANDBOX_GPU_MEMORY's default: a program with 256 MiB of
    pinned and device memory runs; its VmData (printed: the driver's need) is under the limit."""
    src = tmp_path / "twice.cu"
    src.write_text(_CUDA_PROGRAM)
    r = tm.run(str(src), backend="cuda", timeout=300)
    print(r.stdout)
    assert r.returncode == 0 and "bad=0 err=no error" in r.stdout, (r.stdout, r.stderr[-2000:])
    vm_data_kb = int(r.stdout.split("VmData:")[1].split()[0])
    assert vm_data_kb * 1024 < sandbox._gpu_memory()


# -- 4 (issue 45, round 2). a kernel's check state lives in its own process: feedback only ---

_OOB_READ = ("__global__ void add(const float *A, const float *B, float *C, int n)\n"
             "{ int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "@WIPE@"
             "  float a = A[i];   /* read before the bounds test: past the end in the last block */\n"
             "  if (i < n) C[i] = a + B[i]; }\n")
# what a student who wants the marks adds: check mode's state is a variable in its own process
_WIPE = "#ifdef TM_CHECK\n  tm_check_cur = nullptr;\n#endif\n"


def test_check_findings_are_feedback_so_wiping_them_gains_nothing():
    honest = tm.grade(_OOB_READ.replace("@WIPE@", ""), "vec_add", backend="emu", speed=False,
                      seed=3, timeout=30)
    wiped = tm.grade(_OOB_READ.replace("@WIPE@", _WIPE), "vec_add", backend="emu", speed=False,
                     seed=3, timeout=30)
    assert wiped.score == wiped.max_score, wiped.headline()   # the attack works on check mode
    assert honest.score == wiped.score, (honest.headline(), wiped.headline())
    shown = " ".join(c.get("message", "") for c in honest.cases)
    assert "check mode (feedback, not scored)" in shown and "out-of-bounds" in shown, shown
