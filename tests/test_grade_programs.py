"""Grading whole programs by their output (issue 32): tiledmm.grading.programs.

The submissions are tests/programs/grading/vec_add_program.cu (correct) and variants of it made
here, one mistake each; the assignment is the built-in vec_add_program (its small cases, to keep
the builds few). Every program runs under a time limit (tm.run's timeout).
"""
import json
import os

import numpy as np
import pytest

from tiledmm.grading.programs import ProgramAssignment, _compare, grade_program, vec_add_program

HERE = os.path.dirname(os.path.abspath(__file__))
CORRECT = os.path.join(HERE, "programs", "grading", "vec_add_program.cu")
with open(CORRECT) as _f:
    SOURCE = _f.read()
SEED = 4242   # not a multiple of 1000: the inputs differ from seed 0's


def variant(old, new):
    assert old in SOURCE
    return SOURCE.replace(old, new)


def small(**kw):
    a = vec_add_program()
    a.cases = [{"n": 1}, {"n": 1000}]
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def grade(submission, assignment=None, **kw):
    kw.setdefault("backend", "emu")
    kw.setdefault("seed", SEED)
    return grade_program(submission, assignment or small(), **kw)


def test_the_builtin_expected_output_is_lecture_000s_sum():
    a = vec_add_program()
    want = a.expected({"n": 5}, 1003)   # s = 3: A = (i + 3) / 4, B = (3 i + 21) / 2
    i = np.arange(5)
    np.testing.assert_array_equal(want, (i + 3) / 4 + (3 * i + 21) / 2)
    assert a.program_input({"n": 5}, 1003) == ([], "5 1003\n")
    assert [c.get("big", False) for c in a.cases] == [False, False, False, True]


def test_a_correct_program_gets_full_marks_with_a_secret_seed():
    r = grade(CORRECT, vec_add_program(), seed=None)
    assert r.passed and r.score == r.max_score == 4, str(r)
    assert [c["mode"] for c in r.cases] == ["check", "check", "check", "plain"]
    assert r.seed_secret and "secret" in str(r)


def test_a_memorised_answer_fails_because_the_seed_changes_the_output():
    memorised = variant("long long s = seed % 1000;", "long long s = 0;")
    r = grade(memorised)
    # n = 1: C[0] = s/4 + 7s/2 -- seed 4242 gives s = 242, the memorised seed 0 gives 0
    assert r.score == 0 and not r.passed, str(r)
    assert "expected" in r.cases[0]["message"]
    assert grade(memorised, seed=3000).passed   # the seed it memorised: it would pass


LEAK = variant("    CHECK(cudaFree(dB));\n", "")
# a copy past the end, its error never looked at (nor read by a cudaGetLastError after it)
UNCHECKED = variant("    CHECK(cudaMemcpy(dA, A, bytes, cudaMemcpyHostToDevice));\n",
                    "    cudaMemcpy(dA, A, bytes + 4, cudaMemcpyHostToDevice);\n"
                    "    cudaMemcpy(dA, A, bytes, cudaMemcpyHostToDevice);\n").replace(
    "    CHECK(cudaGetLastError());\n", "")


def _line_of(source, text):
    return next(i + 1 for i, ln in enumerate(source.splitlines()) if text in ln)


def test_a_leak_is_reported_as_feedback_and_never_a_mark():
    # issue 45: check mode's findings come from the program's own process, which can cut them
    # short; so they are feedback, and hiding them cannot raise a score
    r = grade(LEAK)
    assert r.passed and r.score == 2, str(r)
    msg = r.cases[0]["message"]
    assert msg.startswith("check mode (feedback, not scored): ") and "(dB) were never freed" in msg
    assert f"program.cu:{_line_of(LEAK, 'cudaMalloc(&dB')}:" in msg


def test_hiding_check_findings_does_not_raise_the_score():
    hidden = LEAK.replace("int main(", "#include <unistd.h>\n#include <cstdlib>\n#include <cstdio>\n"
                          "static void hide() { char p[512]; snprintf(p, sizeof p, \"%s/report.jsonl\", "
                          "getenv(\"TMPDIR\")); truncate(p, 0); fflush(stdout); _exit(0); }\n"
                          "int main(", 1)
    hidden = hidden.replace("    return 0;\n}", "    hide();\n    return 0;\n}")
    assert "hide();" in hidden
    shown, cut = grade(LEAK), grade(hidden)
    assert cut.score == shown.score, (str(shown), str(cut))
    assert "never freed" not in cut.cases[0]["message"]


def test_a_leak_passes_where_the_assignment_says_so_with_a_note():
    r = grade(LEAK, small(host_mistakes={"leak": "pass"}))
    assert r.passed and r.score == 2, str(r)
    assert "allowed by the assignment" in r.cases[1]["message"] and "never freed" in \
        r.cases[1]["message"]


def test_an_unchecked_error_is_feedback():
    r = grade(UNCHECKED)
    assert r.passed, str(r)
    line = _line_of(UNCHECKED, "bytes + 4")
    msg = r.cases[1]["message"]
    assert f"program.cu:{line}: cudaMemcpy failed with cudaErrorInvalidValue" in msg
    assert "never checked the error" in msg and "feedback, not scored" in msg


