"""A student's kernel can never take the notebook down (the user-kernel safety issue).

Every fault runs in a subprocess (tests/isolation_faults.py) so that a failure of isolation ends
that subprocess, not pytest; the test asserts that the process survived, the KernelError's text,
and that the next calls (a matmul, a correct user kernel) work. The disk cache's defences, the
bounds on a launch, printf forwarding and the worker's restart are tested here directly.
"""
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.confine import isolation
from tiledmm.toolchain import cache as kernel_cache
from conftest import pythonpath

HERE = Path(__file__).resolve().parent

# case: what the KernelError must say (all of these strings)
EMU_FAULTS = {
    "past_the_end": ["y[1024] is past the end of the buffer passed for 'y' (1000 float elements)",
                     "thread (0,0,0) of block (1,0,0)"],
    "null_pointer": ["invalid memory access", "a null or small pointer", "thread (5,0,0) of block (0,0,0)"],
    # thread 1's address (y[100000000]) may land in some other mapping: a later thread faults
    "far_address": ["outside every argument's buffer", "the nearest is 'y': that would be y["],
    "before_the_start": ["y[-1993]", "thread (7,0,0) of block (0,0,0)"],
    "large_local_array": ["stack overflow", "TILEDMM_EMU_STACK_KB"],
    "abort": ["SIGABRT", "thread (3,0,0) of block (0,0,0)"],
    "failed_assert": ["SIGABRT", "thread (10,0,0)", "Assertion"],
    "cxx_throw": ["SIGABRT", "thread (2,0,0)", "terminate"],
    "integer_division_by_zero": ["integer division by zero", "SIGFPE"],
    "endless_loop": ["ran for more than 2 s and was stopped", "timeout=None"],
    "ctrl_c": ["KeyboardInterrupt"],
}
GPU_FAULTS = {
    "null_pointer": ["cudaErrorIllegalAddress"],
    "far_address": ["kernel execution failed: cudaError"],   # IllegalAddress or InvalidAddressSpace
    "failed_assert": ["cudaErrorAssert"],
    "endless_loop": ["ran for more than 2 s and was stopped"],
    "ctrl_c": ["KeyboardInterrupt"],
}


