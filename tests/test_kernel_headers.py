"""The kernel headers' rooms (issue 33): the dialect macros shared by the registry's kernels and
the prelude live in one header (tiledmm/native/kernel_dialect.h); the prelude is small and brings check
mode's runtime (tiledmm_check.h) only into check-mode compiles; the emulator is its own floor
(tiledmm/native/emu/), which the kernels and the glue include, and which includes neither."""
import glob
import os
import re
import shutil
import subprocess

import pytest

from tiledmm.toolchain import compile_emu as _compile_emu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NATIVE = os.path.join(ROOT, "tiledmm", "native")
CXX = _compile_emu.cxx_compiler()
PREPROCESS_SECONDS = 120


def emu_headers(*patterns):
    return sorted(p for pat in patterns for p in glob.glob(os.path.join(ROOT, pat), recursive=True))


def test_dialect_macros_are_defined_in_one_header():
    sources = emu_headers("cuda/*.h", "cuda/*.cu", "csrc/*.[ch]",
                          "tiledmm/native/**/*.[ch]*")
    ceil_div = [p for p in sources if re.search(r"\btm_ceil_div\s*\(\s*long long", open(p).read())]
    assert [os.path.relpath(p, ROOT) for p in ceil_div] == ["tiledmm/native/kernel_dialect.h"]
    first = [p for p in sources
             if re.search(r"^#define TM_DYNAMIC_SHARED\(", open(p).read(), re.M)
             and "#undef TM_DYNAMIC_SHARED" not in open(p).read()]
    assert [os.path.relpath(p, ROOT) for p in first] == ["tiledmm/native/kernel_dialect.h"]
    for includer in ("tiledmm/native/common.h", "tiledmm/native/tiledmm_kernel.h"):
        assert '#include "kernel_dialect.h"' in open(os.path.join(ROOT, includer)).read()


def test_the_emulator_includes_no_kernel_or_glue_header():
    # two arrows down (native/common.h and csrc/ include native/emu/), none back up
    above = {os.path.basename(p) for p in emu_headers("cuda/*.h", "csrc/*.h",
                                                      "tiledmm/native/common.h",
                                                      "tiledmm/native/registry.h")}
    for path in emu_headers("tiledmm/native/emu/**/*.h", "tiledmm/native/emu/**/*.cpp"):
        for name in re.findall(r'^#include "([^"]+)"', open(path).read(), re.M):
            assert os.path.basename(name) not in above, f"{path} includes {name}"


@pytest.mark.skipif(shutil.which(CXX) is None, reason=f"needs {CXX}")
@pytest.mark.parametrize("check", [False, True])
def test_check_mode_runtime_only_in_check_mode_compiles(tmp_path, check):
    src = tmp_path / "k.cpp"
    src.write_text('#include "tiledmm_kernel.h"\n'
                   "__global__ void k(float *x) { x[tm_ceil_div(5, 2)] = 1; }\n")
    includes = _compile_emu.emu_headers()[0]
    r = subprocess.run([CXX, "-E", "-x", "c++", "-std=c++17", "-DTM_EMU",
                        *(["-DTM_CHECK"] if check else []), *[f"-I{d}" for d in includes],
                        str(src)],
                       capture_output=True, text=True, timeout=PREPROCESS_SECONDS)
    assert r.returncode == 0, r.stderr[-3000:]
    assert ("struct tm_check_launch_t" in r.stdout) == check
    assert "tm_extern_shared" in r.stdout and "tm_user_finish" in r.stdout
    prelude = open(os.path.join(NATIVE, "tiledmm_kernel.h")).read()
    assert len(prelude.splitlines()) < 80 and "tm_check_launch_t" not in prelude
