"""Build tiledmm's two backends from the same sources.

tiledmm._cuda  nvcc compiles cuda/*.cu for the GPU; the C glue links the CUDA runtime
               statically, so the module imports without CUDA_HOME and without a driver.
               Skipped, with a notice, when nvcc is not found.
tiledmm._emu   g++ compiles the same cuda/*.cu against the emulator in tiledmm/native/emu/.

Environment:
  TILEDMM_CUDA_ARCHS  compute capabilities to build, e.g. "90" or "80;90" or "90a"
                      (default "75;80;86;89;90"; PTX of the last is embedded too). Where the
                      list has 90 (or 90a), cuda/matmul_tf32x3.cu is built for sm_90a instead,
                      with its wgmma kernel (a 90a binary runs on compute capability 9.0 only)
  TILEDMM_CUTLASS_INCLUDE  CUTLASS's include folder (the one holding cutlass/): builds the
                      `cutlass` reference kernel (cuda/matmul_cutlass.cu, sm_80+ only). Without
                      it, the nvidia-cutlass wheel's cutlass_library/source/include is used when
                      that wheel is importable (pip's isolated build cannot see it: use
                      --no-build-isolation); otherwise `cutlass` is built as a stub that says so
  TILEDMM_NO_CUDA=1   build only the emulator backend
  TILEDMM_EMU_ASAN=1  build the emulator backend under AddressSanitizer
  TILEDMM_NO_PROFILE=1  skip tiledmm._emu_profile (profile=True on emu), a second build of the
                      emulator whose kernel objects count memory accesses (docs/profile.md)
  CUDA_HOME           where the CUDA toolkit is (default: from nvcc on PATH, /usr/local/cuda)
"""
import glob
import importlib
import importlib.util
import os
import runpy
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # source paths below are relative to the project root

# Every header the package ships, and the emulator runtime's sources, live in tiledmm/native/ in
# their installed layout (package data, pyproject.toml): the kernels, the glue and user code all
# compile with -I tiledmm/native and include by path below it ("emu/cuda_emu.h").
NATIVE = os.path.join("tiledmm", "native")
EMU_DIR = os.path.join(NATIVE, "emu")
KERNEL_SOURCES = sorted(glob.glob("cuda/*.cu"))
HEADERS = sorted(glob.glob("cuda/*.h") + glob.glob("csrc/*.h") +
                 glob.glob(os.path.join(NATIVE, "**", "*.h"), recursive=True))
GLUE_SOURCES = sorted(glob.glob("csrc/*.c"))
EMU_RUNTIME_SOURCES = sorted(glob.glob(os.path.join(EMU_DIR, "*.cpp")))
PROFILE_SOURCES = sorted(glob.glob(os.path.join(EMU_DIR, "profile", "*.cpp")))
# The emulator's flags, profile mode's flags and wrapped symbols, and the compiler probe: one
# module, shared with tm.compile and tm.run, whose user code links against runtime objects
# built with the same flags (read by path: the package cannot be imported before it is built).
_EMU_BUILD = runpy.run_path(os.path.join(HERE, "tiledmm", "_emu_build.py"))
EMU_FLAGS = _EMU_BUILD["EMU_FLAGS"]
PROFILE_KERNEL_FLAGS = _EMU_BUILD["PROFILE_KERNEL_FLAGS"]
PROFILE_HOOK_FLAGS = _EMU_BUILD["PROFILE_HOOK_FLAGS"]
PROFILE_WRAPPED = _EMU_BUILD["PROFILE_WRAPPED"]
compiler_accepts = _EMU_BUILD["accepts"]
# The barrier-splitting transform (issue 34), run over cuda/*.cu for tiledmm._emu: tiledmm/ loaded
# by path as a package of its own, without its __init__ (which imports the compiled modules); the
# transform imports nothing compiled. Its files are tiledmm/toolchain/split/__init__.py's list.
BUILD_PACKAGE = "_tiledmm_build"


def _build_package():
    """tiledmm/ as the package BUILD_PACKAGE, its __init__ not run."""
    if BUILD_PACKAGE not in sys.modules:
        stub = types.ModuleType(BUILD_PACKAGE)
        stub.__path__ = [os.path.join(HERE, "tiledmm")]
        sys.modules[BUILD_PACKAGE] = stub
    return sys.modules[BUILD_PACKAGE]


