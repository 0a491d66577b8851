"""How the emulator's code is built: the flags and compiler probe that setup.py uses for
tiledmm._emu and tiledmm._emu_profile, and that tm.compile and tm.run use for a user's kernel or
program and the emulator runtime linked into it (tiledmm/toolchain/compile_emu.py, tiledmm/programs/run.py).
One list for both, so that user code links against runtime objects built exactly as the
registry's are, and a student's kernel is counted in profile mode exactly as the registry's are
(docs/profile.md). setup.py reads this file with runpy (it cannot import the package it builds):
plain Python, no imports from tiledmm."""
import os
import platform
import subprocess
import tempfile
import threading

# Every header the package ships and the emulator runtime's sources, in their installed layout
# (the same folder in a checkout and in an installed copy): the dialect, the prelude, check
# mode, the fault report and the program headers in native/, the emulator (headers, runtime.cpp,
# scheduler.cpp, profile/) in native/emu/, the stand-ins for the CUDA toolkit's headers in
# native/user/. Everything compiles with -I NATIVE and includes by path below it
# ("emu/cuda_emu.h"): setup.py (which names it relative to the project root), tm.compile, NVRTC
# and tm.run. Comments across the package name these files the same way (emu/scheduler.cpp).
NATIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native")
EMU_DIR = os.path.join(NATIVE, "emu")

# The emulator's C++: the kernels (cuda/*.cu), the runtime (emu/*.cpp) and user code alike.
# -fstack-clash-protection: a kernel frame larger than a page (a big local array, float
# buf[1 << 20]) probes its stack page by page, so it faults in the fiber stack's guard page and
# is reported as a stack overflow, instead of jumping the guard into a neighbouring stack.
# -fopenmp: blocks spread over OS threads; left out where the compiler lacks it (accepts()).
# No -mtls-dialect=gnu2 (TLS descriptors): in a dlopen'ed library glibc before 2.40 resolves
# them with _dl_tlsdesc_dynamic, which clobbers caller-saved registers (glibc bug 31372); the
# extension crashed with SIGFPE in run_block (benchmarks/emu_notes.md, issue 34).
# One run of the C++ compiler (a runtime object, a kernel, a whole program) may take this long.
COMPILER_RUN_SECONDS = 300

EMU_FLAGS = ["-x", "c++", "-std=c++17", "-O2", "-fPIC", "-fopenmp", "-fstack-clash-protection",
             "-DTM_EMU"]

# Profile mode: the kernels get ThreadSanitizer's instrumentation (calls before every load and
# store, implemented by emu/profile/emu_profile.cpp; libtsan is not linked). No vectorising and
# no loops turned into memcpy/memset calls, so every access of the source stays one access.
# No scalar replacement of aggregates (-fno-tree-sra): a float4 load or store stays one 16-byte
# access (__tsan_read16), as it is one LDG.128/LDS.128 on the GPU, instead of four 4-byte ones
# (measured against ncu on the H100: fast, shuffle and vectorized then agree exactly).
# -fsanitize-coverage=trace-pc: a call at the start of every basic block, whose return address
# names the block: each lane's path between barriers, for the divergent-branch count.
# TM_EMU_PROFILE: cp.async's emulator helpers (cuda/matmul_fast.cu) hand the copy to the profile
# hooks, which count it as one cp.async (LDGSTS) access as ncu does.
PROFILE_KERNEL_FLAGS = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
                        "-fsanitize-coverage=trace-pc", "-DTM_EMU_PROFILE",
                        # template statics (the __shared__ arrays) stay this module's own, not
                        # unified with tiledmm._emu's by the dynamic linker (STB_GNU_UNIQUE)
                        "-fno-gnu-unique",
                        "-fno-tree-vectorize", "-fno-tree-loop-distribute-patterns", "-fno-tree-sra",
                        # no jump threading: it copies a block into each path that reaches it, so
                        # `s[i] = c ? g[j] : 0` became two stores (two PCs) and a warp whose lanes
                        # took both paths counted two shared stores where the GPU runs one
                        "-fno-thread-jumps"]
