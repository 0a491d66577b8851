"""Jupyter's %%cuda magics (issue 31), through nbclient in a real kernel, on emu.

One notebook of cells (each tagged with what it shows) runs in one kernel (the module's fixture,
so the kernel starts once); each test reads its cells' outputs. The interrupt runs in a notebook
of its own: nbclient interrupts the endless program's cell at its cell timeout, and the next
cells show that the kernel lives and that the program's process is gone.
tests/magics/nvcc4jupyter_style.ipynb, written as for nvcc4jupyter with only its %load_ext
changed, runs end to end. Every cell has a time limit (CELL_S, the interrupt's INTERRUPT_S).
"""
import os
import re
import sys

import pytest

from tiledmm import _backend

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
STYLE_NOTEBOOK = os.path.join(HERE, "magics", "nvcc4jupyter_style.ipynb")
CELL_S = 300        # a cell's limit: a first compile on a busy 2-core machine takes ~30 s
INTERRUPT_S = 40    # the endless program's cell is interrupted after this

from magics.cells import CELLS  # noqa: E402  (tests/magics/cells.py: the cells, as data)


def _kernel_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEDMM_BACKEND", "emu")   # the kernel process inherits it
    import tiledmm
    here = os.path.dirname(os.path.dirname(os.path.abspath(tiledmm.__file__)))
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", here + (os.pathsep + pythonpath if pythonpath else ""))


def _execute(nb, tmp_path, timeout_func=None, **kw):
    client = nbclient.NotebookClient(nb, timeout=CELL_S, kernel_name="python3",
                                     timeout_func=timeout_func,
                                     resources={"metadata": {"path": str(tmp_path)}}, **kw)
    client.execute()
    return nb


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("magics")
    try:
        _kernel_env(mp, tmp)
        nb = nbformat.v4.new_notebook()
        for tag, source in CELLS:
            cell = nbformat.v4.new_code_cell(source)
            cell.metadata["tag"] = tag
            nb.cells.append(cell)
        _execute(nb, tmp, allow_errors=True)
    finally:
        mp.undo()
    return {c.metadata["tag"]: c.outputs for c in nb.cells}


def _stream(outputs, name):
    return "".join(o["text"] for o in outputs if o["output_type"] == "stream" and
                   o["name"] == name)


def _html(outputs):
    return "".join(o["data"].get("text/html", "") for o in outputs
                   if o["output_type"] == "display_data")


def _no_error(outputs):
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, errors


def test_hello_world_cell(cells):
    out = cells["hello"]
    _no_error(out)
    stdout = _stream(out, "stdout")
    for b in range(2):
        for t in range(3):
            assert f"hello from block {b} thread {t}\n" in stdout
    assert "sum 111\n" in stdout   # sum of 7i+1 for i < 6
    stderr = _stream(out, "stderr")
    assert "a line on stderr" in stderr and "a line on stderr" not in stdout
    # with no GPU the first magic says once which backend runs; the next ones do not
    assert ("CPU emulator (backend emu)" in stderr) == (_backend.cuda_device_count() == 0)
    assert "CPU emulator" not in _stream(cells["define"], "stderr")
    table = _html(out)
    assert "<table" in table and "<td>hello</td>" in table
    assert "<td>2x1x1</td>" in table and "<td>3x1x1</td>" in table
    assert "exited with code" not in stderr


def test_group_with_shared_header(cells):
    for tag in ("shared_h", "shared_cu", "g_kernel", "g_main"):
        _no_error(cells[tag])
        assert not _stream(cells[tag], "stderr")
    # %config NVCCPlugin.wd chose the folder groups are saved in, as in nvcc4jupyter
    assert _stream(cells["group_files"], "stdout") == "['kernel.cu', 'main.cu']\n"
    out = cells["group_run"]
    _no_error(out)
    # x[99] = twice(99) * SCALE = 594; answer() is the shared group's answer.cu
    assert _stream(out, "stdout") == "x[99] = 594, answer 42\n"
    assert "<td>scale</td>" in _html(out) and "<td>2x1x1</td>" in _html(out)
    # the shared group is visible to %%cuda cells too
    assert _stream(cells["shared_in_cell"], "stdout") == "SCALE 3 answer 42\n"
    # a deleted group is gone, said in one line
    assert "group 'vec' does not exist" in _stream(cells["group_gone"], "stderr")
    assert not _stream(cells["group_gone"], "stdout")


