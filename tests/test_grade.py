"""The grader (tiledmm/grading, `python -m tiledmm grade`, tm.grade) on submissions whose grade
is known: the lectures' listings (tests/lectures/) and small hand-written ones (correct, wrong,
out of bounds, racy, an endless loop, a crash, a syntax error, a compile that never ends), each
graded on emu as expected; the JSON, JUnit and Gradescope files validated. A GPU part grades
the speed on cuda."""
import json
import os
import time
import xml.etree.ElementTree as ET

import pytest

import tiledmm as tm
from tiledmm.__main__ import main
from tiledmm.grading import launch_spec

from conftest import HAVE_GPU

HERE = os.path.dirname(os.path.abspath(__file__))
LECTURES = os.path.join(HERE, "lectures")
EXAMPLES = os.path.join(os.path.dirname(HERE), "docs", "examples")
SEED = 7

MATMUL = r"""
#define TILE 16
__global__ void matmul(const float *A, const float *B, float *C, int M, int K, int N)
{
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K) ? A[row * K + t + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && t + threadIdx.y < K) ? B[(t + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""

VADD = """__global__ void vadd(const float *A, const float *B, float *C, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    BODY
}
"""
NO_GUARD = VADD.replace("BODY", "C[i] = A[i] + B[i];")
WRONG = VADD.replace("BODY", "if (i < n) C[i] = A[i] - B[i];")
LOOP = VADD.replace("BODY", "while (1) { }")
CRASH = VADD.replace("BODY", "float *p = 0; if (i < n) C[i] = A[i] + p[i];")
SYNTAX = VADD.replace("BODY", "int j = i\n    if (i < n) C[i] = A[i] + B[i];")
POSITIONAL = """__global__ void add(const float *p, const float *q, float *r, int count_)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count_) r[i] = p[i] + q[i];
}
"""
RACY_SUM = """// tiledmm-grade: block 256
// tiledmm-grade: grid cdiv(n, 256)
// tiledmm-grade: shared 0
__global__ void sum(const float *x, float *out, int n)
{
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int d = blockDim.x / 2; d > 0; d /= 2) {
        if (threadIdx.x < d) s[threadIdx.x] += s[threadIdx.x + d];   // no barrier in the loop
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _failed(report):
    return {c["name"] for c in report.cases if not c["passed"]}


@pytest.fixture(scope="module")
def tiled_square():
    """The lecture's square-only tiled kernel graded as matmul_square (TILE_WIDTH from a
    `// tiledmm-grade: define` line)."""
    source = "// tiledmm-grade: define TILE_WIDTH=16\n" + \
        open(os.path.join(LECTURES, "000_MatrixMulKernel_tiled.cu")).read()
    return tm.grade(source, "matmul_square", backend="emu", seed=SEED)


def test_correct_matmul_gets_full_marks_matched_by_name():
    report = tm.grade(MATMUL, "matmul", backend="emu", seed=SEED)
    assert report.passed and report.score == report.max_score > 0, report
    assert report.mapping == "by name: (A, B, C, M, K, N)"
    modes = {c["name"]: c["mode"] for c in report.cases}
    assert modes["waves 600x520x24"] == "plain" and modes["17x17x17"] == "check"
    assert {"1x1x1", "tall 130x3x20", "wide 3x130x20", "empty 0x5x3"} <= set(modes)
    assert any(name.startswith("random ") for name in modes)
    assert "(assignment)" in report.launch and "cdiv(N, 16)" in report.launch
    assert report.speed == {"graded": False, "note": report.speed["note"]}
    assert report.speed["note"].startswith("emu:")


def test_lecture_tiled_kernel_fails_exactly_the_non_multiple_widths(tiled_square):
    report = tiled_square
    widths = {c["name"]: c["sizes"]["Width"] for c in report.cases}
    assert _failed(report) == {n for n, w in widths.items() if w % 16}, report
    assert 0 < report.score < report.max_score
    for c in report.cases:
        if not c["passed"]:   # check mode names the access, the thread and the block
            assert c["mode"] == "check" and "thread (" in c["message"], c
            assert "of block (" in c["message"], c
            assert "out-of-bounds" in c["message"] or "race" in c["message"], c


def test_lecture_vec_add_full_marks_and_positional_mapping(tmp_path):
    report = tm.grade(os.path.join(LECTURES, "000_vecAddKernel.cu"), "vec_add", backend="emu",
                      seed=SEED)
    assert report.passed and report.score == report.max_score, report
    assert report.mapping == "by name: (A_d=A, B_d=B, C_d=C, n)"
    report = tm.grade(_write(tmp_path, "pos.cu", POSITIONAL), "vec_add", backend="emu",
                      seed=SEED)
    assert report.passed, report
    assert report.mapping == "by position: (p=A, q=B, r=C, count_=n)"


def test_missing_bounds_guard_is_named_and_scored_by_its_outputs():
    # check mode's findings are feedback (they live in the kernel's own process): its reads past
    # the end are named on every case they happen in, and the outputs of a plain run decide
    report = tm.grade(NO_GUARD, "vec_add", backend="emu", seed=SEED)
    assert not report.passed   # past the end's padding the plain run faults
    named = [c for c in report.cases if c["mode"] == "check" and c["sizes"]["n"] % 256]
    assert named and all("check mode (feedback, not scored)" in c["message"] and
                         "out-of-bounds read of A[" in c["message"] for c in named), report
    # n = 255: the read stays within cudaMalloc's 256-byte padding, as it would on a GPU
    case = next(c for c in report.cases if c["name"] == "255")
    assert case["passed"] and "out-of-bounds read of A[" in case["message"], case
    assert "256" not in _failed(report)


def test_wrong_result_names_the_first_wrong_element():
    report = tm.grade(WRONG, "vec_add", backend="emu", seed=SEED)
    assert report.score == 0 and not report.passed
    assert "of C wrong; first C[0]: got 3.75, expected -0.25" in report.cases[0]["message"]


def test_race_is_reported_with_its_location():
    # check mode's findings are feedback (the kernel's own process holds them): the race is named
    # with its location; the points are the plain run's (the emulator's order sums it right)
    report = tm.grade(RACY_SUM, "reduce", backend="emu", seed=SEED)
    msg = next(c["message"] for c in report.cases if c["name"] == "1024")
    assert msg.startswith("check mode (feedback, not scored)"), msg
    assert "shared" in msg and "s[" in msg and "block (" in msg, msg
    assert "declared by the submission comments" in report.launch


DIVERGENT = VADD.replace("BODY", "if (i >= n) return;\n    if (threadIdx.x < 100) __syncthreads();\n"
                                  "    C[i] = A[i] + B[i];")


def test_divergent_barrier_is_reported_with_its_line():
    report = tm.grade(DIVERGENT, "vec_add", backend="emu", seed=SEED)
    assert report.score == 0
    msg = report.cases[1]["message"]
    assert "100 threads wait at __syncthreads() at kernel.cu:5" in msg, msg
    assert "full messages:" in str(report)


def test_syntax_error_scores_zero_with_the_line():
    report = tm.grade(SYNTAX, "vec_add", backend="emu", seed=SEED)
    assert report.score == 0 and report.compile_error
    assert "kernel.cu:5" in report.compile_error, report.compile_error
    assert all(c["message"].startswith("not run") for c in report.cases)


def test_endless_loop_scores_zero_within_the_limit():
    start = time.monotonic()
    report = tm.grade(LOOP, "vec_add", backend="emu", seed=SEED, timeout=1)
    assert time.monotonic() - start < 30
    assert report.score == 0
    assert "ran for more than 1 s" in report.cases[0]["message"]
    assert report.cases[-1]["message"].startswith("not run: 2 earlier cases")


def test_crash_scores_zero_and_the_grader_goes_on():
    report = tm.grade(CRASH, "vec_add", backend="emu", seed=SEED)
    assert report.score == 0
    assert "SIGSEGV" in report.cases[0]["message"]
    assert report.cases[-1]["message"] == "not run: 3 earlier cases crashed"
    assert tm.grade(os.path.join(LECTURES, "000_vecAddKernel.cu"), "vec_add", backend="emu",
                    seed=SEED).passed


def test_compile_time_limit(tmp_path):
    # 2^22 tokens from nested macros: the preprocessor alone runs past the limit
    bomb = "".join(f"#define X{i + 1} X{i} X{i}\n" for i in range(22))
    bomb = "#define X0 1+\n" + bomb + VADD.replace("BODY", "float v = X22 1; C[0] = v;")
    start = time.monotonic()
    report = tm.grade(bomb, "vec_add", backend="emu", seed=SEED, compile_timeout=2)
    assert time.monotonic() - start < 20
    assert "CompileLimitError" in report.compile_error and report.score == 0, report


def test_sidecar_launch_for_the_lecture_matadd(tmp_path):
    src = open(os.path.join(LECTURES, "001_matadd_kernel.cu")).read()
    path = _write(tmp_path, "matadd.cu", src)
    _write(tmp_path, "matadd.launch", "# x indexes rows\nblock: (16, 32)\n"
                                      "grid: (cdiv(M, 16), cdiv(N, 32))\n")
    report = tm.grade(path, "mat_add", backend="emu", seed=SEED)
    assert "declared by the sidecar file matadd.launch" in report.launch
    assert report.mapping == "by name: (C, A, B)"
    # no bounds check in the lecture's kernel: only the empty case passes
    assert _failed(report) == {c["name"] for c in report.cases} - {"empty 0x5"}
    assert "out-of-bounds read of A[" in report.cases[0]["message"]


def test_instructor_assignment_file():
    report = tm.grade(os.path.join(EXAMPLES, "saxpy_student.cu"),
                      os.path.join(EXAMPLES, "saxpy_assignment.py"), backend="emu", seed=SEED)
    assert report.passed and report.score == report.max_score == 9, report
    assert report.mapping == "by name: (x, y, a, n)"


def test_outputs_and_exit_codes(tiled_square, tmp_path, capsys):
    report = tiled_square
    report.write_json(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["score"] == report.score and data["max_score"] == report.max_score
    assert len(data["cases"]) == len(report.cases) and data["seed"] == SEED
    assert data["cases"][0]["max_error"] == 0.0 and data["speed"]["graded"] is False
    report.write_junit(tmp_path / "r.xml")
    suite = ET.parse(tmp_path / "r.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(report.cases) + 1 and cases[-1].get("name") == "speed"
    assert int(suite.get("failures")) == len(_failed(report)) == \
        sum(c.find("failure") is not None for c in cases)
    report.write_gradescope(tmp_path / "gs.json")
    gs = json.loads((tmp_path / "gs.json").read_text())
    assert gs["score"] == report.score and isinstance(gs["output"], str)
    assert len(gs["tests"]) == len(report.cases)
    for t in gs["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output"}
        assert 0 <= t["score"] <= t["max_score"]
    html = report._repr_html_()
    assert html.count("<tr") == len(report.cases) + 1 and "FAIL" in html
    text = str(report)
    assert "matmul_square:" in text and "by name: (M, N, P, Width)" in text

    src = os.path.join(LECTURES, "000_vecAddKernel.cu")
    out = tmp_path / "gs2.json"
    assert main(["grade", src, "--assignment", "vec_add", "--backend", "emu",
                 "--gradescope", str(out), "-q"]) == 0
    assert "vec_add: 8 / 8 points" in capsys.readouterr().out
    secret = json.loads(out.read_text())
    assert "seed: secret" in secret["output"]
    wrong = _write(tmp_path, "wrong.cu", WRONG)
    assert main(["grade", wrong, "-a", "vec_add", "--backend", "emu", "--seed", "1",
                 "--junit", str(tmp_path / "w.xml")]) == 1
    assert ET.parse(tmp_path / "w.xml").getroot().find("testsuite").get("failures") != "0"
    assert main(["grade", wrong, "-a", "no_such_assignment"]) == 2
    assert main(["grade", str(tmp_path / "missing.cu"), "-a", "vec_add"]) == 2
    capsys.readouterr()


def test_launch_expressions_are_arithmetic_only():
    ev = launch_spec.evaluate
    assert ev("(cdiv(N, 16), cdiv(M, 16))", {"M": 17, "N": 33}) == (3, 2)
    assert ev("ceil(n / 256.0)", {"n": 257}) == 2
    for bad in ("__import__('os')", "n.bit_length()", "open('x')", "'a' * 3", "lambda: 1"):
        with pytest.raises(ValueError):
            ev(bad, {"n": 3})
    with pytest.raises(ValueError, match="unknown launch key"):
        launch_spec.read_declared("// tiledmm-grade: grdi 4\n")
    declared, origin = launch_spec.read_declared(
        "// tiledmm-grade: kernel k2\n// tiledmm-grade: define T=8\n")
    assert declared == {"kernel": "k2", "define": ["T=8"]} and origin == "submission comments"


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA device")
def test_speed_part_on_cuda():
    report = tm.grade(MATMUL, "matmul", backend="cuda", seed=SEED)
    assert report.passed, report
    s = report.speed
    assert s["graded"] and s["submission_ms"] > 0 and s["reference_ms"] > 0, s
    assert 0 <= s["score"] <= s["points"] and report.max_score == 11 + s["points"]