# emu/profile's hooks read their thread-local state on every access and basic block: TLS
# descriptors (x86-64's -mtls-dialect=gnu2; aarch64's default) make that read cheaper than a
# __tls_get_addr call in a dlopen'ed module.
PROFILE_HOOK_FLAGS = ["-mtls-dialect=gnu2"] if platform.machine() in ("x86_64", "AMD64") else []


def profile_split_flags(split_hooks):
    """The flags of a profile build that holds kernels split at their barriers: emu/profile/
    split_hooks.h (the path `split_hooks`) included first, defining the transform's hook macros
    as calls into emu_profile.cpp, and TM_PROFILE_SPLIT (barrier_split.registry_source's guard).
    setup.py (the registry), tm.compile and tm.run alike."""
    return ["-include", split_hooks, "-DTM_PROFILE_SPLIT"]


# The emulator entry points whose calls from the kernels emu_profile.cpp sees (ld --wrap).
PROFILE_WRAPPED = ["_ZN6tm_emu6launchEPKvPFvPvES2_4dim3S5_m",
                   "_ZN6tm_emu19launch_whole_blocksEPKvPFvPvES2_4dim3S5_m",
                   "_ZN6tm_emu7warp_opEijyiiPKci",
                   "tm_emu_syncthreads", "tm_emu_syncthreads_op", "cudaMalloc", "cudaFree",
                   "cudaDeviceGetAttribute"]

# A tiny program, and the OpenMP call that shows -fopenmp works (C and C++ alike).
_PROBE = "int tm_probe(void) { return 0; }\n"
_OMP_PROBE = "#include <omp.h>\nint tm_probe(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n"
_PROBES = {}   # (command, flags, suffix, shared) -> accepted: feature tests, once per process
_PROBES_LOCK = threading.Lock()
PROBE_SECONDS = 120   # one probe's compile and link


def accepts(cmd, flags, suffix=".cpp", shared=False):
    """Whether the compiler command `cmd` (e.g. ["g++", "-x", "c++"]) builds a tiny program (a
    shared object with `shared`) with `flags`: a feature test, cached per process. Apple clang
    has no -fopenmp, Apple's linker no -Bsymbolic: there they are left out (the emulator then
    runs blocks on one thread; Mach-O binds a library's own symbols to itself). A compiler that
    cannot be run counts as accepting: the real command then says what is missing."""
    key = (tuple(cmd), tuple(flags), suffix, shared)
    with _PROBES_LOCK:
        if key in _PROBES:
            return _PROBES[key]
    source = (_OMP_PROBE if "-fopenmp" in flags else _PROBE) + (
        "" if shared else "int main(void) { return tm_probe(); }\n")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe" + suffix)
        with open(path, "w") as f:
            f.write(source)
        try:
            ok = subprocess.run([*cmd, "-fPIC", *flags, *(["-shared"] if shared else []), path,
                                 "-o", os.path.join(tmp, "probe")], capture_output=True,
                                timeout=PROBE_SECONDS).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = True
    with _PROBES_LOCK:
        _PROBES[key] = ok
    return ok


def build_flags(cxx):
    """EMU_FLAGS less what the C++ compiler `cxx` does not accept (-fopenmp)."""
    return [f for f in EMU_FLAGS if f != "-fopenmp" or accepts([cxx, "-x", "c++"], [f])]


def link_flags(cxx):
    """The flags that link a user's shared object: -Bsymbolic where the linker takes it (the
    object's own copy of the emulator runtime binds to itself, not to tiledmm._emu's)."""
    symbolic = ["-Wl,-Bsymbolic"]
    return symbolic if accepts([cxx, "-x", "c++"], symbolic, shared=True) else []
