"""Kernels the user writes: compile CUDA C source text at run time and launch it on NumPy arrays
or device arrays, timed like tiledmm's own kernels.

    kernel = tm.compile(r'''
    __global__ void scale(const float *x, float *y, float a, int n)
    {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }''')
    x = np.arange(1000, dtype=np.float32); y = np.empty_like(x)
    res = kernel(grid=(4,), block=(256,), x, y, 2.0, x.size)   # or kernel((4,), (256,), ...)
    res.out is y; res.timing.kernel_ms; res.launch.grid

The source is the dialect of tiledmm's kernels (cuda/common.h): CUDA C++, plus
`TM_DYNAMIC_SHARED(type, name)` for dynamic shared memory (instead of `extern __shared__`) and
`tm_ceil_div`. On `cuda` it is compiled by NVRTC (loaded at first use from the CUDA toolkit or the
`nvidia-cuda-nvrtc` wheel) for the device's architecture; on `emu` by the system C++ compiler
($CXX or g++) against the emulator's headers. Compiled code is cached in memory and on disk
(TILEDMM_CACHE_DIR, default ~/.cache/tiledmm) by source, options, backend and architecture.

Arguments follow the kernel's signature. A pointer parameter takes a NumPy array of the matching
dtype (`const float *` / `float *` → float32, `double *` → float64, `int *` → int32, ...) or a
device array (tm.to_device, CuPy, PyTorch): NumPy arrays are copied to the device before the
launch and, for non-const pointers (the outputs), copied back into the same array afterwards.
A scalar parameter (`int`, `unsigned`, `long long`, `size_t`, `float`, `double`) takes a Python
number. The result is a `Result` like `tm.matmul`'s: `res.out` is the output array (or a tuple of
them when the kernel has several non-const pointers), `res.timing`, `res.launch`.

Errors: `CompileError` (a ValueError) carries the compiler's diagnostics with the line numbers of
the user's source; wrong argument counts or types raise TypeError, bad values ValueError; a launch
that fails (a barrier not all threads reach, check mode's out-of-bounds access, an illegal address
on the GPU) raises `KernelError` (a RuntimeError) with the emulator's or the runtime's report.

Check mode (`check=True`, emulator only): each pointer parameter becomes a bounds-checked pointer;
the first access outside the buffer passed for it is reported with the index, the thread and the
block, and the access itself is not performed (nothing is corrupted). `__shared__` arrays and
scalars of number types, and TM_DYNAMIC_SHARED, become race-checked: in one barrier interval (between
two completed `__syncthreads()` of the block) a read of an element another thread wrote, a write
of an element another thread read, or a write of a different value over another thread's write
is reported with the element, both threads and the block; an index outside a shared array's
extent is reported too. Lanes of one warp are ordered by `__syncwarp()`. Not tracked: atomics on
shared memory and raw pointers made from a shared array (`float *p = s`, `&s[i]`). Barriers that
not all threads of a block reach are reported on the emulator in every mode, with the call sites.
"""
import ctypes
import glob
import hashlib
import json
import math
import os
import re
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from types import SimpleNamespace

import numpy as np

from . import _backend
from ._core import DEFAULT_RUNS, Result
from ._device_array import DeviceArray, as_device_input

__all__ = ["compile", "Kernel", "CompileError", "KernelError", "cache_dir", "clear_cache",
           "cache_info"]

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_NAME = "kernel.cu"       # the file name diagnostics show for the user's source
_LOCK = threading.RLock()
_MEMORY = {}                    # cache key -> loaded code (ctypes library / cuda kernel handle)
_STATS = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}


class CompileError(ValueError):
    """The compiler rejected the kernel source. `.log` holds its diagnostics; line numbers are
    those of the source passed to `tm.compile` (file name 'kernel.cu')."""

    def __init__(self, message, log=""):
        super().__init__(message)
        self.log = log


class KernelError(RuntimeError):
    """A launch of a user kernel failed: the emulator's report (barrier, check mode's
    out-of-bounds access or shared-memory race) or the CUDA runtime's error."""


# ---------------------------------------------------------------------------------------------
# the kernel's signature

