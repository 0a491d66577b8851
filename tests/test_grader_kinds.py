"""One grader (issue 33 §3): KernelError.kind set where the error is raised (a timeout, a signal,
a sandbox refusal, the runtime's error, a worker that breaks its reply schema), carried in the
worker's reply; the grader's runner decides by kind, never by the message's words; tm.grade and
tm.grade_matmul / tm.grade_reduce share one argument matcher, one row layout and one report;
check_matmul / check_reduce are the same functions under their first names."""
import ctypes
import pickle

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.confine import isolation as _isolation
from tiledmm.confine import sandbox as _sandbox
from tiledmm.grading import matching
from tiledmm.grading.builtin import BUILTIN

SEED = 11

LOOP = r"""
__global__ void spin(const float *x, float *out, int n)
{
    volatile int forever = 1;
    while (forever) { }
}
"""
NULL_WRITE = r"""
__global__ void wild(const float *x, float *out, int n)
{
    float *p = 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) p[12345] = x[0];
}
"""
SOCKET = r"""
#include <sys/socket.h>
__global__ void dial(const float *x, float *out, int n)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) { int s = socket(AF_INET, SOCK_STREAM, 0); (void)s; }
}
"""
# A wrong kernel whose failure message carries the words the grader once matched: it writes them
# to stderr and ends the worker with an exit code (no signal, no timeout). Every case must still
# run: it neither timed out nor crashed with a signal.
LIAR = r"""
#include <cstdio>
#include <unistd.h>
__global__ void vadd(const float *A, const float *B, float *C, int n)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        fprintf(stderr, "kernel ran for more than 1 s; invalid memory access (SIGSEGV) (SIGBUS\n");
        fflush(stderr);
        _exit(3);
    }
}
"""


def _launch_error(source, timeout=20, check=False):
    kernel = tm.compile(source, backend="emu", check=check)
    x, out = np.arange(64, dtype=np.float32), np.zeros(32, np.float32)
    with pytest.raises(tm.KernelError) as info:
        kernel(1, 32, x, out, 64, backend="emu", timeout=timeout, check=check)
    return info.value


def test_kind_of_a_timeout():
    err = _launch_error(LOOP, timeout=1)
    assert err.kind == tm.KernelError.TIMEOUT == "timeout", (err.kind, str(err))
    assert "ran for more than 1 s" in str(err)


def test_kind_of_a_fault_is_signal():
    err = _launch_error(NULL_WRITE)
    assert err.kind == tm.KernelError.SIGNAL, (err.kind, str(err))
    assert "SIGSEGV" in str(err)


@pytest.mark.skipif(not _sandbox.status()["confined"], reason="no sandbox here")
def test_kind_of_a_sandbox_refusal():
    err = _launch_error(SOCKET)
    assert err.kind == tm.KernelError.SANDBOX, (err.kind, str(err))
    # the worker's report gives the call's number; the caller names it from the sandbox's list
    assert "sandbox: the kernel tried to open a network socket (socket, system call" in str(err), \
        str(err)


@pytest.mark.skipif(not _sandbox.status()["confined"], reason="no sandbox here")
def test_every_refused_call_is_named_from_its_number():
    resolve = ctypes.CDLL("libseccomp.so.2").seccomp_syscall_resolve_name
    resolve.argtypes = [ctypes.c_char_p]
    for name, what in _sandbox.REFUSED_CALLS.items():
        number = resolve(name.encode())
        if number < 0:   # not a call on this architecture (fork, vfork on 64-bit Arm)
            continue
        assert _sandbox.describe_refused_call(number) == f"{what} ({name}, system call {number})"


def test_kind_of_the_runtime_error_crosses_the_worker_reply():
    """Check mode's out-of-bounds report: the worker replies cuda_error; the caller keeps it."""
    source = r"""
__global__ void past(const float *x, float *out, int n)
{
    out[threadIdx.x] = x[threadIdx.x + n];
}"""
    err = _launch_error(source, check=True)
    assert err.kind == tm.KernelError.CUDA_ERROR, (err.kind, str(err))
    assert "out-of-bounds read of x[" in str(err)


def test_kind_is_required_known_and_pickled():
    with pytest.raises(TypeError):
        tm.KernelError("no kind")
    with pytest.raises(ValueError, match="kind must be one of"):
        tm.KernelError("made up", kind="gremlins")
    err = pickle.loads(pickle.dumps(tm.KernelError("stopped", kind=tm.KernelError.TIMEOUT)))
    assert err.kind == "timeout" and str(err) == "stopped"
    assert set(tm.KernelError.KINDS) == {"timeout", "signal", "sandbox", "cuda_error", "worker"}


def test_reply_schema_carries_the_kind():
    ok = _isolation.check_reply({"error": "KernelError", "kind": "cuda_error", "message": "m"},
                                "launch")
    assert ok["kind"] == "cuda_error" and ok["error"] == "KernelError"
    for bad in ({"error": "KernelError", "message": "m"},
                {"error": "KernelError", "kind": "timeout!", "message": "m"},
                {"error": "KernelError", "kind": ["signal"], "message": "m"}):
        with pytest.raises(_isolation.ProtocolError):
            _isolation.check_reply(bad, "launch")