def split_files():
    """The transform's files (tiledmm/toolchain/split/__init__.py's FILES), as setup.py's paths."""
    _build_package()
    split = importlib.import_module(BUILD_PACKAGE + ".toolchain.split")
    return [os.path.join("tiledmm", *f.split("/")) for f in split.FILES]


SPLIT_SOURCES = split_files()


def load_barrier_split():
    """tiledmm/toolchain/split/transform.py, or None where it cannot load (then every registry
    kernel keeps its fibers)."""
    try:
        _build_package()
        return importlib.import_module(BUILD_PACKAGE + ".toolchain.split.transform")
    except Exception as exc:   # noqa: BLE001 -- any failure means fibers, never a failed build
        print(f"tiledmm: the barrier-splitting transform did not load ({exc}): registry kernels "
              "run on fibers on emu", file=sys.stderr)
        return None


def split_registry_sources(out_dir, sources=KERNEL_SOURCES):
    """{cuda/X.cu: out_dir/X.cu} for the kernel files of `sources` the transform changed
    (written only when their text changes, so builds stay incremental); {} without libclang."""
    split = load_barrier_split()
    if split is None or split.cindex() is None:
        print("tiledmm: libclang is not importable at build time: registry kernels run on "
              "fibers on emu (pip install libclang)", file=sys.stderr)
        return {}
    os.makedirs(out_dir, exist_ok=True)
    made = {}
    for src in sources:
        with open(src) as f:
            text = f.read()
        try:
            new, reasons = split.registry_source(text, src)
        except Exception as exc:   # noqa: BLE001 -- a transform bug costs speed, not the build
            print(f"tiledmm: {src}: the barrier split failed ({exc}): fibers", file=sys.stderr)
            continue
        if new == f'#line 1 "{src}"\n' + text:
            continue
        dst = os.path.join(out_dir, os.path.basename(src))
        old = None
        if os.path.exists(dst):
            with open(dst) as f:
                old = f.read()
        if old != new:
            with open(dst, "w") as f:
                f.write(new)
        made[src] = dst
    for stale in set(glob.glob(os.path.join(out_dir, "*.cu"))) - set(made.values()):
        os.remove(stale)   # a kernel file the transform no longer changes compiles as written
    return made


# Kernel files whose split at barriers the profile build compiles too (issue 34): their counts
# are the fibers' own (tests/test_profile_split.py compares every counter). The split text is
# the plain build's; the profile build compiles it with native/emu/profile/split_hooks.h first
# (PROFILE_SPLIT_FLAGS), whose macros tell emu_profile.cpp whose turn a thread loop runs and where
# the barriers were. TILEDMM_PROFILE_SPLIT=0 at build time keeps the fibers for every file (the
# comparison); "reduce_steps.cu,..." names the files instead. At run time TILEDMM_EMU_SPLIT=0
# makes a launch take the fibers as in the plain build.
# The matmul files count the same split but slower (benchmarks/emu_notes.md): fibers.
PROFILE_SPLIT_DEFAULT = ("reduce_steps.cu", "reduce_lecture.cu", "reduce_per_level.cu",
                         "elementwise.cu")
_PROFILE_SPLIT_ENV = os.environ.get("TILEDMM_PROFILE_SPLIT", "").strip()
PROFILE_SPLIT_FILES = set() if _PROFILE_SPLIT_ENV == "0" else {
    f"cuda/{f.strip()}" for f in
    (_PROFILE_SPLIT_ENV.split(",") if _PROFILE_SPLIT_ENV else PROFILE_SPLIT_DEFAULT) if f.strip()}
PROFILE_SPLIT_HOOKS = os.path.join(EMU_DIR, "profile", "split_hooks.h")
# TM_PROFILE_SPLIT: a kernel whose block-level code (between thread loops) may touch counted
# memory keeps its fibers in the profile build (barrier_split.registry_source).
# PROFILE_HOOK_FLAGS: each thread's turn stores its index into tm_emu_tls (the fault report's
# thread), a __tls_get_addr call per turn in the default TLS dialect of a dlopen'ed module.
PROFILE_SPLIT_FLAGS = [*_EMU_BUILD["profile_split_flags"](os.path.abspath(PROFILE_SPLIT_HOOKS)),
                       *PROFILE_HOOK_FLAGS]


