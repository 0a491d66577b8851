"""Compiling a user kernel for the `cuda` backend with NVRTC, loaded through ctypes at first use
(libnvrtc from the CUDA toolkit or the `nvidia-cuda-nvrtc` wheel). With isolation (the default)
this runs in tiledmm's worker process, as does loading the code onto the device.

A compile has a time limit: NVRTC calls a flow callback (nvrtcSetFlowCallback, NVRTC 12.8+)
through its front end and optimizer, and cancels when it answers 1 (measured on NVRTC 13.0: a
constexpr loop of 10^9 steps and a function of 300,000 statements both stopped 2.1 s into a 2 s
limit). Where NVRTC lacks the callback, the caller's timeout on the worker's reply ends it (the
worker is killed; tiledmm/user_kernels/kernel.py gives it the limit and a margin).
"""
import ctypes
import glob
import json
import os
import sys
import sysconfig
import time
from types import SimpleNamespace

from .. import _backend, _toolkit
from .._emu_build import NATIVE
from . import cache
from .compile_emu import COMPILE_CHILD_SECONDS, CompileTimeout
from .diagnostics import SOURCE_NAME, compile_error, parse_warnings
from .source import full_source, split_defines

NVRTC_SECONDS = COMPILE_CHILD_SECONDS   # the default limit: as long as g++'s compile child
_NVRTC_ERROR_CANCELLED = 16
_FLOW_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


_nvrtc = None
# Headers a student's kernel may include that NVRTC lacks: the CUDA runtime's (their contents are
# built into NVRTC or in tiledmm's prelude) and the C headers whose device functions (printf,
# sqrtf, ...) NVRTC has built in.
_STAND_INS = ("cuda_runtime.h", "cuda_runtime_api.h", "device_launch_parameters.h", "stdio.h",
              "cstdio", "math.h", "cmath")


def _nvrtc_candidates():
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    dirs = _toolkit.lib_dirs()
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path}:
        if site and os.path.isdir(os.path.join(site, "nvidia")):
            dirs += glob.glob(os.path.join(site, "nvidia", "cuda_nvrtc", "lib"))
            dirs += glob.glob(os.path.join(site, "nvidia", "cu*", "lib"))
    out = list(names)  # the loader's own path first
    for d in dirs:
        out += sorted(glob.glob(os.path.join(d, "libnvrtc.so*")), reverse=True)
    return out


def toolkit_includes():
    """-I options for the CUDA toolkit's own headers (cooperative_groups.h and the CCCL headers it
    includes), which NVRTC does not search by itself, where the toolkit has them."""
    include = _toolkit.include_dir("cooperative_groups.h")
    if include is None:
        return []
    return [f"-I{d}" for d in (include, os.path.join(include, "cccl")) if os.path.isdir(d)]


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


def compile_cuda(source, name, options, seconds=None):
    """Compile (or find in the disk cache) kernel `name` for this process's device, in at most
    `seconds` (default NVRTC_SECONDS; CompileTimeout past it). Returns an artifact:
    SimpleNamespace(backend='cuda', key, name, image, lowered, log)."""
    mod = _backend.module("cuda")
    lib = _load_nvrtc()
    major, minor = mod.device_properties()["compute_capability"]
    arch = major * 10 + minor
    version = _nvrtc_version(lib)
    headers = prelude_headers()
    defines, options = split_defines(options)
    key = cache.key("cuda", source, name, defines, options, arch, version, headers, _STAND_INS)
    path = cache.entry_path(f"user-{key}.bin")
    image, meta_bytes = cache.read_verified(path), cache.read_verified(path[:-4] + ".json")
    if image is not None and meta_bytes is not None:
        meta = json.loads(meta_bytes)
        origin = "disk_hits"
    else:
        supported = _nvrtc_archs(lib)
        if not supported or arch in supported:
            target, cubin = f"--gpu-architecture=sm_{arch}", True
        else:  # this NVRTC predates the device: PTX for the newest it knows, JIT by the driver
            target, cubin = f"--gpu-architecture=compute_{max(a for a in supported if a <= arch)}", False
        text = full_source(source, "", defines, "cuda")
        image, lowered, log = _nvrtc_compile(lib, text, name, headers,
                                             [target, "-std=c++17", "-lineinfo", *options,
                                              *toolkit_includes()], cubin,
                                             seconds or NVRTC_SECONDS)
        meta = {"lowered": lowered, "log": log}
        cache.store_bytes(image, path)
        cache.store_bytes(json.dumps(meta).encode(), path[:-4] + ".json")
        origin = "compiled"
    return SimpleNamespace(backend="cuda", key=key, name=name, image=image,
                           lowered=meta["lowered"], log=meta["log"],
                           warnings=parse_warnings(meta["log"], "cuda"), origin=origin)


def load_cuda(artifact):
    """Load a compiled kernel onto this process's device: SimpleNamespace(handle, keep)."""
    capsule, handle = _backend.module("cuda").user_load(artifact.image, artifact.lowered)
    return SimpleNamespace(handle=handle, keep=capsule)


def prelude_headers():
    """The headers NVRTC is given by name, as (name, text) pairs: the prelude and the dialect
    macros it includes (tiledmm/native/kernel_dialect.h). NVRTC skips the prelude's emulator
    and check-mode includes (TM_EMU)."""
    headers = []
    for name in ("tiledmm_kernel.h", "kernel_dialect.h", "tm_limits.h"):
        with open(os.path.join(NATIVE, name)) as f:
            headers.append((name, f.read()))
    return tuple(headers)


def _deadline_callback(seconds):
    """A flow callback that cancels the compile once `seconds` have passed (it must keep
    answering 1 once it has: NVRTC's rule)."""
    deadline = time.monotonic() + seconds
    return _FLOW_CALLBACK(lambda payload, reserved: int(time.monotonic() > deadline))


def _nvrtc_compile(lib, text, name, headers, options, cubin, seconds=NVRTC_SECONDS):
    """NVRTC compiles `text` in at most `seconds`; `headers`: (name, text) pairs it may include
    (prelude_headers()), besides the stand-ins for the toolkit's headers."""
    prog = ctypes.c_void_p()

    def check(rc, what):
        if rc:
            raise RuntimeError(f"NVRTC {what} failed: {lib.nvrtcGetErrorString(rc).decode()}")

    stand_in = b'#pragma once\n#include "tiledmm_kernel.h"\n'
    count = len(headers) + len(_STAND_INS)
    hdrs = (ctypes.c_char_p * count)(*[t.encode() for _, t in headers],
                                     *[stand_in] * len(_STAND_INS))
    names = (ctypes.c_char_p * count)(*[n.encode() for n, _ in headers],
                                      *[h.encode() for h in _STAND_INS])
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), SOURCE_NAME.encode(),
                                 len(names), hdrs, names), "nvrtcCreateProgram")
    try:
        check(lib.nvrtcAddNameExpression(prog, name.encode()), "nvrtcAddNameExpression")
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        callback = _deadline_callback(seconds)   # kept alive until NVRTC returns
        if hasattr(lib, "nvrtcSetFlowCallback"):
            check(lib.nvrtcSetFlowCallback(prog, callback, None), "nvrtcSetFlowCallback")
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        if rc == _NVRTC_ERROR_CANCELLED:
            raise CompileTimeout(f"compiling kernel '{name}' with NVRTC took more than "
                                 f"{seconds:g} s and was stopped")
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value + 1)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if rc:
            raise compile_error(name, "cuda, NVRTC", log)
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