def test_runner_decides_by_kind_not_by_the_message():
    """The old runner counted a case as a timeout when its message held "ran for more than" and
    as a crash when it held "(SIGSEGV": this kernel's messages hold both, so after two cases the
    rest would have been 'not run'. By kind ('worker': an exit code) every case runs."""
    report = tm.grade(LIAR, "vec_add", backend="emu", seed=SEED, allow_unconfined=True)
    assert report.score == 0
    messages = [c["message"] for c in report.cases]
    assert all(not m.startswith("not run") for m in messages), messages
    assert "(SIGSEGV" in messages[0] and "ran for more than" in messages[0], messages[0]
    assert "exit code 3" in messages[0], messages[0]


def test_runner_stops_after_real_timeouts():
    report = tm.grade(LOOP.replace("spin(const float *x, float *out, int n)",
                                   "spin(const float *A, const float *B, float *C, int n)"),
                      "vec_add", backend="emu", seed=SEED, timeout=1, allow_unconfined=True)
    assert [c["message"].startswith("not run: 2 earlier cases ran past") for c in
            report.cases] == [False, False] + [True] * (len(report.cases) - 2)


# ---- one matcher, one row layout, one report -------------------------------------------------

# arrays named as no alias names them, sizes named but out of the assignment's order
PERMUTED = r"""
__global__ void mm(const float *X, const float *Y, float *Z, int N, int K, int M)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += X[row * K + k] * Y[k * N + col];
        Z[row * N + col] = acc;
    }
}
"""
CEIL16 = lambda M, N, K: (((N + 15) // 16, (M + 15) // 16), (16, 16))   # noqa: E731


def test_one_matcher_for_grade_and_grade_matmul():
    kernel = tm.compile(PERMUTED, backend="emu")
    mapping = matching.match_arguments(kernel.params, BUILTIN["matmul"]().args)
    assert mapping.text == ("by position (arrays) and name (numbers): "
                            "(X=A, Y=B, Z=C, N, K, M)"), mapping.text
    table = tm.grade_matmul(kernel, CEIL16, [(17, 33, 9), (40, 8, 3), (1, 1, 1)], backend="emu")
    table.assert_passed()
    assert table.grade.mapping == mapping.text
    graded = tm.grade(PERMUTED, "matmul", backend="emu", seed=SEED, speed=False,
                      allow_unconfined=True)
    assert graded.mapping == mapping.text and graded.passed, graded


def test_grade_matmul_returns_the_graders_rows_and_report():
    kernel = tm.compile(PERMUTED, backend="emu")
    table = tm.check_matmul(kernel, lambda M, N, K: ((N // 16, M // 16), (16, 16)),
                            [(32, 32, 32), (40, 24, 8)], backend="emu")
    assert tm.check_matmul is tm.grade_matmul and tm.check_reduce is tm.grade_reduce
    assert isinstance(table, tm.GradeTable) and tm.CheckReport is tm.GradeTable
    assert isinstance(table.grade, tm.GradeReport)
    assert table.rows is table.grade.cases
    assert set(table.rows[0]) == {"name", "sizes", "mode", "passed", "score", "points",
                                  "max_error", "tolerance", "ms", "message"}
    assert [r["name"] for r in table.rows] == ["32x32x32", "40x24x8"]
    assert [r["passed"] for r in table.rows] == [True, False]
    # 40 x 24 with a grid that rounds down: rows 32..39 and columns 16..23 never written
    assert "of C never written (first C[0][16])" in table.rows[1]["message"]
    assert table.grade.score == 1 and table.grade.max_score == 2
    assert "1 of 2 shapes pass" in repr(table) and "shape" in repr(table).splitlines()[0]
    assert "<b>mm</b>: 1 of 2 shapes pass" in table._repr_html_()


def test_grade_reduce_in_place_with_a_pass_scalar_from_the_launch():
    source = r"""
__global__ void level(float *A, int length, int d)
{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 2 * d;
    if (i + d < length) A[i] += A[i + d];
}"""
    kernel = tm.compile(source, backend="emu")

    def passes(n):
        out, d = [], 1
        while d < n:
            out.append((max(1, (n + 2 * d * 64 - 1) // (2 * d * 64)), 64, {"d": d}))
            d *= 2
        return out
    table = tm.grade_reduce(kernel, passes, [1, 7, 1000, 4099], backend="emu")
    table.assert_passed()
    assert table.grade.mapping == ("by position (arrays) and name (numbers): (A, length=n, d)")
    # a pass without its d: the row says what to give
    missing = tm.grade_reduce(kernel, lambda n: [(1, 64)], [100], backend="emu")
    assert "cannot tell what to pass for 'd'" in missing.rows[0]["message"]