_SCALARS = {  # C type -> (struct format, kind)  kind: 'i' integer, 'f' floating
    "int": ("i", "i"), "signed": ("i", "i"), "signed int": ("i", "i"), "int32_t": ("i", "i"),
    "unsigned": ("I", "i"), "unsigned int": ("I", "i"), "uint32_t": ("I", "i"),
    "long": ("q", "i"), "long int": ("q", "i"), "long long": ("q", "i"),
    "long long int": ("q", "i"), "int64_t": ("q", "i"), "ptrdiff_t": ("q", "i"),
    "unsigned long": ("Q", "i"), "unsigned long long": ("Q", "i"), "size_t": ("Q", "i"),
    "uint64_t": ("Q", "i"), "float": ("f", "f"), "double": ("d", "f"),
}
_POINTEES = {  # C type -> NumPy dtype
    "float": np.float32, "double": np.float64, "int": np.int32, "int32_t": np.int32,
    "unsigned": np.uint32, "unsigned int": np.uint32, "uint32_t": np.uint32,
    "long long": np.int64, "int64_t": np.int64, "long": np.int64,
    "unsigned long long": np.uint64, "uint64_t": np.uint64, "size_t": np.uint64,
    "char": np.int8, "signed char": np.int8, "unsigned char": np.uint8, "int8_t": np.int8,
    "uint8_t": np.uint8,
}
_QUALIFIERS = {"__restrict__", "__restrict", "restrict", "volatile"}


class Param:
    """One kernel parameter: `name`, `ctype` (without qualifiers), `pointer`, `const`."""

    def __init__(self, name, ctype, pointer, const, span):
        self.name, self.ctype, self.pointer, self.const, self.span = name, ctype, pointer, const, span
        self.dtype = np.dtype(_POINTEES[ctype]) if pointer else None

    @property
    def is_output(self):
        return self.pointer and not self.const

    def decl(self):
        return f"{'const ' if self.const else ''}{self.ctype}{' *' if self.pointer else ' '}{self.name}"

    def __repr__(self):
        return f"Param({self.decl()!r})"


def _blank(source):
    """The source with comments and string/char literals replaced by spaces (newlines kept), so
    positions found in it are positions in the source."""
    out, i, n = list(source), 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


_GLOBAL_RE = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^()]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^()]*\)\s*)?([A-Za-z_]\w*)\s*\(([^()]*)\)")


def _line_of(source, pos):
    return source.count("\n", 0, pos) + 1


def parse_kernels(source):
    """{name: [Param, ...]} for every `__global__ void name(...)` in the source."""
    blank = _blank(source)
    kernels = {}
    for m in _GLOBAL_RE.finditer(blank):
        name, params_text, start = m.group(1), m.group(2), m.start(2)
        params = []
        if params_text.strip() not in ("", "void"):
            pos = start
            for piece in params_text.split(","):
                params.append(_parse_param(piece, pos, source, name))
                pos += len(piece) + 1
        kernels[name] = params
    return kernels


def _parse_param(text, pos, source, kernel):
    line = _line_of(source, pos)
    where = f"{SOURCE_NAME}:{line}: kernel '{kernel}', parameter '{' '.join(text.split())}'"
    if "=" in text or "[" in text or "&" in text or "<" in text:
        raise CompileError(f"{where}: tiledmm launches kernels whose parameters are pointers or "
                           "scalars (no defaults, arrays, references or templates)")
    stars = text.count("*")
    before, _, after = text.partition("*")
    words = [w for w in re.findall(r"[A-Za-z_]\w*", text.replace("*", " ")) if w not in _QUALIFIERS]
    if stars > 1 or len(words) < 2:
        raise CompileError(f"{where}: not a pointer to a number or a number "
                           "(supported: float*, double*, int*, ... and int, float, ...)")
    name = words[-1]
    type_words = [w for w in words[:-1] if w != "const"]
    ctype = " ".join(type_words)
    const = "const" in re.findall(r"\w+", before) if stars else False
    table = _POINTEES if stars else _SCALARS
    if ctype not in table:
        raise CompileError(f"{where}: type '{ctype}{' *' if stars else ''}' is not supported; use "
                           f"one of: {', '.join(sorted(t + (' *' if stars else '') for t in table))}")
    return Param(name, ctype, bool(stars), const, (pos, pos + len(text)))


