"""tm.run builds what nvcc builds (issue 44): the launch parse sees the compile's headers with
no error limit and reports a missing header as such; launches inside macro arguments, in the
program's own headers, relying on default arguments, of templates; quoted includes from the
including file's folder first.

The parse-only tests call programs/launch_rewrite.py's rewrite_launches directly (a libclang parse, no
compile); one program (tests/programs/runpath/) is built and run on emu.
"""
import os

import pytest

import tiledmm as tm
from conftest import HAVE_GPU
from tiledmm.programs import run as programs
from tiledmm.programs import launch_rewrite
from tiledmm.toolchain import compile_emu

HERE = os.path.dirname(os.path.abspath(__file__))
RUNPATH = os.path.join(HERE, "programs", "runpath")
OTHER = os.path.join(HERE, "programs", "runpath_other")
RUN_S = 120

pytest.importorskip("clang.cindex")


INCLUDES = compile_emu.emu_headers()[0] + [compile_emu.stand_ins()]


def rewrite(source, tmp_path, headers=None, folder=None, pch=None, defines=()):
    return launch_rewrite.rewrite_launches(source, "p.cu", str(tmp_path), INCLUDES, defines,
                                           folder=folder or str(tmp_path), headers=headers,
                                           pch=pch)


# launches in a template, in a macro's argument and leaving out a default argument
LAUNCHES = ("#define RUN(call) do { call; } while (0)\n"
            "__global__ void k(float *x, int n = 4) { x[threadIdx.x] = n; }\n"
            "template <int T> __global__ void t(float *x) { x[threadIdx.x] = T; }\n"
            "template <int T> void go(float *x) { t<T><<<1, T>>>(x); }\n"
            "int main() { RUN((k<<<1, 8>>>(nullptr))); go<16>(nullptr); return 0; }\n")


def test_the_precompiled_prelude_is_cached_and_parses_as_the_prelude(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(cache))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    pch = launch_rewrite.parse_pch(str(first), INCLUDES)
    assert pch is not None and os.path.getsize(pch) > 0
    stored = list(cache.glob("user-parse-prelude-*.pch"))
    assert len(stored) == 1
    again = launch_rewrite.parse_pch(str(second), INCLUDES)   # a copy of the cached one
    assert list(cache.glob("user-parse-prelude-*.pch")) == stored
    assert open(again, "rb").read() == stored[0].read_bytes()
    assert _headers_read(tmp_path, again) < 5 < _headers_read(tmp_path, None)
    plain = rewrite(LAUNCHES, tmp_path / "first")
    assert sorted(ln["kernel"] for ln in plain[1]) == ["k", "t"], plain[1]
    assert rewrite(LAUNCHES, tmp_path / "second", pch=again) == plain


def _headers_read(tmp_path, pch, defines=()):
    """How many files the parse of LAUNCHES read (over a precompiled prelude, one: it)."""
    path = tmp_path / "launches.cu"
    path.write_text(LAUNCHES)
    args = launch_rewrite._parse_args(INCLUDES, defines, (), str(tmp_path))
    tu = launch_rewrite._parse(launch_rewrite.require_cindex(), str(path), args, 0, pch)
    return len(list(tu.get_includes()))


def test_a_precompiled_prelude_clang_refuses_is_passed_over(tmp_path):
    plain = rewrite(LAUNCHES, tmp_path)
    broken = tmp_path / "broken.pch"
    broken.write_bytes(b"not an AST file" * 100)
    assert rewrite(LAUNCHES, tmp_path, pch=str(broken)) == plain
    assert _headers_read(tmp_path, str(broken)) > 5
    # a -D that contradicts the prelude's (clang refuses the precompiled copy for it)
    pch = launch_rewrite.parse_pch(str(tmp_path), INCLUDES)
    assert _headers_read(tmp_path, pch, ["-DTM_EMU=2"]) > 5
    assert rewrite(LAUNCHES, tmp_path, pch=pch, defines=["-DTM_EMU=2"]) == \
        rewrite(LAUNCHES, tmp_path, defines=["-DTM_EMU=2"])


def test_more_than_twenty_errors_still_find_template_launches(tmp_path):
    # clang's default 20-error limit made the parse fatal and stop instantiating templates
    broken = "".join(f"int bad{i} = undeclared{i};\n" for i in range(30))
    src = broken + ("template <int T> __global__ void k(float *x) { x[threadIdx.x] = T; }\n"
                    "template <int T> void go(float *x) { k<T><<<1, T>>>(x); }\n"
                    "int main() { go<16>(nullptr); k<8><<<1, 8>>>(nullptr); return 0; }\n")
    text, launches = rewrite(src, tmp_path)
    assert [ln["kernel"] for ln in launches].count("k") == 2, launches
    assert "<<<" not in text


def test_the_parse_sees_the_compiles_stand_ins(tmp_path):
    # cooperative groups and helper-style calls from device code: no errors in the parse
    src = ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
           "__device__ unsigned lo(unsigned a, unsigned b) { return a < b ? a : b; }\n"
           "__global__ void k(unsigned *x) { cg::thread_block b = cg::this_thread_block();\n"
           "  cg::sync(b); x[b.thread_rank()] = lo(__clz(x[0]), 3u); }\n"
           "int main() { k<<<1, 32>>>(nullptr); return 0; }\n")
    _text, launches = rewrite(src, tmp_path)
    assert [ln["kernel"] for ln in launches] == ["k"]


