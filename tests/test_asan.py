"""AddressSanitizer over every registered kernel on the emulator: the CPU counterpart of
compute-sanitizer's memcheck on the GPU.

Builds the emu backend with TILEDMM_EMU_ASAN=1 into a temporary folder (the in-place build is
left alone), then runs benchmarks/sanitize_cases.py on it, every kernel with every
combination of its parameters over awkward shapes, in a subprocess with libasan preloaded
(Python itself is not instrumented). Any ASan report (a read or write outside a device
buffer, shared memory or a stack, a use after free) fails the test and is shown.

That ASan does catch an out-of-bounds kernel in this emulator is tested in
tests/test_emu_runtime.py (TestAsan); here the question is whether any real kernel does one.
About 1.5 minutes on 2 cores (build 1 minute, run 30 s).
"""
import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tiledmm as tm
from conftest import pythonpath

ROOT = Path(__file__).resolve().parents[1]
CXX = os.environ.get("CXX", "g++")


def _libasan():
    """Path of the compiler's libasan.so, or None when there is none."""
    if shutil.which(CXX) is None:
        return None
    out = subprocess.run([CXX, "-print-file-name=libasan.so"], capture_output=True, text=True)
    path = out.stdout.strip()
    # without the library, gcc prints the bare name back
    return path if out.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else None


LIBASAN = _libasan()
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ASan build is Linux-only"),
    pytest.mark.skipif(LIBASAN is None,
                       reason=f"libasan not found ({CXX} -print-file-name=libasan.so); "
                              "install the compiler's AddressSanitizer runtime (libasan)"),
]


def _in_place_modules():
    return {p: p.stat().st_mtime_ns for p in (ROOT / "tiledmm").glob("_*.so")}


@pytest.fixture(scope="session")
def asan_build(tmp_path_factory):
    """A folder holding the tiledmm package with an ASan-built tiledmm._emu: built once per
    run, in a folder the run's pytest-xdist workers share (each would otherwise build its own:
    100 s of a 2-core machine's CI each), the first worker to get there building it."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with open(shared / "asan.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        lib = shared / "asan" / "lib"
        if not (lib / "tiledmm" / "__init__.py").exists():
            _build_asan(lib, shared / "asan" / "temp")
    return lib


def _build_asan(lib, temp):
    before = _in_place_modules()
    env = dict(os.environ, TILEDMM_NO_CUDA="1", TILEDMM_EMU_ASAN="1")
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(lib),
                        "--build-temp", str(temp)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"ASan build failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    assert _in_place_modules() == before, "the ASan build touched the in-place modules"
    # the package's Python (subpackages too) and what tm.compile builds user kernels from
    # (tiledmm/native: the prelude and the emulator); not the in-place extension modules
    shutil.copytree(ROOT / "tiledmm", lib / "tiledmm", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))


def _run_asan(lib, args, timeout):
    env = dict(os.environ, PYTHONPATH=pythonpath(str(lib)), LD_PRELOAD=LIBASAN, TILEDMM_BACKEND="emu",
               # report every error (the kernels are built with -fsanitize-recover=address),
               # not only the first; leaks are Python's own, not the kernels'
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=0:allocator_may_return_null=1")
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run([sys.executable, *args], cwd=lib, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_asan_build_is_instrumented_and_loaded(asan_build):
    """Guards the main test against passing vacuously: the module imported is the ASan build,
    it calls ASan's checks, and the runtime is in the process."""
    r = _run_asan(asan_build, ["-c", "import tiledmm._emu as m, sys; print(m.__file__); "
                               "print('libasan' in open('/proc/self/maps').read())"], 120)
    assert r.returncode == 0, r.stderr
    so_path, loaded = r.stdout.split()
    assert Path(so_path).resolve().is_relative_to(asan_build.resolve())
    assert loaded == "True"
    assert b"__asan_report_" in Path(so_path).read_bytes()


def test_every_kernel_clean_under_asan(asan_build):
    r = _run_asan(asan_build, [str(ROOT / "benchmarks" / "sanitize_cases.py"), "--backend", "emu",
                               "--quick"], 900)
    output = r.stdout + r.stderr
    reports = re.findall(r"ERROR: AddressSanitizer: [^\n]*", output)
    assert not reports, (f"{len(reports)} AddressSanitizer report(s), first: {reports[0]}\n"
                         + output[-12000:])
    assert r.returncode == 0, output[-8000:]
    ok = [line for line in r.stdout.splitlines() if line.endswith(": ok")]
    skipped = re.findall(r"^\w+ (\w+) .*: skipped", r.stdout, re.M)
    for spec in tm.kernels():
        assert any(line.split()[1] == spec.name for line in ok) or spec.name in skipped, \
            f"kernel {spec.name} did not run under ASan\n{r.stdout[-4000:]}"


def test_user_kernel_faults_stay_in_the_worker_under_asan(asan_build):
    """The isolation promise holds with the ASan build too: the worker process inherits the
    preloaded runtime, and a faulting user kernel still becomes a KernelError in the caller."""
    cases = ["past_the_end", "abort", "endless_loop"]
    r = _run_asan(asan_build, [str(ROOT / "tests" / "isolation_faults.py"), "emu", *cases], 600)
    assert r.returncode == 0, r.stderr[-5000:]
    import json
    results = json.loads(r.stdout.strip().splitlines()[-1])
    for case in cases:
        assert results[case]["error"] and results[case]["next_call_ok"], (case, results[case])
    assert "past the end of the buffer passed for 'y'" in results["past_the_end"]["error"]