# ---------------------------------------------------------------------------------------------
# the cache

def cache_dir():
    """Where compiled kernels are kept: $TILEDMM_CACHE_DIR, else ~/.cache/tiledmm (or
    $XDG_CACHE_HOME/tiledmm)."""
    path = os.environ.get("TILEDMM_CACHE_DIR")
    if not path:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "tiledmm")
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise OSError(path)
    except OSError:   # no writable home: a per-user folder in the temporary directory
        path = os.path.join(tempfile.gettempdir(), f"tiledmm-cache-{os.getuid()}")
        os.makedirs(path, exist_ok=True)
    return path


def cache_info():
    """Counts since import: kernels compiled, loaded from the disk cache, found in memory."""
    return dict(_STATS)


def clear_cache(disk=False):
    """Forget compiled kernels kept in memory (and on disk with disk=True)."""
    with _LOCK:
        _MEMORY.clear()
        if disk:
            for path in glob.glob(os.path.join(cache_dir(), "user-*")):
                try:
                    os.remove(path)
                except OSError:
                    pass


def _hash(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def _atomic_write(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# emu: the system C++ compiler

def _emu_headers():
    """(include dirs, emulator runtime sources): the package's copy when installed
    (tiledmm/include), else the source tree's csrc/ and cuda/."""
    inc = os.path.join(HERE, "include")
    installed_rt = sorted(glob.glob(os.path.join(inc, "emu", "*.cpp")))
    if os.path.exists(os.path.join(inc, "common.h")) and installed_rt:
        return [inc], installed_rt
    repo = os.path.dirname(HERE)
    csrc, cuda = os.path.join(repo, "csrc"), os.path.join(repo, "cuda")
    rt = sorted(glob.glob(os.path.join(csrc, "emu", "*.cpp")))
    if not rt or not os.path.exists(os.path.join(cuda, "common.h")):
        raise RuntimeError("tiledmm's emulator headers are not installed (tiledmm/include); "
                           "reinstall tiledmm")
    return [inc, csrc, cuda], rt


def _cxx():
    return os.environ.get("CXX", "g++")


_EMU_FLAGS = ["-x", "c++", "-std=c++17", "-O2", "-fPIC", "-fopenmp", "-DTM_EMU"]


def _run_compiler(cmd, what):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise RuntimeError(f"{what}: the C++ compiler '{cmd[0]}' was not found; install g++ or "
                           "set CXX") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what}: the compiler ran for more than 300 s") from None
    return proc


def _emu_runtime_objects(includes, sources):
    """The emulator runtime (scheduler + runtime API) compiled once per cache dir and tiledmm
    version, linked into every user kernel's shared object (each gets its own copy: the
    emulator's thread-local state is private to a shared object)."""
    stamps = [(os.path.basename(p), open(p, "rb").read()) for p in sources]
    headers = sorted(glob.glob(os.path.join(includes[-1] if len(includes) > 1 else includes[0],
                                            "**", "*.h"), recursive=True))
    key = _hash("emu-runtime", stamps, [(h, os.path.getmtime(h)) for h in headers], _cxx())
    objs = [os.path.join(cache_dir(), f"user-rt-{key}-{os.path.basename(p)}.o") for p in sources]
    with _LOCK:
        for src, obj in zip(sources, objs):
            if os.path.exists(obj):
                continue
            tmp = obj + f".{os.getpid()}.tmp"
            cmd = [_cxx(), *_EMU_FLAGS, *[f"-I{d}" for d in includes], "-c", src, "-o", tmp]
            proc = _run_compiler(cmd, "building the emulator runtime for user kernels")
            if proc.returncode != 0:
                raise RuntimeError("building the emulator runtime for user kernels failed:\n"
                                   + proc.stderr[-4000:])
            os.replace(tmp, obj)
    return objs


def _emu_launcher(name, params, check):
    """C++ appended to the user's source: an extern "C" function that unpacks the arguments
    user_kernels.c passes and launches the kernel on the emulator."""
    args = []
    for i, p in enumerate(params):
        t = f"{'const ' if p.const else ''}{p.ctype}"
        if p.pointer and check:
            args.append(f"tm_checked_ptr<{t}>(*({t} **)tm_args_[{i}], "
                        f"(long long)(tm_sizes_[{i}] / sizeof({t})), \"{p.name}\")")
        elif p.pointer:
            args.append(f"*({t} **)tm_args_[{i}]")
        else:
            args.append(f"*({t} *)tm_args_[{i}]")
    unused = "(void)tm_args_; (void)tm_sizes_;"
    chk = "\n    tm_check_dyn_bytes = tm_shared_;" if check else ""
    return f"""
#line 1 "tiledmm-launcher"
extern "C" __attribute__((visibility("default"))) int tm_user_launch(
    const unsigned *tm_g_, const unsigned *tm_b_, size_t tm_shared_, void **tm_args_,
    const size_t *tm_sizes_, int tm_threads_, int tm_strict_, char *tm_detail_, size_t tm_detail_size_)
{{
    {unused}
    if (tm_threads_ > 0) tm_emu_set_threads(tm_threads_);
    tm_emu_set_strict_exit(tm_strict_);{chk}
    if (tm_shared_ > 48 * 1024)
        cudaFuncSetAttribute({name}, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tm_shared_);
    cudaError_t tm_err_ = tm_emu_launch({name}, dim3(tm_g_[0], tm_g_[1], tm_g_[2]), dim3(tm_b_[0], tm_b_[1], tm_b_[2]), tm_shared_{''.join(', ' + a for a in args)});
    return tm_user_finish(tm_err_, tm_detail_, tm_detail_size_);
}}
"""


def _checked_source(source, params):
    """The source with the kernel's pointer parameters declared as tm_checked_ptr<T> (same
    lines, so diagnostics keep the user's line numbers)."""
    out = source
    for p in sorted(params, key=lambda p: -p.span[0]):
        if p.pointer:
            t = f"{'const ' if p.const else ''}{p.ctype}"
            out = out[:p.span[0]] + f" tm_checked_ptr<{t}> {p.name}" + out[p.span[1]:]
    return out


_NUMBER_WORDS = ("unsigned", "signed", "short", "long", "int", "char", "float", "double", "bool",
                 "size_t", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t",
                 "int64_t", "uint64_t")
_SHARED_RE = re.compile(
    r"(?<![\w])__shared__(?P<quals>(?:\s+(?:__align__\s*\(\s*\w+\s*\)|volatile))*)\s+"
    r"(?P<type>(?:(?:" + "|".join(_NUMBER_WORDS) + r")\b\s*)+)(?P<decls>[^;{}]*);")
_DECLARATOR_RE = re.compile(r"\s*([A-Za-z_]\w*)\s*((?:\[[^\[\]]+\]\s*)*)")


def _split_top(text):
    """text split at the commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _checked_shared(source):
    """Check mode: `__shared__ T name[D1][D2]...;` (T a number type; several declarators too)
    becomes a race-checked tm_sh_array (tiledmm_kernel.h), `__shared__ T name;` a tm_sh_scalar,
    on the same lines. Other shared declarations (extern, struct types, initialisers) stay as
    they are."""
    blank = _blank(source)
    edits = []
    for m in _SHARED_RE.finditer(blank):
        if re.search(r"\bextern\s*$", blank[:m.start()]):
            continue
        ctype = " ".join(m.group("type").split())
        quals = " ".join(q for q in m.group("quals").split() if q != "volatile")
        pieces = []
        for decl in _split_top(m.group("decls")):
            d = _DECLARATOR_RE.fullmatch(decl)
            if not d:
                pieces = None
                break
            name, dims = d.group(1), re.findall(r"\[([^\[\]]+)\]", d.group(2))
            tag = f"tm_shn_{name}"
            if dims:
                kind = f"tm_sh_array<{ctype}, {tag}, " + ", ".join(
                    f"(long long)({' '.join(x.split())})" for x in dims) + ">"
            else:
                kind = f"tm_sh_scalar<{ctype}, {tag}>"
            pieces.append(f"struct {tag} {{ static constexpr const char *name() {{ return "
                          f"\"{name}\"; }} }}; __shared__ {quals + ' ' if quals else ''}"
                          f"{kind} {name};")
        if not pieces:
            continue
        text = " ".join(pieces) + "\n" * source.count("\n", m.start(), m.end())
        edits.append((m.start(), m.end(), text))
    out = source
    for start, end, text in reversed(edits):
        out = out[:start] + text + out[end:]
    return out


def _full_source(source, extra=""):
    return f'#include "tiledmm_kernel.h"\n#line 1 "{SOURCE_NAME}"\n{source}\n{extra}'


def _compile_emu(source, name, params, options, check):
    includes, rt_sources = _emu_headers()
    user_src = _checked_shared(_checked_source(source, params)) if check else source
    key = _hash("emu", user_src, name, options, check, _cxx(), open(
        os.path.join(HERE, "include", "tiledmm_kernel.h")).read(), [
        os.path.getmtime(p) for p in rt_sources])
    with _LOCK:
        if key in _MEMORY:
            _STATS["memory_hits"] += 1
            return _MEMORY[key]
    so = os.path.join(cache_dir(), f"user-{key}.so")
    if os.path.exists(so):
        _STATS["disk_hits"] += 1
    else:
        rt_objs = _emu_runtime_objects(includes, rt_sources)
        text = _full_source(user_src, _emu_launcher(name, params, check))
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".build-") as tmp:
            src_path = os.path.join(tmp, "kernel.cpp")
            with open(src_path, "w") as f:
                f.write(text)
            out = os.path.join(tmp, "kernel.so")
            cmd = [_cxx(), *_EMU_FLAGS, *(["-DTM_CHECK"] if check else []),
                   *[f"-I{d}" for d in includes], *options, "-shared", "-o", out, src_path,
                   "-x", "none", *rt_objs, "-Wl,-Bsymbolic"]
            proc = _run_compiler(cmd, f"compiling kernel '{name}'")
            if proc.returncode != 0:
                raise _compile_error(name, "emu", proc.stderr.replace(src_path, "kernel.cpp"))
            os.replace(out, so)
        _STATS["compiled"] += 1
    lib = ctypes.CDLL(so)
    handle = ctypes.cast(lib.tm_user_launch, ctypes.c_void_p).value
    loaded = SimpleNamespace(handle=handle, keep=lib, key=key)
    with _LOCK:
        _MEMORY[key] = loaded
    return loaded


def _compile_error(name, backend, log):
    log = log.strip()
    lines = log.splitlines()
    errors = [ln for ln in lines if "error" in ln]
    head = errors[0] if errors else (lines[0] if lines else "no diagnostics")
    return CompileError(f"kernel '{name}' does not compile ({backend}): {head}\n\n{log}", log)


# ---------------------------------------------------------------------------------------------
# cuda: NVRTC through ctypes, loaded at first use

_nvrtc = None


def _nvrtc_candidates():
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(os.path.join(os.environ[var], "lib64"))
    dirs.append("/usr/local/cuda/lib64")
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path}:
        if site and os.path.isdir(os.path.join(site, "nvidia")):
            dirs += glob.glob(os.path.join(site, "nvidia", "cuda_nvrtc", "lib"))
            dirs += glob.glob(os.path.join(site, "nvidia", "cu*", "lib"))
    out = list(names)  # the loader's own path first
    for d in dirs:
        out += sorted(glob.glob(os.path.join(d, "libnvrtc.so*")), reverse=True)
    return out


def _load_nvrtc():
    global _nvrtc
    if _nvrtc is not None:
        return _nvrtc
    tried = []
    for cand in _nvrtc_candidates():
        if "builtins" in os.path.basename(cand) or "alt" in os.path.basename(cand):
            continue
        try:
            lib = ctypes.CDLL(cand)
            lib.nvrtcVersion
        except (OSError, AttributeError) as exc:
            tried.append(f"{cand} ({exc})")
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        _nvrtc = lib
        return lib
    raise RuntimeError("NVRTC (libnvrtc.so) was not found: install the CUDA toolkit (set "
                       "CUDA_HOME) or `pip install nvidia-cuda-nvrtc-cu12`, or use "
                       "backend='emu'. Tried: " + "; ".join(tried[:6]))


def _nvrtc_version(lib):
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def _nvrtc_archs(lib):
    n = ctypes.c_int()
    if not hasattr(lib, "nvrtcGetNumSupportedArchs") or lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)):
        return []
    arr = (ctypes.c_int * n.value)()
    lib.nvrtcGetSupportedArchs(arr)
    return list(arr)


def _compile_cuda(source, name, options):
    mod = _backend.module("cuda")
    lib = _load_nvrtc()
    major, minor = mod.device_properties()["compute_capability"]
    arch = major * 10 + minor
    version = _nvrtc_version(lib)
    header = open(os.path.join(HERE, "include", "tiledmm_kernel.h")).read()
    key = _hash("cuda", source, name, options, arch, version, header)
    with _LOCK:
        if key in _MEMORY:
            _STATS["memory_hits"] += 1
            return _MEMORY[key]
    path = os.path.join(cache_dir(), f"user-{key}.bin")
    meta_path = path[:-4] + ".json"
    if os.path.exists(path) and os.path.exists(meta_path):
        with open(path, "rb") as f:
            image = f.read()
        with open(meta_path) as f:
            meta = json.load(f)
        _STATS["disk_hits"] += 1
    else:
        supported = _nvrtc_archs(lib)
        if not supported or arch in supported:
            target, cubin = f"--gpu-architecture=sm_{arch}", True
        else:  # this NVRTC predates the device: PTX for the newest it knows, JIT by the driver
            target, cubin = f"--gpu-architecture=compute_{max(a for a in supported if a <= arch)}", False
        image, lowered, log = _nvrtc_compile(lib, _full_source(source), name, header,
                                             [target, "-std=c++17", "-lineinfo", *options], cubin)
        meta = {"lowered": lowered, "log": log}
        _atomic_write(path, image)
        _atomic_write(meta_path, json.dumps(meta).encode())
        _STATS["compiled"] += 1
    capsule, handle = mod.user_load(image, meta["lowered"])
    loaded = SimpleNamespace(handle=handle, keep=capsule, key=key)
    with _LOCK:
        _MEMORY[key] = loaded
    return loaded


def _nvrtc_compile(lib, text, name, header, options, cubin):
    prog = ctypes.c_void_p()

    def check(rc, what):
        if rc:
            raise RuntimeError(f"NVRTC {what} failed: {lib.nvrtcGetErrorString(rc).decode()}")

    hdrs = (ctypes.c_char_p * 1)(header.encode())
    names = (ctypes.c_char_p * 1)(b"tiledmm_kernel.h")
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), SOURCE_NAME.encode(), 1,
                                 hdrs, names), "nvrtcCreateProgram")
    try:
        check(lib.nvrtcAddNameExpression(prog, name.encode()), "nvrtcAddNameExpression")
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value + 1)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if rc:
            raise _compile_error(name, "cuda, NVRTC", log)
        get_size, get = ((lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if cubin
                         else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX))
        check(get_size(prog, ctypes.byref(size)), "getting the compiled code's size")
        image = ctypes.create_string_buffer(size.value)
        check(get(prog, image), "getting the compiled code")
        lowered = ctypes.c_char_p()
        check(lib.nvrtcGetLoweredName(prog, name.encode(), ctypes.byref(lowered)),
              "nvrtcGetLoweredName")
        return image.raw, lowered.value.decode(), log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


# ---------------------------------------------------------------------------------------------
# the kernel object

def _dim3(value, what):
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(value)
    except TypeError:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and
                                          not isinstance(d, bool) for d in dims):
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    if any(d < 0 for d in dims):
        raise ValueError(f"{what} must not be negative, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


_INT_RANGES = {"i": (-2**31, 2**31 - 1), "I": (0, 2**32 - 1), "q": (-2**63, 2**63 - 1),
               "Q": (0, 2**64 - 1)}


class KernelResult(Result):
    """The Result of a user kernel's launch: `out` is the output array (non-const pointer
    argument), a tuple of them, or None; `timing` and `launch` as for tiledmm's kernels."""

    def __repr__(self):
        outs = self.out if isinstance(self.out, tuple) else (self.out,)
        shapes = ", ".join(f"{o.dtype}[{'x'.join(map(str, o.shape)) or 'scalar'}]"
                           for o in outs if o is not None) or "no outputs"
        rate = f", {self.gflops:.4g} GFLOP/s" if self.flops else ""
        return (f"<Result {self.kernel} (user kernel) on {self.backend}: {shapes}, "
                f"kernel {self.timing.kernel_ms:.4g} ms{rate}, grid {self.launch.grid}, "
                f"block {self.launch.block}, {self.timing.clock}>")