def _run_faults(backend, cases):
    # the package this test imported, also where it is built in place rather than installed
    package_parent = str(Path(tm.__file__).resolve().parents[1])
    # one emulator thread: blocks run in order, so the first thread to fault is always the same
    env = dict(os.environ, TILEDMM_EMU_THREADS="1", PYTHONPATH=os.pathsep.join(
        [package_parent, *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run([sys.executable, str(HERE / "isolation_faults.py"), backend, *cases],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"the process died ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def emu_faults():
    return _run_faults("emu", list(EMU_FAULTS))


@pytest.mark.parametrize("case", list(EMU_FAULTS))
def test_a_fault_is_a_kernel_error_and_the_next_call_works(emu_faults, case):
    result = emu_faults[case]
    assert result["error"] is not None, f"{case}: no error raised"
    for text in EMU_FAULTS[case]:
        assert text in result["error"], f"{case}: {text!r} not in:\n{result['error']}"
    assert result["next_call_ok"]


def test_ctrl_c_stops_a_running_kernel_within_a_second(emu_faults):
    late = emu_faults["ctrl_c"]["seconds"]
    assert late is not None, "the simulated Ctrl-C never arrived (the kernel's limit ended it)"
    assert late < 1.0, emu_faults["ctrl_c"]


def test_ctrl_c_case_works_where_the_parent_ignores_sigint():
    """A shell's background job starts with SIGINT ignored (issue 29, item 3): the case
    installs Python's handler itself, and a lost interrupt would end in 30 s, not hang."""
    package_parent = str(Path(tm.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=pythonpath(package_parent))
    proc = subprocess.run([sys.executable, str(HERE / "isolation_faults.py"), "emu", "ctrl_c"],
                          capture_output=True, text=True, timeout=180, env=env,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])["ctrl_c"]
    assert result["seconds"] is not None and result["seconds"] < 1.0, result


@pytest.mark.gpu
@pytest.mark.skipif(not tm._backend.cuda_device_count(), reason="needs a CUDA device")
def test_gpu_faults_stay_in_the_worker_and_the_callers_context_works():
    results = _run_faults("cuda", list(GPU_FAULTS))
    for case, texts in GPU_FAULTS.items():
        assert results[case]["error"], case
        for text in texts:
            assert text in results[case]["error"], (case, results[case]["error"])
        assert results[case]["next_call_ok"], case


GOOD = tm_source = ("__global__ void k(float *y, int n)\n{\n    int i = blockIdx.x * blockDim.x + "
                    "threadIdx.x;\n    if (i < n) y[i] = 2.0f * i;\n}\n")
PRINTS = ("__global__ void hello(float *y)\n{\n    if (threadIdx.x == 1) printf(\"hello %d\\n\", "
          "blockIdx.x);\n    y[threadIdx.x] = 1.0f;\n}\n")


def test_the_worker_is_started_again_after_a_fault():
    worker = isolation.worker()
    good = tm.compile(GOOD, backend="emu")
    good(1, 32, np.zeros(32, np.float32), 32, backend="emu")
    pid = worker.pid
    bad = tm.compile(GOOD.replace("if (i < n) y[i]", "y[i * 1000]"), backend="emu")
    with pytest.raises(tm.KernelError, match="past the end"):
        bad(1, 32, np.zeros(32, np.float32), 32, backend="emu")
    y = np.zeros(32, np.float32)
    good(1, 32, y, 32, backend="emu")
    assert worker.pid not in (None, pid) and np.array_equal(y, 2.0 * np.arange(32))


def test_printf_reaches_the_caller(capfd):
    tm.compile(PRINTS, backend="emu")(3, 4, np.zeros(4, np.float32), backend="emu")
    out = capfd.readouterr().out
    assert sorted(line for line in out.splitlines() if line.startswith("hello")) == \
        ["hello 0", "hello 1", "hello 2"], out


def test_isolate_false_runs_in_this_process():
    kernel = tm.compile(GOOD, backend="emu", isolate=False)
    y = np.zeros(100, np.float32)
    kernel(1, 128, y, 100, backend="emu")
    assert np.array_equal(y, 2.0 * np.arange(100))


@pytest.mark.parametrize("field, value", [("repeat", 4 * 10**8), ("warmup", 10**7),
                                          ("repeat", 0), ("timeout", -1)])
def test_launch_bounds_are_refused(field, value):
    kernel = tm.compile(GOOD, backend="emu")
    with pytest.raises(ValueError, match=field):
        kernel(1, 32, np.zeros(32, np.float32), 32, backend="emu", **{field: value})


def test_a_refused_launch_changes_nothing():
    source = ("__global__ void k(float *y, int n)\n{\n    extern __shared__ float s[];\n"
              "    s[threadIdx.x] = threadIdx.x;\n    __syncthreads();\n"
              "    if (threadIdx.x < n) y[threadIdx.x] = s[n - 1 - threadIdx.x];\n}\n")
    source = source.replace("extern __shared__ float s[];", "TM_DYNAMIC_SHARED(float, s);")
    kernel = tm.compile(source, backend="emu", isolate=False)
    with pytest.raises(ValueError, match="shared_bytes"):
        kernel(1, 32, np.zeros(32, np.float32), 32, shared_bytes=2**32 + 128, backend="emu")
    y = np.zeros(32, np.float32)
    kernel(1, 32, y, 32, shared_bytes=64 * 1024, backend="emu")   # above the 48 KiB default
    assert np.array_equal(y, np.arange(32)[::-1])


# ---- the disk cache ------------------------------------------------------------------------

@pytest.fixture
def cache_folder(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(folder))
    tm.clear_cache()
    yield folder
    tm.clear_cache()


def _unique(tag):
    return GOOD.replace("2.0f * i", f"2.0f * i + 0.0f * {time.time_ns() % 1000003}") + f"// {tag}\n"


def test_a_world_writable_cache_folder_is_refused_and_a_planted_library_never_loaded(
        tmp_path, monkeypatch):
    source = _unique("planted")
    private = tmp_path / "private"
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(private))
    tm.clear_cache()
    tm.compile(source, backend="emu")
    [entry] = [p for p in private.glob("user-*.so")]
    # another user's folder: world-writable, holding a library under the expected name whose
    # constructor leaves a mark, with a digest that matches it
    planted = tmp_path / "shared"
    planted.mkdir()
    mark = tmp_path / "PLANTED-CODE-RAN"
    evil = tmp_path / "evil.c"
    evil.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void f(void)\n'
                    f'{{ FILE *m = fopen("{mark}", "w"); if (m) fclose(m); }}\n'
                    'int tm_user_launch(void) { return 0; }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(planted / entry.name), str(evil)],
                   check=True)
    kernel_cache.store_bytes((planted / entry.name).read_bytes(), str(planted / entry.name))
    os.chmod(planted, 0o777)
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(planted))
    tm.clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = np.zeros(64, np.float32)
        tm.compile(source, backend="emu")(1, 64, y, 64, backend="emu")
        tm.compile(source, backend="emu", isolate=False)(1, 64, y, 64, backend="emu")
    assert not mark.exists()
    assert np.array_equal(y, 2.0 * np.arange(64))
    assert any("writable by group or others" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]
    tm.clear_cache()


def test_a_truncated_entry_is_rebuilt(cache_folder):
    source = _unique("truncated")
    tm.compile(source, backend="emu")
    [entry] = list(cache_folder.glob("user-*.so"))
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 3])
    tm.clear_cache()
    before = tm.cache_info()["compiled"]
    y = np.zeros(64, np.float32)
    tm.compile(source, backend="emu")(1, 64, y, 64, backend="emu")
    assert tm.cache_info()["compiled"] == before + 1
    assert np.array_equal(y, 2.0 * np.arange(64))
    assert entry.read_bytes() != data[: len(data) // 3]


def test_an_entry_others_can_write_is_not_loaded(cache_folder):
    source = _unique("group-writable")
    tm.compile(source, backend="emu")
    [entry] = list(cache_folder.glob("user-*.so"))
    os.chmod(entry, 0o666)
    tm.clear_cache()
    before = tm.cache_info()["compiled"]
    tm.compile(source, backend="emu")
    assert tm.cache_info()["compiled"] == before + 1
    assert not stat.S_IMODE(entry.stat().st_mode) & 0o022


def test_clearing_the_cache_while_compiling_does_not_break_the_compile(cache_folder):
    stop, errors = threading.Event(), []

    def clear_again_and_again():
        while not stop.is_set():
            tm.clear_cache(disk=True)
            time.sleep(0.005)

    threading.Thread(target=clear_again_and_again, daemon=True).start()
    try:
        for n in range(3):
            y = np.zeros(64, np.float32)
            try:
                tm.compile(_unique(f"cleared {n}"), backend="emu")(1, 64, y, 64, backend="emu")
                assert np.array_equal(y, 2.0 * np.arange(64))
            except Exception as exc:   # noqa: BLE001 - the test reports whatever broke
                errors.append(repr(exc))
    finally:
        stop.set()
    assert not errors, errors


def test_the_cache_folder_is_private(cache_folder):
    tm.compile(_unique("private"), backend="emu")
    mode = stat.S_IMODE(os.stat(cache_folder).st_mode)
    assert mode & 0o077 == 0, oct(mode)


# ---- in a notebook kernel ------------------------------------------------------------------

def test_interrupting_a_notebook_kernel_stops_the_user_kernel_and_keeps_the_notebook():
    """Jupyter's interrupt (SIGINT to the kernel process) during an endless user kernel: the
    cell ends with KeyboardInterrupt, the notebook's state survives, the next cell works."""
    jupyter_client = pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    package_parent = str(Path(tm.__file__).resolve().parents[1])
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(env=dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_parent, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])))
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)

        def run(code, timeout=120, interrupt_after=None):
            msg_id = client.execute(code)
            if interrupt_after is not None:
                time.sleep(interrupt_after)
                km.interrupt_kernel()
            outputs, status = [], None
            while True:
                msg = client.get_iopub_msg(timeout=timeout)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    outputs.append(content["text"])
                elif kind == "error":
                    status = content["ename"]
                elif kind == "status" and content["execution_state"] == "idle":
                    return status, "".join(outputs)

        status, _ = run("import numpy as np, tiledmm as tm\nstate = 42\n"
                        "k = tm.compile('__global__ void spin(float *y) { while (1) {} }', "
                        "backend='emu')\nprint('compiled')")
        assert status is None
        # a limit of 60 s: an interrupt that is lost ends as a KernelError, not a hang
        status, _ = run("k(1, 1, np.zeros(1, np.float32), backend='emu', timeout=60)",
                        interrupt_after=3)
        assert status == "KeyboardInterrupt"
        status, out = run("y = np.zeros(8, np.float32)\n"
                          "tm.compile('__global__ void one(float *y) { y[threadIdx.x] = 1; }', "
                          "backend='emu')(1, 8, y, backend='emu')\nprint(state, y.sum())")
        assert status is None and out.split() == ["42", "8.0"], out
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_kernel_printing_without_end_keeps_memory_bounded(capfd, monkeypatch):
    """printf in an endless loop until the timeout: the caller keeps the last STDOUT_KEEP bytes
    (4 MiB; 64 KiB here) and says how much it dropped, instead of holding all of it."""
    monkeypatch.setattr(isolation.Worker, "STDOUT_KEEP", 64 << 10)
    isolation.worker().stop()   # the next worker's pipes use the smaller size
    chatty = tm.compile('__global__ void chatty(float *y) { while (1) printf("%d ", '
                        'threadIdx.x); }', backend="emu")
    with pytest.raises(tm.KernelError, match="ran for more than 2 s"):
        chatty(1, 32, np.zeros(1, np.float32), backend="emu", timeout=2)
    out = capfd.readouterr().out
    assert "bytes are not shown" in out and len(out) < 256 << 10, len(out)
    isolation.worker().stop()


def test_arguments_larger_than_the_memory_limit_are_a_memory_error():
    """The shared file is the caller's memory: above TILEDMM_HOST_MEMORY_LIMIT it is refused
    with MemoryError before anything is allocated, and the next call works."""
    code = ("import numpy as np, tiledmm as tm\n"
            "k = tm.compile('__global__ void k(float *y, int n) { y[threadIdx.x] = 1; }', "
            "backend='emu')\n"
            "y = np.zeros((300 << 20) // 4, np.float32)\n"
            "try:\n    k(1, 1, y, 1, backend='emu')\nexcept MemoryError as e:\n    print('MemoryError', e)\n"
            "y = np.zeros(4, np.float32); k(1, 4, y, 4, backend='emu'); print('next', y.sum())\n")
    package_parent = str(Path(tm.__file__).resolve().parents[1])
    env = dict(os.environ, TILEDMM_HOST_MEMORY_LIMIT="256M", PYTHONPATH=pythonpath(package_parent))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "MemoryError out of memory: the kernel's arguments need 0.315 GB" in proc.stdout, \
        proc.stdout
    assert "TILEDMM_HOST_MEMORY_LIMIT" in proc.stdout and "next 4.0" in proc.stdout, proc.stdout