def profile_split_sources(out_dir):
    """split_registry_sources for PROFILE_SPLIT_FILES (the profile build's own directory)."""
    return split_registry_sources(out_dir, [s for s in KERNEL_SOURCES if s in PROFILE_SPLIT_FILES])


DEFAULT_ARCHS = "75;80;86;89;90"
# Kernel files that need a newer GPU than DEFAULT_ARCHS's oldest: compiled only for the listed
# architectures at or above this compute capability (CUTLASS's SM80 SIMT GEMM uses cp.async).
MIN_ARCH = {"cuda/matmul_cutlass.cu": 80,
            # tensor cores: wmma in TF32 and mma.sync.m16n8k8.tf32 / cvt.rna.tf32 are sm_80+
            "cuda/matmul_wmma.cu": 80, "cuda/matmul_tf32x3.cu": 80}


def find_cuda_home():
    """The CUDA toolkit root, or None when no nvcc can be found (tiledmm/_toolkit.py, the one
    lookup, loaded by path: nothing is built yet)."""
    spec = importlib.util.spec_from_file_location("_tiledmm_toolkit",
                                                  os.path.join(HERE, "tiledmm", "_toolkit.py"))
    toolkit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toolkit)
    return toolkit.home()


def cuda_archs():
    return [a.strip().replace(".", "") for a in
            os.environ.get("TILEDMM_CUDA_ARCHS", DEFAULT_ARCHS).replace(",", ";").split(";")
            if a.strip()]


def gencode_flags(archs=None):
    archs = archs or cuda_archs()
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    flags.append(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}")
    return flags


def cutlass_include():
    """CUTLASS's include folder: $TILEDMM_CUTLASS_INCLUDE, else the installed nvidia-cutlass
    wheel's cutlass_library/source/include (found without importing it), else None."""
    env = os.environ.get("TILEDMM_CUTLASS_INCLUDE")
    if env:
        if not os.path.exists(os.path.join(env, "cutlass", "gemm", "device", "gemm.h")):
            raise RuntimeError(f"TILEDMM_CUTLASS_INCLUDE={env} has no cutlass/gemm/device/gemm.h: "
                               "point it at CUTLASS's include folder (the one holding cutlass/)")
        return env
    import importlib.util
    spec = importlib.util.find_spec("cutlass_library")
    if spec and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            path = os.path.join(root, "source", "include")
            if os.path.exists(os.path.join(path, "cutlass", "gemm", "device", "gemm.h")):
                return path
    return None


# Kernel files with a kernel for sm_90a (wgmma): where the list has 90 or 90a they are built for
# sm_90a instead of sm_90, with -DTM_TF32X3_WGMMA so that the host code dispatches to it on
# compute capability 9.0; the PTX embedded is the last plain architecture's (an sm_90a binary
# has none that other GPUs could use), compute_90's when the list has no other.
SM90A = {"cuda/matmul_tf32x3.cu"}


def sm90a_flags(archs):
    """gencode flags for an SM90A file: sm_90a machine code in place of sm_90's."""
    plain = [a for a in archs if a.rstrip("af") != "90"]
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in plain]
    flags.append("-gencode=arch=compute_90a,code=sm_90a")
    ptx = plain[-1] if plain else "90"
    flags += [f"-gencode=arch=compute_{ptx},code=compute_{ptx}", "-DTM_TF32X3_WGMMA"]
    return flags


def kernel_nvcc_flags(src):
    """Architecture and extra flags for one kernel file: MIN_ARCH's files only for the listed
    architectures they support; SM90A's for sm_90a where the list has 90; matmul_cutlass.cu with
    CUTLASS's headers where they are found (else it compiles to a stub that says how to build
    it)."""
    archs = cuda_archs()
    least = MIN_ARCH.get(src)
    if least is not None:
        archs = [a for a in archs if int(a.rstrip("af")) >= least]
    if src in SM90A and any(a.rstrip("af") == "90" for a in archs):
        return sm90a_flags(archs)
    extra = []
    if src == "cuda/matmul_cutlass.cu":
        include = cutlass_include() if archs else None
        if include:
            extra = ["-DTM_HAVE_CUTLASS", f"-I{include}", "--expt-relaxed-constexpr"]
            print(f"tiledmm: building kernel 'cutlass' with CUTLASS from {include} for sm_"
                  + ", sm_".join(archs), file=sys.stderr)
        else:
            print("tiledmm: kernel 'cutlass' not built (" + (
                "no CUTLASS headers: set TILEDMM_CUTLASS_INCLUDE or install nvidia-cutlass and "
                "build with --no-build-isolation" if archs else
                "no sm_80+ architecture in TILEDMM_CUDA_ARCHS") + ")", file=sys.stderr)
            archs = cuda_archs()  # the stub has no kernel: any architecture list does
    return gencode_flags(archs) + extra