def test_a_missing_header_is_named_not_blamed_on_a_launch(tmp_path):
    src = ("#include <cuda/no_such_header>\n__global__ void k() {}\n"
           "int main() { k<<<1, 1>>>(); return 0; }\n")
    with pytest.raises(launch_rewrite.ParseError) as exc:
        rewrite(src, tmp_path)
    assert "cuda/no_such_header" in str(exc.value)
    assert "could not read this kernel launch" not in str(exc.value)


def test_macro_argument_launch_rewritten_where_written(tmp_path):
    src = ("#define CHECK(x) do { x; } while (0)\n__global__ void k(int *p, int n) {}\n"
           "int main() {\n  CHECK((k<<<2, 32, 0>>>(nullptr, 3)));\n  return 0;\n}\n")
    text, launches = rewrite(src, tmp_path)
    assert [(ln["kernel"], ln["line"]) for ln in launches] == [("k", 4)]
    assert 'CHECK((tm_prog::config("k", "p,n", __FILE__, __LINE__, k, 2, 32, 0)(nullptr, 3)))' \
        in text


def test_default_arguments_written_out(tmp_path):
    src = ("__global__ void k(int *p, int a, int b = 3, float c = 2.0f) {}\n"
           "int main() { k<<<1, 1>>>(nullptr, 1); k<<<1, 1>>>(nullptr, 1, 5); return 0; }\n")
    text, _launches = rewrite(src, tmp_path)
    assert "(nullptr, 1, 3, 2.0f)" in text and "(nullptr, 1, 5, 2.0f)" in text


def test_launches_in_an_own_header_are_rewritten_there(tmp_path):
    header = os.path.join(RUNPATH, "launches.cuh")
    with open(header, "rb") as f:
        headers = {os.path.realpath(header): launch_rewrite.EditedFile(f.read())}
    src = '#include "launches.cuh"\nint main() { launch_from_header(nullptr, 4); return 0; }\n'
    _text, launches = rewrite(src, tmp_path, headers=headers, folder=RUNPATH)
    assert sorted(ln["kernel"] for ln in launches) == ["add_each", "set_first"]
    assert all(ln["file"] == "launches.cuh" for ln in launches)
    rewritten = headers[os.path.realpath(header)].apply().decode()
    assert "<<<" not in rewritten.split("inline void", 1)[1]
    assert "(out, WHICH * 10)" in rewritten   # the default argument, written out


def test_program_with_launches_anywhere_runs_as_nvcc_would():
    r = tm.run(os.path.join(RUNPATH, "launches.cu"), backend="emu", timeout=RUN_S,
               compiler_args=[f"-I{OTHER}"])   # an -I folder with another which.h
    assert r.returncode == 0, r.stderr
    n = 40
    want = [100 + 2 * i + 3 for i in range(n)]
    want[0] = 1 * 10 + 3   # set_first's default argument: WHICH of the program's own which.h
    assert [int(v) for v in r.stdout.split()] == want
    assert [ln.kernel for ln in r.launches] == ["fill", "set_first", "add_each"]


# ---- CUDA graphs: per-launch timing never breaks a stream capture (GPU) ----------------------

GRAPH = os.path.join(HERE, "programs", "graph_capture.cu")


def _graph_sums():
    """The sums graph_capture.cu prints, computed here: x = 1; the graph (x + 2) * 0.5 three
    times; + 1 at the end (1024 elements)."""
    x, lines = 1.0, [f"before the graph: {1024 * 1.0:.1f}"]
    for r in range(3):
        x = (x + 2.0) * 0.5
        lines.append(f"after graph launch {r + 1}: {1024 * x:.1f}")
    lines.append(f"at the end: {1024 * (x + 1.0):.1f}")
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(programs._nvcc() is None, reason="nvcc is not installed")
def test_graph_capture_program_builds_with_nvcc():
    with open(GRAPH) as f:
        src = f.read()
    image, meta, _origin = programs.build(src, "graph_capture.cu", "cuda")
    assert image[:4] == b"\x7fELF"
    assert [ln["kernel"] for ln in meta["launches"]] == ["add", "add", "scale", "add"]


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA device")
def test_graph_capture_runs_on_the_gpu_with_the_launches_outside_it_timed():
    r = tm.run(GRAPH, backend="cuda", timeout=RUN_S)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == _graph_sums()
    # the two launches outside the capture are timed, the two captured ones are not (a timed
    # launch is reported once its events complete, after the captured ones: H200, 2026-11-28)
    timed = sorted((ln.kernel, ln.ms is not None) for ln in r.launches)
    assert timed == sorted([("add", True), ("add", False), ("scale", False), ("add", True)]), timed


@pytest.mark.skipif(programs._nvcc() is None, reason="nvcc is not installed")
def test_on_cuda_a_program_the_parse_cannot_read_builds_as_nvccs_and_says_so():
    # <cuda/pipeline> is the toolkit's, not among the emulator's stand-ins the parse reads
    src = ("#include <cuda/pipeline>\n#include <cstdio>\n__global__ void k(int *p) {}\n"
           "int main() { k<<<1, 1>>>(nullptr); printf(\"ok\\n\"); return 0; }\n")
    image, meta, _origin = programs.build(src, "p.cu", "cuda")
    assert image[:4] == b"\x7fELF"
    if meta["launches"]:   # the toolkit's headers are where the parse looks (the H200's machine)
        assert [ln["kernel"] for ln in meta["launches"]] == ["k"]
        assert "launches not timed" not in meta.get("note", "")
    else:
        assert "launches not timed" in meta["note"] and "cuda/pipeline" in meta["note"]