def test_compiler_args_define(cells):
    out = cells["define"]
    _no_error(out)
    assert _stream(out, "stdout") == "N=8 last=56\n"
    assert "<td>1x1x1</td><td>8x1x1</td>" in _html(out)
    # on emu each launch says how its kernel ran: a barrier-free kernel as thread loops
    assert "<th>path</th>" in _html(out) and "<td>thread loops</td>" in _html(out)


def test_profile_on_emu_shows_counters_and_predicted_time(cells):
    out = cells["profile"]
    _no_error(out)
    assert _stream(out, "stdout") == "copied\n"
    table = _html(out)
    assert "predicted H100 ms" in table and "gld sectors" in table
    row = re.search(r"<tr><td>copy</td>(.*?)</tr>", table).group(1)
    cols = re.findall(r"<td>(.*?)</td>", row)
    # profile mode splits this barrier-free kernel too (one thread loop a block), and says so in
    # the path column before the counters
    predicted, path, gld_req, gld_sectors, gst_req, gst_sectors = \
        float(cols[4]), cols[5], *(int(c.replace(",", "")) for c in cols[6:10])
    assert path == "thread loops"
    # 4096 floats read and written once, 32 threads a request, 4 sectors of 32 B a request
    assert (gld_req, gst_req) == (4096 // 32, 4096 // 32)
    assert (gld_sectors, gst_sectors) == (4096 * 4 // 32, 4096 * 4 // 32)
    assert 0 < predicted < 1.0
    stderr = _stream(cells["nsys"], "stderr")
    assert "nsys is not available on emu" in stderr
    assert _stream(cells["nsys"], "stdout") == "ran\n"


def test_args_and_stdin(cells):
    out = cells["args_stdin"]
    _no_error(out)
    assert _stream(out, "stdout") == "argc 3, argv[1] alpha, argv[2] two words, sum 42\n"


def test_nonzero_exit_in_one_line(cells):
    out = cells["exit_code"]
    _no_error(out)
    assert _stream(out, "stdout") == "failing\n"
    assert _stream(out, "stderr").strip().splitlines()[-1] == \
        "tiledmm: the program exited with code 3"


def test_compile_error_at_the_cells_lines(cells):
    out = cells["compile_error"]
    _no_error(out)
    stderr = _stream(out, "stderr")
    # line 1 of the cell is %%cuda; `undeclared` is on the cell's line 5
    assert re.search(r"cell\.cu:5:\d+: error: 'undeclared' was not declared", stderr), stderr
    assert "does not compile" in stderr and not _stream(out, "stdout")


def test_compile_error_in_a_group_names_its_file_and_cell_line(cells):
    out = cells["broken_run"]
    _no_error(out)
    stderr = _stream(out, "stderr")
    # oops.cu's cell: line 1 %%cuda_group_save, line 3 the undeclared name
    assert re.search(r"oops\.cu:3:\d+: error: 'undefined_here' was not declared", stderr), stderr
    assert "main.cu" not in stderr and not _stream(out, "stdout")


def test_bad_option_says_so_without_traceback(cells):
    out = cells["bad_option"]
    _no_error(out)
    stderr = _stream(out, "stderr")
    assert "unrecognized arguments: --no-such-option" in stderr and "usage: %%cuda" in stderr


def test_timeit(cells):
    out = cells["timeit"]
    _no_error(out)
    stdout = _stream(out, "stdout")
    assert re.search(r"\d+(\.\d+)? (ms|s) ± .* per loop \(mean ± std\. dev\. of 7 runs", stdout)


def test_interrupt_stops_the_program_and_the_kernel_lives(tmp_path, monkeypatch):
    _kernel_env(monkeypatch, tmp_path)
    nb = nbformat.v4.new_notebook()
    endless = ("%%cuda --timeout 600\n#include <cstdio>\nint main() {\n"
               "    printf(\"started\\n\");\n    volatile unsigned long n = 0;\n"
               "    for (;;) ++n;\n}\n")
    nb.cells = [nbformat.v4.new_code_cell("%load_ext tiledmm\nimport os, time"),
                nbformat.v4.new_code_cell(endless),
                # a process may end between listdir and open (other tests run beside this one)
                nbformat.v4.new_code_cell(
                    "time.sleep(1)\ndef parent(p):\n    try:\n"
                    "        return open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1]\n"
                    "    except OSError:\n        return None\n"
                    "kids = [p for p in os.listdir('/proc') if p.isdigit() and\n"
                    "        parent(p) == str(os.getpid())]\nprint('children', len(kids))"),
                nbformat.v4.new_code_cell("%%cuda\n#include <cstdio>\n"
                                          "int main() { printf(\"alive\\n\"); }\n")]
    nb.cells[1].metadata["tags"] = ["raises-exception"]
    _execute(nb, tmp_path, interrupt_on_timeout=True,
             timeout_func=lambda cell: INTERRUPT_S if "for (;;)" in cell.source else CELL_S)
    stopped = nb.cells[1].outputs
    assert any(o["output_type"] == "error" and o["ename"] == "KeyboardInterrupt"
               for o in stopped)
    assert "interrupted: the program was stopped" in _stream(stopped, "stderr")
    assert _stream(nb.cells[2].outputs, "stdout") == "children 0\n"
    assert _stream(nb.cells[3].outputs, "stdout") == "alive\n"


def test_nvcc4jupyter_style_notebook_runs_end_to_end(tmp_path, monkeypatch):
    _kernel_env(monkeypatch, tmp_path)
    nb = nbformat.read(STYLE_NOTEBOOK, as_version=4)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    assert sources[0].strip() == "%load_ext tiledmm"   # the one change from nvcc4jupyter
    _execute(nb, tmp_path)   # raises CellExecutionError on an error output
    outs = [c.outputs for c in nb.cells if c.cell_type == "code"]
    text = "".join(_stream(o, "stdout") for o in outs)
    assert "Hello World from GPU!" in text
    assert "max error 0\n" in text
    assert "hello from main.cu, 2 + 40 = 42\n" in text


# ---- tm.run of several files (what %cuda_group_run runs) ---------------------------------------

def _write(folder, name, text):
    path = folder / name
    path.write_text(text)
    return str(path)


def test_run_of_several_files_compiles_each_apart(tmp_path):
    import tiledmm as tm
    head = _write(tmp_path, "ops.h", "#pragma once\nstruct Pair { int a, b; };\n"
                                     "int combine(Pair p);\n")
    # both files define a static `helper` and include ops.h, whose struct has no guard of its
    # own but #pragma once: compiled apart, as nvcc compiles a group, they do not collide
    lib = _write(tmp_path, "lib.cu",
                 "#include \"ops.h\"\nstatic int helper(int x) { return 3 * x; }\n"
                 "__global__ void k(Pair p, int *out) { *out = p.a * p.b; }\n"
                 "int combine(Pair p) {\n    int *d, h;\n"
                 "    cudaMalloc(&d, sizeof(int));\n    k<<<1, 1>>>(p, d);\n"
                 "    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);\n"
                 "    return helper(h);\n}\n")
    main = _write(tmp_path, "main.cu",
                  "#include <cstdio>\n#include \"ops.h\"\n"
                  "static int helper(int x) { return x + 1; }\n"
                  "int main() { printf(\"%d\\n\", helper(combine({6, 7}))); }\n")
    r = tm.run([main, lib, head], backend="emu", timeout=CELL_S)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "127\n"   # 3 * (6 * 7) + 1
    assert [(ln.kernel, ln.grid) for ln in r.launches] == [("k", (1, 1, 1))]
    # a folder is its .cu files
    _write(tmp_path, "ops.h", "#pragma once\nstruct Pair { int b, a; };\nint combine(Pair p);\n")
    _write(tmp_path, "main.cu", "#include <cstdio>\n#include \"ops.h\"\n"
                                "int main() { Pair p{2, 5}; printf(\"%d %d\\n\", p.a, "
                                "combine(p)); }\n")
    r = tm.run(str(tmp_path), backend="emu", timeout=CELL_S)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "5 30\n"
    # an edited header alone is a new program, not the cached one
    _write(tmp_path, "ops.h", "#pragma once\nstruct Pair { int a, b; };\nint combine(Pair p);\n")
    r = tm.run(str(tmp_path), backend="emu", timeout=CELL_S)
    assert r.stdout == "2 30\n", r.stderr


def test_run_of_several_files_says_which_file_fails(tmp_path):
    import tiledmm as tm
    good = _write(tmp_path, "good.cu", "int main() { return 0; }\n")
    bad = _write(tmp_path, "bad.cu", "void f() {\n    int x = missing_name;\n}\n")
    with pytest.raises(tm.CompileError, match=r"bad\.cu:2:\d+: error: 'missing_name'"):
        tm.run([good, bad], backend="emu", timeout=CELL_S)
    with pytest.raises(ValueError, match="only headers"):
        tm.run([_write(tmp_path, "only.h", "int x;\n")], backend="emu")