def emu_asan_flags():
    if os.environ.get("TILEDMM_EMU_ASAN") == "1":
        return ["-fsanitize=address", "-fsanitize-recover=address", "-fno-omit-frame-pointer"]
    return []


def up_to_date(obj, src):
    if not os.path.exists(obj):
        return False
    stamp = os.path.getmtime(obj)
    return all(os.path.getmtime(p) <= stamp
               for p in [src, *HEADERS, *SPLIT_SOURCES, __file__,
                         os.path.join("tiledmm", "_emu_build.py")])


class BuildExt(build_ext):
    """Compile the kernel sources with the backend's compiler, then let setuptools compile the
    C glue and link. setuptools cannot drive nvcc or compile one source twice with different
    macros into separate objects, hence the per-extension build folders here."""

    def run(self):
        self.cuda_home = None if os.environ.get("TILEDMM_NO_CUDA") == "1" else find_cuda_home()
        if self.cuda_home is None:
            print("tiledmm: nvcc not found (or TILEDMM_NO_CUDA=1): building the CPU emulator "
                  "backend only; backend='cuda' will say so at the first call", file=sys.stderr)
            self.extensions = [e for e in self.extensions if e.name != "tiledmm._cuda"]
        if os.environ.get("TILEDMM_NO_PROFILE") == "1" or emu_asan_flags():
            self.extensions = [e for e in self.extensions if e.name != "tiledmm._emu_profile"]
        super().run()

    def _openmp(self):
        """OpenMP where both the glue's C compiler and the emulator's C++ compiler take
        -fopenmp (gcc, g++; Apple clang does not, and the emulator then runs blocks on one
        thread)."""
        if not hasattr(self, "_openmp_ok"):
            cc = list(getattr(self.compiler, "compiler_so", None) or []) or None   # CC and CFLAGS
            self._openmp_ok = (
                compiler_accepts([os.environ.get("CXX", "g++"), "-x", "c++"], ["-fopenmp"])
                and (cc is None or compiler_accepts(cc, ["-fopenmp"], suffix=".c")))
            if not self._openmp_ok:
                print("tiledmm: the compilers do not accept -fopenmp: building without (the "
                      "emulator runs blocks on one thread)", file=sys.stderr)
        return self._openmp_ok

    def build_extension(self, ext):
        backend = ext.name.rsplit("._", 1)[1]
        if not self._openmp():
            ext.extra_compile_args = [a for a in ext.extra_compile_args if a != "-fopenmp"]
            ext.extra_link_args = [a for a in ext.extra_link_args if a != "-fopenmp"]
        build_temp = os.path.join(self.build_temp, backend)
        os.makedirs(build_temp, exist_ok=True)
        if backend == "cuda":
            compile_one = self._nvcc_command
            sources = KERNEL_SOURCES
            ext.include_dirs.append(os.path.join(self.cuda_home, "include"))
            ext.library_dirs.append(self._cuda_lib_dir())
        elif backend == "emu_profile":
            def compile_one(src, obj):
                if src in split.values():   # a kernel file split at its barriers, with hooks
                    return self._emu_command(src, obj, PROFILE_KERNEL_FLAGS + PROFILE_SPLIT_FLAGS)
                return self._emu_command(src, obj, PROFILE_KERNEL_FLAGS if src in KERNEL_SOURCES else
                                         PROFILE_HOOK_FLAGS if src in PROFILE_SOURCES else [])
            sources = KERNEL_SOURCES + EMU_RUNTIME_SOURCES + PROFILE_SOURCES
        else:
            compile_one = self._emu_command
            sources = KERNEL_SOURCES + EMU_RUNTIME_SOURCES
        # plain emu builds compile the registry kernels split at their barriers where the
        # transform applies; the profile build those of PROFILE_SPLIT_FILES (with hooks), the
        # others on fibers
        if backend == "emu":
            split = split_registry_sources(os.path.join(build_temp, "split"))
        elif backend == "emu_profile" and PROFILE_SPLIT_FILES:
            split = profile_split_sources(os.path.join(build_temp, "split"))
        else:
            split = {}
        jobs = []
        for src in sources:
            # a profile build's split kernels get objects of their own: switching
            # TILEDMM_PROFILE_SPLIT=0 must not link the split objects (they are newer)
            tag = ".split" if backend == "emu_profile" and src in split else ""
            obj = os.path.join(build_temp, os.path.basename(src) + tag + ".o")
            src = split.get(src, src)
            if not (up_to_date(obj, src) and not self.force):
                jobs.append(compile_one(src, obj))
            ext.extra_objects.append(obj)
        workers = max(1, min(len(jobs), os.cpu_count() or 1))
        with ThreadPoolExecutor(workers) as pool:
            for cmd, result in zip(jobs, pool.map(self._run, jobs)):
                if result.returncode != 0:
                    sys.stderr.write(result.stdout + result.stderr)
                    raise RuntimeError(f"tiledmm: compiling failed: {' '.join(cmd)}")
        # setuptools relinks only when a source or a `depends` entry is newer than the module.
        ext.depends = list(ext.extra_objects) + HEADERS
        saved = self.build_temp
        self.build_temp = build_temp  # the glue's objects differ per backend (-DTM_EMU)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = saved

    @staticmethod
    def _run(cmd):
        print(" ".join(cmd))
        return subprocess.run(cmd, capture_output=True, text=True)

    def _cuda_lib_dir(self):
        for sub in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
            path = os.path.join(self.cuda_home, sub)
            if os.path.exists(os.path.join(path, "libcudart_static.a")):
                return path
        return os.path.join(self.cuda_home, "lib64")

    def _nvcc_command(self, src, obj):
        return [os.path.join(self.cuda_home, "bin", "nvcc"), "-std=c++17", "-O3", "-lineinfo",
                "-Xcompiler", "-fPIC", "-Icuda", f"-I{NATIVE}", "-Icsrc", *kernel_nvcc_flags(src), "-c", src,
                "-o", obj]

    # -Icuda: a kernel file split at its barriers compiles from build_temp, and finds the
    # headers beside it in cuda/ (reduce_common.h) through -Icuda
    def _emu_command(self, src, obj, extra=()):
        flags = [f for f in EMU_FLAGS if f != "-fopenmp" or self._openmp()]
        return [os.environ.get("CXX", "g++"), *flags, "-Wall", "-Wno-unknown-pragmas", "-Icsrc",
                "-Icuda", f"-I{NATIVE}", *(extra or emu_asan_flags()), "-c", src, "-o", obj]