def test_a_crash_and_an_endless_loop_score_zero_for_that_case_and_the_grader_goes_on():
    crash = variant("    size_t bytes", "    if (n == 1) { volatile int *p = 0; *p = 1; }\n"
                                         "    size_t bytes")
    r = grade(crash)
    assert [c["passed"] for c in r.cases] == [False, True], str(r)
    assert "exited with code -11" in r.cases[0]["message"]
    endless = variant("    size_t bytes", "    if (n == 1) for (volatile int k = 0;; ++k) {}\n"
                                           "    size_t bytes")
    r = grade(endless, timeout=5)
    assert [c["passed"] for c in r.cases] == [False, True], str(r)
    assert "time limit of 5 s" in r.cases[0]["message"]


def test_a_program_that_does_not_compile_scores_zero_everywhere():
    r = grade(variant("int main()", "int main() { oops }\nint other()"))
    assert r.compile_error and r.score == 0 and len(r.cases) == 2
    assert all("did not compile" in c["message"] for c in r.cases)


def test_gradescope_output(tmp_path):
    r = grade(LEAK, seed=None)
    path = tmp_path / "results.json"
    r.write_gradescope(str(path))
    out = json.loads(path.read_text())
    assert out["score"] == 2   # the leak is feedback (issue 45)
    assert [t["name"] for t in out["tests"]] == ["vec_add_program: 1", "vec_add_program: 1000"]
    assert out["tests"][0]["status"] == "passed" and "never freed" in out["tests"][0]["output"]
    assert "4242" not in json.dumps(out) and "secret" in out["output"]


def test_compare_numbers_and_lines():
    assert _compare([1.0, 2.5], "1.00\n2.50\n", 1e-5, 1e-6)[0]
    ok, _err, _tol, why = _compare([1.0, 2.5], "1.00\n2.6\n", 1e-5, 1e-6)
    assert not ok and "number 2 is 2.6" in why
    assert "printed 1 numbers" in _compare([1.0, 2.5], "1\n", 1e-5, 1e-6)[3]
    assert _compare("a\nb\n", "a  \nb", 0, 0)[0]
    assert not _compare("a\nb\n", "a\nc\n", 0, 0)[0]


def test_host_mistakes_validated():
    with pytest.raises(ValueError, match="host_mistakes"):
        ProgramAssignment("x", [{"n": 1}], lambda s, seed: ([], ""), lambda s, seed: [0.0],
                          host_mistakes={"leaks": "pass"})


# ---- the program's kernel, launched with the program's own <<<>>> -------------------------------

def test_program_kernel_source_declares_the_programs_own_launch():
    from tiledmm.grading.programs import program_kernel_source
    text, name = program_kernel_source(SOURCE)
    assert name == "vecAddKernel" and "int main" not in text and "<<<" not in text
    assert text.count("\n") >= SOURCE.count("\n")   # the kernel keeps its lines
    assert "// tiledmm-grade: grid (n + 255) // 256\n// tiledmm-grade: block 256" in text
    # lecture 003: dim3 variables, a host variable passed as the kernel's Width
    with open(os.path.join(HERE, "lectures", "programs", "003_matmul_host.cu")) as f:
        text, name = program_kernel_source(f.read())
    assert name == "MatrixMulKernel"
    assert "grid (1, 1)" in text and "block (Width, Width)" in text
    with pytest.raises(ValueError, match="no kernel 'other'"):
        program_kernel_source(SOURCE, kernel="other")


def test_a_programs_kernel_graded_with_its_own_launch():
    from tiledmm.grading.programs import grade_program_kernel
    r = grade_program_kernel(CORRECT, "vec_add", backend="emu", seed=SEED, speed=False)
    assert r.passed and r.score == r.max_score > 0, str(r)
    assert "grid (n + 255) // 256, block 256" in r.launch
    # too few blocks: the program's own launch is what is graded, so the big cases fail
    short = variant("<<<(n + 255) / 256, 256>>>", "<<<n / 256, 256>>>")
    r = grade_program_kernel(short, "vec_add", backend="emu", seed=SEED, speed=False)
    assert not r.passed and 0 < r.score < r.max_score, str(r)


def test_the_command_line_writes_gradescope_output(tmp_path):
    import subprocess
    import sys
    out = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-m", "tiledmm", "grade", CORRECT, "-a",
                           "vec_add_program", "--backend", "emu", "--gradescope", str(out)],
                          capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(HERE))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vec_add_program: 4 / 4 points" in done.stdout
    assert "sandbox: confined" in done.stdout or not tm_sandbox_confined()
    assert json.loads(out.read_text())["score"] == 4
    bad = subprocess.run([sys.executable, "-m", "tiledmm", "grade", CORRECT, "-a",
                          "no_such_assignment"], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(HERE))
    assert bad.returncode == 2 and "vec_add" in bad.stderr


def test_tm_grade_takes_either_kind_of_assignment():
    import tiledmm as tm
    r = tm.grade(CORRECT, "vec_add_program", backend="emu", seed=SEED)
    assert r.passed and r.assignment == "vec_add_program", str(r)
    r = tm.grade(CORRECT, "vec_add", backend="emu", seed=SEED, speed=False, by_kernel=True)
    assert r.passed and "grid (n + 255) // 256, block 256" in r.launch, str(r)
    with pytest.raises(ValueError, match="program assignment"):
        tm.grade(CORRECT, "vec_add_program", backend="emu", by_kernel=True)


def tm_sandbox_confined():
    from tiledmm.confine import sandbox
    return sandbox.status()["confined"]