class Kernel:
    """A compiled user kernel. Call it as `kernel(grid, block, *args, shared_bytes=0, ...)`."""

    def __init__(self, source, name=None, options=(), defines=None, backend=None, check=False):
        if not isinstance(source, str):
            raise TypeError(f"source must be a string of CUDA C, got {type(source).__name__}")
        if isinstance(options, str):
            options = (options,)
        options = [str(o) for o in options]
        for k, v in (defines or {}).items():
            options.append(f"-D{k}" if v is None else f"-D{k}={v}")
        kernels = parse_kernels(source)
        if not kernels:
            raise CompileError("no `__global__ void name(...)` kernel found in the source")
        if name is None:
            if len(kernels) > 1:
                raise ValueError(f"the source defines {len(kernels)} kernels "
                                 f"({', '.join(kernels)}): choose one with name=")
            name = next(iter(kernels))
        elif name not in kernels:
            raise ValueError(f"no kernel named {name!r} in the source; found {', '.join(kernels)}")
        self.source, self.name, self.options = source, name, tuple(options)
        self.params = tuple(kernels[name])
        self.check = bool(check)
        self._backend = backend
        self._loaded = {}
        self._compiled(_backend.resolve(backend)[1], self.check)   # errors now, not at launch

    @property
    def signature(self):
        """The kernel's C signature as parsed: name(type param, ...)."""
        return f"{self.name}({', '.join(p.decl() for p in self.params)})"

    def __repr__(self):
        return f"<tiledmm Kernel {self.signature}>"

    def _compiled(self, backend, check):
        key = (backend, check)
        if key not in self._loaded:
            if backend == "cuda":
                if check:
                    raise ValueError("check mode runs on the emulator: call with backend='emu' "
                                     "(on the GPU, use compute-sanitizer)")
                self._loaded[key] = _compile_cuda(self.source, self.name, list(self.options))
            else:
                self._loaded[key] = _compile_emu(self.source, self.name, self.params,
                                                 list(self.options), check)
        return self._loaded[key]

    def _arguments(self, args, backend):
        if len(args) != len(self.params):
            raise TypeError(f"kernel {self.signature} takes {len(self.params)} arguments after "
                            f"grid and block, got {len(args)}")
        packed, outputs, write_back, keep, nbytes = [], [], [], [], 0
        for p, value in zip(self.params, args):
            what = f"argument '{p.name}' ({p.decl().rsplit(' ', 1)[0].strip()})"
            if p.pointer:
                dev = as_device_input(value, backend) if not isinstance(value, np.ndarray) else None
                if dev is not None:
                    if np.dtype(dev.placeholder.dtype) != p.dtype:
                        raise TypeError(f"{what} needs {p.dtype} data, got a device array of "
                                        f"{dev.placeholder.dtype}")
                    size = dev.placeholder.size * p.dtype.itemsize
                    packed.append(("p", None, dev.address, size, False))
                    keep.append(dev)
                    if p.is_output:
                        outputs.append(value)
                    nbytes += size
                    continue
                if not isinstance(value, np.ndarray):
                    raise TypeError(f"{what} needs a NumPy array of {p.dtype} or a device array, "
                                    f"got {type(value).__name__}")
                if value.dtype != p.dtype:
                    raise TypeError(f"{what} needs a {p.dtype} array, got {value.dtype} "
                                    f"(convert with .astype(np.{p.dtype}))")
                if p.is_output and not value.flags.writeable:
                    raise ValueError(f"{what} is an output (non-const pointer): the array must "
                                     "be writeable")
                host = np.ascontiguousarray(value)
                if p.is_output:
                    outputs.append(value)
                    if host is not value and not np.shares_memory(host, value):
                        write_back.append((value, host))
                packed.append(("p", host, 0, host.nbytes, p.is_output))
                keep.append(host)
                nbytes += host.nbytes
            else:
                fmt, kind = _SCALARS[p.ctype]
                if isinstance(value, (np.ndarray, list, tuple)) or not isinstance(
                        value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
                    raise TypeError(f"{what} needs a number, got {type(value).__name__}")
                if kind == "i":
                    if isinstance(value, (float, np.floating)):
                        if not float(value).is_integer():
                            raise TypeError(f"{what} needs an integer, got {value!r}")
                    value = int(value)
                    lo, hi = _INT_RANGES[fmt]
                    if not lo <= value <= hi:
                        raise ValueError(f"{what}: {value} is out of range [{lo}, {hi}]")
                else:
                    value = float(value)
                packed.append(("s", struct.pack("=" + fmt, value)))
        return tuple(packed), outputs, write_back, keep, nbytes

    def __call__(self, grid, block, *args, shared_bytes=0, backend=None, warmup=None,
                 repeat=None, check=None, flops=None):
        """Launch on `grid` blocks of `block` threads (ints or tuples of up to 3) with
        `shared_bytes` of dynamic shared memory. Returns a Result (`res.out`, `res.timing`,
        `res.launch`). `flops`: operations per launch, for `res.gflops`. `check=True` (emu):
        bounds-checked pointer parameters and race-checked shared memory. A grid with a zero
        dimension launches nothing."""
        mod, name = _backend.resolve(backend or self._backend)
        check = self.check if check is None else bool(check)
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        if isinstance(shared_bytes, bool) or not isinstance(shared_bytes, (int, np.integer)) \
                or shared_bytes < 0:
            raise ValueError(f"shared_bytes must be an integer >= 0, got {shared_bytes!r}")
        default_warmup, default_repeat = DEFAULT_RUNS[name]
        warmup = default_warmup if warmup is None else warmup
        repeat = default_repeat if repeat is None else repeat
        for label, value, least in (("warmup", warmup, 0), ("repeat", repeat, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"{label} must be an integer >= {least}, got {value!r}")
        packed, outputs, write_back, keep, nbytes = self._arguments(args, name)
        loaded = self._compiled(name, check)
        if 0 in grid:
            raw = {"samples_ms": [], "h2d_ms": 0.0, "d2h_ms": 0.0, "h2d_bytes": 0, "d2h_bytes": 0,
                   "grid": grid, "block": block, "shared_bytes": int(shared_bytes),
                   "static_shared_bytes": 0, "registers": 0, "launches": 0, "blocks_per_sm": 0,
                   "occupancy": 0.0, "model_bytes": 0.0}
        else:
            try:
                raw = mod.user_run(loaded.handle, grid, block, int(shared_bytes), packed,
                                   int(warmup), int(repeat))
            except RuntimeError as exc:
                raise KernelError(f"kernel '{self.name}' on {name}: {exc}") from None
        del keep
        for original, copy in write_back:
            original[...] = copy
        raw["out"] = None if not outputs else outputs[0] if len(outputs) == 1 else tuple(outputs)
        spec = SimpleNamespace(name=self.name, family="user", params=())
        res = KernelResult(raw, spec, (), name, float(flops) if flops else 0.0, nbytes, warmup)
        res.params = {p.name: v for p, v in zip(self.params, args) if not p.pointer}
        return res

    def launch(self, grid, block, *args, **kwargs):
        """The same as calling the kernel."""
        return self(grid, block, *args, **kwargs)


def compile(source, name=None, options=(), *, defines=None, backend=None, check=False):
    """Compile CUDA C `source` (tiledmm's kernel dialect) and return a `Kernel`.

    name: the `__global__` function to launch (needed when the source defines several).
    options: compiler options, e.g. ["-DTILE=16"] (passed to NVRTC on cuda, g++ on emu);
    defines: {"TILE": 16} is the same as options=["-DTILE=16"].
    backend: compile for this backend now ('cuda' or 'emu'; a call may still pick the other).
    check: launch in check mode by default (emu: bounds-checked pointer parameters and
    race-checked shared memory).
    Raises CompileError (a ValueError) with the compiler's diagnostics, line numbers as in
    `source`. Compiled code is cached (memory and disk), so compiling again costs nothing."""
    return Kernel(source, name, options, defines, backend, check)