GLUE_ARGS = dict(
    sources=GLUE_SOURCES,
    include_dirs=["csrc", NATIVE, numpy.get_include()],
    # OpenMP: the emulator's blocks, and the multi-threaded copies into pinned staging buffers
    extra_compile_args=["-std=c11", "-O2", "-fopenmp"],
    language="c++",  # link with the C++ driver: the kernel objects are C++
)

extensions = [
    Extension("tiledmm._cuda", define_macros=[("TM_MODULE", "_cuda")],
              extra_link_args=["-l:libcudart_static.a", "-ldl", "-lpthread", "-lrt", "-fopenmp"],
              **GLUE_ARGS),
    Extension("tiledmm._emu", define_macros=[("TM_MODULE", "_emu"), ("TM_EMU", "1")],
              extra_link_args=["-fopenmp", *emu_asan_flags()],
              **dict(GLUE_ARGS, extra_compile_args=GLUE_ARGS["extra_compile_args"] + emu_asan_flags())),
    Extension("tiledmm._emu_profile", define_macros=[("TM_MODULE", "_emu_profile"), ("TM_EMU", "1")],
              extra_link_args=["-fopenmp", *(f"-Wl,--wrap={s}" for s in PROFILE_WRAPPED)],
              **GLUE_ARGS),
]

setup(ext_modules=extensions, cmdclass={"build_ext": BuildExt})
