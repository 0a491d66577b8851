"""Compiling a user kernel for the `emu` backend: the system C++ compiler ($CXX or g++) builds
the user's source, tiledmm's prelude and a generated launcher into a shared object, linked with
its own copy of the emulator's runtime. The user's source is parsed (libclang) and compiled
(g++) only in a confined compile child (this module's main(), started by tiledmm/confine/sandbox.py:
Landlock lets it read the toolchain and tiledmm's headers and write one scratch folder; seccomp
lets it start the compiler's passes but reach no network and trace nothing), with time and
memory limits. The caller checks the child's reply against a fixed schema (compile_reply),
reads the shared object it left (a plain file, bounded), and alone writes the disk cache. The
shared object is loaded only where the kernel runs (tiledmm's worker process, or the caller's
process with isolate=False), never by the compile itself.
"""
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from types import SimpleNamespace

from .. import _settings
from .._emu_build import (COMPILER_RUN_SECONDS, EMU_DIR, EMU_FLAGS, NATIVE, PROFILE_HOOK_FLAGS,
                          PROFILE_KERNEL_FLAGS, PROFILE_WRAPPED, build_flags, link_flags,
                          profile_split_flags)
from . import cache
from . import split as split_files
from ..confine import sandbox
from .split.transform import split_kernel
from .check_rewrite import checked_shared, checked_source, checked_type
from ..errors import CompileError
from .diagnostics import SOURCE_NAME, compile_error, parse_warnings
from .source import (ELEMENTS, SCALARS, VECTORS, Param, emu_dialect, full_source,
                            kernel_signature, split_defines)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tiledmm/
# tm.compile's whole confined compile child (parse, compile, link) where the caller gives none;
# the grader passes its own (grading/compile_limits.py). One run of the compiler inside it is
# bounded by _emu_build.COMPILER_RUN_SECONDS.
COMPILE_CHILD_SECONDS = 300
_LOCK = threading.Lock()


def kernel_build_flags():
    """The emulator's flags for this compiler (tiledmm/_emu_build.py; the cache keys keep
    EMU_FLAGS itself)."""
    return build_flags(cxx_compiler())


def kernel_link_flags():
    return link_flags(cxx_compiler())


# User kernels only: g++ -Wall's warnings about the user's source become tm.CompileWarning;
# tiledmm's headers are system headers (-isystem), so its prelude adds none. native/user holds
# the stand-ins for the CUDA toolkit's headers (cuda_runtime.h, ...). No -Wsign-compare:
# threadIdx and blockDim are unsigned, so `threadIdx.x < n` would warn in nearly every kernel,
# and nvcc does not warn there.
USER_FLAGS = ["-Wall", "-Wno-unknown-pragmas", "-Wno-sign-compare"]
_DIALECT = 6   # bumped when the text tiledmm makes of a user's source changes (cache key)
# The barrier-splitting transform makes text too: its own source (every file of it, the list
# setup.py reads too) is part of the cache key.
_SPLIT_HASH = hashlib.sha256()
for _file in split_files.FILES:
    with open(os.path.join(HERE, *_file.split("/")), "rb") as _f:
        _SPLIT_HASH.update(_f.read())
SPLIT_SOURCE = _SPLIT_HASH.hexdigest()


def emu_headers():
    """(include dirs, emulator runtime sources): tiledmm/native (its emu/ below it), the same in
    a checkout and an installed copy."""
    rt = sorted(glob.glob(os.path.join(EMU_DIR, "*.cpp")))
    if not rt or not os.path.exists(os.path.join(EMU_DIR, "cuda_emu.h")):
        raise RuntimeError(f"tiledmm's emulator headers are missing ({EMU_DIR}): reinstall tiledmm")
    return [NATIVE], rt


def cxx_compiler():
    return os.environ.get("CXX", "g++")


def _run_compiler(cmd, what, scratch=None):
    """The compiler on `cmd`: confined in `scratch` when given (tiledmm's own runtime, built by
    the caller), else as a plain child (inside the compile child, which is confined already)."""
    if scratch is not None:
        done = sandbox.run(cmd, sandbox.compile_policy(scratch), cwd=scratch,
                            timeout=COMPILER_RUN_SECONDS)
        if done.timed_out:
            raise RuntimeError(f"{what}: the compiler ran for more than {COMPILER_RUN_SECONDS} s")
        return SimpleNamespace(returncode=done.returncode,
                               stderr=(done.stderr or b"").decode(errors="replace"))
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}   # as sandbox.run
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILER_RUN_SECONDS,
                              env=env)
    except FileNotFoundError:
        raise RuntimeError(f"{what}: the C++ compiler '{cmd[0]}' was not found; install it "
                           "(Debian/Ubuntu: apt-get install g++; Fedora: dnf install gcc-c++) "
                           "or set CXX") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what}: the compiler ran for more than {COMPILER_RUN_SECONDS} s") from None
    return proc


def runtime_key(includes, sources):
    """What the emulator runtime is built from: its sources, every header it may include
    (the emulator's fiber switches and host-memory helper too), the compiler and the flags."""
    stamps = [(os.path.basename(p), open(p, "rb").read()) for p in sources]
    return cache.key("emu-runtime", stamps, header_stamps(includes), cxx_compiler(), EMU_FLAGS)


def header_stamps(includes):
    """[(path, modification time)] of every header below the folders `includes`."""
    headers = sorted(h for d in includes for h in glob.glob(os.path.join(d, "**", "*.h"),
                                                            recursive=True))
    return [(h, os.path.getmtime(h)) for h in headers]


def runtime_objects(includes, sources, build_dir, key):
    """The emulator runtime (scheduler + runtime API), linked into every user kernel's shared
    object (each gets its own copy: the emulator's thread-local state is private to a shared
    object). Compiled once per cache folder and runtime key and kept in the cache; returned
    as copies in `build_dir`, so that clearing the cache meanwhile cannot take them away."""
    local = []
    for src in sources:
        name = f"user-rt-{key}-{os.path.basename(src)}.o"
        path = os.path.join(build_dir, name)

        def compile_runtime(path, src=src):
            cmd = [cxx_compiler(), *kernel_build_flags(), *[f"-I{d}" for d in includes], "-c", src, "-o", path]
            proc = _run_compiler(cmd, "building the emulator runtime for user kernels", build_dir)
            if proc.returncode != 0:
                raise RuntimeError("building the emulator runtime for user kernels failed:\n"
                                   + proc.stderr[-4000:])
            return True
        cached_copy(name, path, compile_runtime)
        local.append(path)
    return local


def cached_copy(name, path, build):
    """Cache entry `name` copied to `path` (a build's scratch, which its confined child may read,
    and which clearing the cache meanwhile cannot take away); where the cache holds none, or a
    damaged one, build(path) writes the file and it is stored. False where build returns False
    (nothing stored: the caller goes without)."""
    entry = cache.entry_path(name)
    with _LOCK:
        data = cache.read_verified(entry)
    if data is None:
        if not build(path):
            return False
        with open(path, "rb") as f:
            cache.store_bytes(f.read(), entry)
    else:
        with open(path, "wb") as f:
            f.write(data)
    return True


# A whole program's first file starts with its prelude (programs/build.py): tiledmm's kernel
# header and the program runtime, 2,000 lines of it and the C++ library's headers that g++
# reads for every program (about 40% of a small program's compile). prelude_pch precompiles it.
PROGRAM_PRELUDE_HEADER = "tm_program_prelude.h"
PROGRAM_PRELUDE = '#include "tiledmm_kernel.h"\n#include "emu/program_runtime.h"\n'


def prelude_pch(compile_cmd, build_dir, runtime):
    """A folder in build_dir holding the program prelude (PROGRAM_PRELUDE_HEADER) and, beside
    it, the prelude precompiled by g++ with the program's compile command (`compile_cmd`,
    without its files): g++ reads the .gch in the header's place where every option it
    checks matches, else the header (never a different build). Compiled once per cache folder,
    runtime key and command, kept in the cache like runtime_objects; copies in build_dir."""
    folder = os.path.join(build_dir, "tm-prelude")
    os.makedirs(folder, exist_ok=True)
    header = os.path.join(folder, PROGRAM_PRELUDE_HEADER)
    with open(header, "w") as f:
        f.write(PROGRAM_PRELUDE)
    flags = [a for a in compile_cmd[1:] if a not in ("-shared", "-c")]
    name = f"user-prelude-{cache.key('emu-prelude', runtime, compile_cmd, PROGRAM_PRELUDE)}.gch"

    def precompile(gch):   # failing, the programs build without it (and say why if they fail)
        cmd = [compile_cmd[0], *flags, "-c", "-x", "c++-header", header, "-o", gch]
        return _run_compiler(cmd, "precompiling the program prelude", build_dir).returncode == 0
    cached_copy(name, header + ".gch", precompile)
    return folder


def _launcher(name, params, check, paired=False):
    """C++ appended to the user's source: an extern "C" function that unpacks the arguments
    csrc/user_kernels.c passes, notes them for the fault report (tiledmm_fault.h) and launches
    the kernel on the emulator; `paired`: with its split tm_split_<name>, which the source holds
    (emu/cuda_emu.h's tm_emu_launch_pair decides the path)."""
    args, notes, bufs = [], [], []
    for i, p in enumerate(params):
        t = f"{'const ' if p.const else ''}{p.ctype}"
        if p.takes_array:   # a rows parameter's buffer is its table of row pointers
            elem, shown = {"vector": (p.vector, p.vector), "rows": ("void *", f"{p.ctype} *")}.get(
                p.kind, (p.ctype, p.ctype))
            notes.append(f"tm_fault_note_arg({i}, \"{p.name}\", \"{shown}\", *(void **)tm_args_[{i}], "
                         f"tm_sizes_[{i}], sizeof({elem}));")
        if p.takes_array and check:   # the buffer's report names and record, for this launch
            record = 'false' if p.const else 'true'
            if p.kind == "vector":   # tm_checked_ptr<float4>: indices checked, accesses not recorded
                t = f"{'const ' if p.const else ''}{p.vector}"
                record = "false"
            shown, ct = p.type_text(), checked_type(p)
            if p.kind == "rows":   # the table's rows and the rows' length (tm_check_rows_shape)
                bufs.append(f"long long tm_rd{i}_[2]; const long long tm_rn{i}_ = tm_check_rows_shape("
                            f"*({t} ***)tm_args_[{i}], tm_sizes_[{i}], tm_rd{i}_);")
                bufs.append(f"tm_check_buf tm_cb{i}_(\"{p.name}\", \"{shown}\", tm_rn{i}_, sizeof({t}), "
                            f"{record}, 2, tm_rd{i}_);")
                args.append(f"{ct}(*({t} ***)tm_args_[{i}], &tm_cb{i}_)")
                continue
            dims = ""
            if p.kind == "array":   # rows of the array passed, then the declared extents
                inner = " * ".join(f"{d}LL" for d in p.inner)
                bufs.append(f"const long long tm_ad{i}_[] = {{(long long)(tm_sizes_[{i}] / sizeof({t}))"
                            f" / ({inner}), {', '.join(f'{d}LL' for d in p.inner)}}};")
                dims = f", {1 + len(p.inner)}, tm_ad{i}_"
            bufs.append(f"tm_check_buf tm_cb{i}_(\"{p.name}\", \"{shown}\", (long long)(tm_sizes_[{i}] / "
                        f"sizeof({t})), sizeof({t}), {record}{dims});")
            raw = f"{ct}::Row" if p.kind == "array" else t
            args.append(f"{ct}(*({raw} **)tm_args_[{i}], &tm_cb{i}_)")
        else:   # the kernel's own parameter type (numbers, templates)
            args.append(f"*(std::tuple_element_t<{i}, tm_params_t_> *)tm_args_[{i}]")
    # check mode: the launch's state lives in this frame (tiledmm_kernel.h, tm_check_launch)
    chk = "".join("\n    " + d for d in ["tm_check_launch_t tm_check_(tm_shared_);", *bufs]) \
        if check else ""
    start = "tm_check_launch(&tm_check_, " if check else "tm_emu_launch("
    finish = "tm_check_finish(&tm_check_, " if check else "tm_user_finish("
    config = ("dim3(tm_g_[0], tm_g_[1], tm_g_[2]), dim3(tm_b_[0], tm_b_[1], tm_b_[2]), tm_shared_"
              + "".join(", " + a for a in args))
    call = f"{start}tm_kernel_, {config})"
    if paired:
        call = f"tm_emu_launch_pair(tm_kernel_, tm_split_{name}, tm_split_frame_{name}, {config})"
    types = ", ".join((checked_type(p) if check else None) or p.type_text() for p in params)
    return f"""
#line 1 "tiledmm-launcher"
#include "tiledmm_fault.h"
// The kernel through a pointer of its exact type (its parameters as the compiled text declares
// them: the checked types in check mode), the launcher's one name for it: the target type picks
// the kernel where its name is also a libc function's (`select`, `index`, `time`), which
// `decltype(&{name})` or a launch template's deduction would find ambiguous.
typedef void (*tm_kernel_t_)({types});
static const tm_kernel_t_ tm_kernel_ = &{name};
template <typename F> struct tm_params_of_;
template <typename... P> struct tm_params_of_<void (*)(P...)> {{ typedef std::tuple<P...> type; }};
typedef tm_params_of_<tm_kernel_t_>::type tm_params_t_;
extern "C" __attribute__((visibility("default"))) int tm_user_launch(
    const unsigned *tm_g_, const unsigned *tm_b_, size_t tm_shared_, void **tm_args_,
    const size_t *tm_sizes_, int tm_threads_, int tm_strict_, char *tm_detail_, size_t tm_detail_size_)
{{
    (void)tm_args_; (void)tm_sizes_;
    tm_fault_kernel_ = "{name}";
    {' '.join(notes)}
    if (tm_threads_ > 0) tm_emu_set_threads(tm_threads_);
    tm_emu_set_strict_exit(tm_strict_);{chk}
    if (tm_shared_ > TM_SHARED_DEFAULT_BYTES)
        cudaFuncSetAttribute(tm_kernel_, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tm_shared_);
    cudaError_t tm_err_ = {call};
    fflush(stdout);   // the kernel's printf reaches the caller before the launch returns
    return {finish}tm_err_, tm_detail_, tm_detail_size_);
}}
"""


def prelude_text():
    """tiledmm's prelude as the compilers see it (part of every cache key): the prelude, the
    dialect macros it includes, check mode's runtime and the fault report."""
    text = []
    for name in ("tiledmm_kernel.h", "kernel_dialect.h", "tm_limits.h", "tiledmm_check.h",
                 "tiledmm_fault.h"):
        with open(os.path.join(NATIVE, name)) as f:
            text.append(f.read())
    return "".join(text)


def profile_file(includes, name):
    """emu/profile/<name> below one of `includes` (tiledmm/native): emu_profile.cpp, the
    profile build's hooks, linked into a user kernel's profile build; split_hooks.h, included
    first where that build holds the kernel split at its barriers (as setup.py's
    PROFILE_SPLIT_FLAGS for the registry's)."""
    for d in includes:
        path = os.path.join(d, "emu", "profile", name)
        if os.path.exists(path):
            return path
    raise RuntimeError(f"profile=True needs tiledmm's profiling hooks (native/emu/profile/{name}), "
                       "which this installation lacks; reinstall tiledmm")


def split_wanted():
    """TILEDMM_EMU_SPLIT=0: every kernel on fibers (benchmarks/emu_speed.py compares the paths).
    Read at each call: part of the kernel's cache keys (here and in user_kernels' memory)."""
    return _settings.get("TILEDMM_EMU_SPLIT", "1") != "0"


def compile_emu(source, name, options, check, profile=False, *, seconds=None,
                memory_bytes=None):
    """Compile (or find in the disk cache) kernel `name` (None: the only one) of `source` for
    the emulator. Returns (name, params, artifact). The source is parsed (libclang) and compiled
    (g++) only in a confined compile child (tiledmm/confine/sandbox.py: it reads the toolchain and
    tiledmm's headers, writes one scratch folder, reaches no network); this process checks what
    comes back (compile_reply) and writes the cache. The artifact: SimpleNamespace(
    backend='emu', key, name, image, digest, warnings, origin: 'compiled' or 'disk_hits'),
    `image` being the shared object's bytes (verified when read from the cache)."""
    includes, rt_sources = emu_headers()
    defines, rest = split_defines(options)
    runtime = runtime_key(includes, rt_sources)
    split = split_wanted()
    # profile=True: the kernel instrumented as tiledmm._emu_profile's kernels are, the hooks
    # linked in, the emulator's entry points wrapped (tiledmm/_emu_build.py).
    hooks = profile_file(includes, "emu_profile.cpp") if profile else None
    profiling = (PROFILE_KERNEL_FLAGS, PROFILE_HOOK_FLAGS, PROFILE_WRAPPED,
                 open(hooks, "rb").read(),
                 open(profile_file(includes, "split_hooks.h"), "rb").read(),
                 "linked apart") if profile else None
    key = cache.key("emu", source, name, defines, rest, check, cxx_compiler(), EMU_FLAGS, USER_FLAGS,
                    _DIALECT, SPLIT_SOURCE if split else "no split", prelude_text(), runtime,
                    profiling)
    so = cache.entry_path(f"user-{key}.so")
    image, meta = cache.read_verified(so), cache.read_verified(so[:-3] + ".json")
    reply = None
    if image is not None and meta is not None:
        try:
            reply = compile_reply(json.loads(meta))
            origin = "disk_hits"
        except (ValueError, CompileProtocolError):
            reply = None
    if reply is None:
        scratch = tempfile.mkdtemp(prefix="tiledmm-compile-")
        try:
            rt_objs = runtime_objects(includes, rt_sources, scratch, runtime)
            if profile:
                rt_objs.append(profile_hooks_object(includes, hooks, scratch))
            request = {"op": "compile", "source": source, "name": name, "options": list(options),
                       "check": bool(check), "profile": bool(profile), "rt_objs": rt_objs,
                       "split": split,
                       "includes": includes, "build_flags": kernel_build_flags(),
                       "link_flags": kernel_link_flags()}   # probed here once, not per child
            reply = run_compile_child(request, scratch, seconds, memory_bytes)
            image = _read_output(os.path.join(scratch, "kernel.so"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        cache.store_bytes(_reply_json(reply), so[:-3] + ".json")
        cache.store_bytes(image, so)
        origin = "compiled"
    artifact = SimpleNamespace(backend="emu", key=key, name=reply["name"], image=image,
                               digest=hashlib.sha256(image).hexdigest(),
                               warnings=parse_warnings(reply["log"], "emu"), origin=origin,
                               split=reply["split"])
    return reply["name"], reply["params"], artifact


def kernel_signature_confined(source, name, options, *, seconds=None):
    """(name, [Param]) of the kernel to launch, read by libclang in a confined child (the cuda
    backend's path: NVRTC then runs in the confined worker). Cached on disk by the source."""
    key = cache.key("signature", source, name, list(options), _DIALECT)
    path = cache.entry_path(f"user-{key}.sig.json")
    meta = cache.read_verified(path)
    if meta is not None:
        try:
            reply = compile_reply(json.loads(meta))
            return reply["name"], reply["params"]
        except (ValueError, CompileProtocolError):
            pass
    scratch = tempfile.mkdtemp(prefix="tiledmm-parse-")
    try:
        reply = run_compile_child({"op": "parse", "source": source, "name": name,
                                   "options": list(options)}, scratch, seconds, None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    cache.store_bytes(_reply_json(reply), path)
    return reply["name"], reply["params"]


class CompileProtocolError(RuntimeError):
    """The compile child answered outside its schema (it is confined, yet parses hostile text)."""


class CompileTimeout(RuntimeError):
    """The compile child ran past its time or memory limit."""


_REPLY_MARKER = b"\n@@tiledmm-compile@@"
MAX_IMAGE_BYTES = 512 << 20
MAX_LOG = 64 << 10
_IDENT_RE = re.compile(r"[A-Za-z_]\w{0,255}\Z")
_KINDS = ("scalar", "pointer", "vector", "array", "rows")
_ROW_QUALS = ("", "const", "volatile", "const volatile")
# a kernel's name as the caller may show it: an identifier, template arguments of a `name<...>`
_NAME_RE = re.compile(r"[A-Za-z_][\w:<>,()\[\] .+\-*/&|!~^%=?']{0,1023}")


def run_compile_child(request, scratch, seconds=None, memory_bytes=None):
    """Run this module's main() confined in `scratch` with `request` on its stdin; the checked
    reply (raising CompileError, ValueError, CompileTimeout or RuntimeError for its failures)."""
    seconds = seconds or COMPILE_CHILD_SECONDS
    policy = sandbox.compile_policy(scratch, memory_bytes=memory_bytes or 4 << 30,
                                     cpu_seconds=int(seconds) + 5)
    sandbox.warn_if_unconfined("the compiler of tm.compile's kernels")
    done = sandbox.run_python("toolchain.compile_emu", [], policy, cwd=scratch,
                               stdin=json.dumps(request).encode(), timeout=seconds)
    out = done.stdout or b""
    if done.timed_out:
        raise CompileTimeout(f"compiling took more than {seconds:g} s and was stopped")
    if _REPLY_MARKER not in out[-(8 << 20):]:
        err = (done.stderr or b"")[-2000:].decode(errors="replace").strip()
        if done.returncode in (-signal.SIGKILL, -signal.SIGXCPU):
            raise CompileTimeout(f"compiling ran past its CPU-time or memory limit "
                                 f"(signal {-done.returncode})")
        raise RuntimeError(f"the compile step failed (exit code {done.returncode}): {err}")
    try:
        raw = json.loads(out.rsplit(_REPLY_MARKER, 1)[1][:8 << 20].decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CompileProtocolError(f"the compile child's reply is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise CompileProtocolError("the compile child's reply is not an object")
    if raw.get("ok") is not True:
        message = _bounded(raw.get("message"), MAX_LOG)
        log = _bounded(raw.get("log"), MAX_LOG)
        kind = raw.get("error")
        if kind == "CompileError":
            raise CompileError(message, log)
        if kind in ("ValueError", "TypeError"):
            raise ValueError(message)
        raise RuntimeError(f"compiling failed: {_bounded(kind, 100)}: {message}")
    return compile_reply(raw)


def _bounded(v, limit):
    v = v if isinstance(v, str) else ""
    return v if len(v) <= limit else v[:limit] + f"\n[... {len(v) - limit} characters cut]"


def compile_reply(raw):
    """The compile child's reply checked: {"name", "params": [Param], "log"} (CompileProtocol-
    Error for anything outside the schema). The caller builds Params from plain values only."""
    if not isinstance(raw, dict) or set(raw) - {"ok", "name", "params", "log", "split"}:
        raise CompileProtocolError("the compile child's reply has fields outside the schema")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise CompileProtocolError("the kernel's name is outside the schema")
    plist = raw.get("params")
    if not isinstance(plist, list) or len(plist) > 256:
        raise CompileProtocolError("the parameters are outside the schema")
    params = []
    for d in plist:
        if not isinstance(d, dict) or set(d) != {"name", "ctype", "kind", "const", "volatile",
                                                 "row_quals", "lanes", "inner", "decl_text",
                                                 "vector", "span"}:
            raise CompileProtocolError("a parameter is outside the schema")
        kind, ctype = d["kind"], d["ctype"]
        ok = (isinstance(d["name"], str) and _IDENT_RE.match(d["name"]) and kind in _KINDS and
              isinstance(ctype, str) and (ctype in SCALARS if kind == "scalar" else
                                          ctype in ELEMENTS) and
              isinstance(d["const"], bool) and isinstance(d["volatile"], bool) and
              d["row_quals"] in _ROW_QUALS and
              type(d["lanes"]) is int and
              1 <= d["lanes"] <= 4 and isinstance(d["inner"], list) and len(d["inner"]) <= 8 and
              all(type(x) is int and 0 < x < 2**31 for x in d["inner"]) and
              isinstance(d["decl_text"], str) and len(d["decl_text"]) <= 1000 and
              (d["vector"] is None or d["vector"] in VECTORS) and
              isinstance(d["span"], list) and len(d["span"]) == 2 and
              all(type(x) is int and 0 <= x < 2**31 for x in d["span"]))
        if not ok:
            raise CompileProtocolError("a parameter is outside the schema")
        params.append(Param(d["name"], ctype, kind == "pointer", d["const"], tuple(d["span"]),
                            kind, lanes=d["lanes"], inner=d["inner"], decl_text=d["decl_text"],
                            vector=d["vector"], volatile=d["volatile"],
                            row_quals=d["row_quals"]))
    split = raw.get("split", {"path": "fibers", "reason": "", "frame": 0})
    if not isinstance(split, dict) or set(split) != {"path", "reason", "frame"} or \
            split["path"] not in ("fibers", "thread loops") or \
            not isinstance(split["reason"], str) or type(split["frame"]) is not int or \
            not 0 <= split["frame"] < 2**31:
        raise CompileProtocolError("the launch path is outside the schema")
    split = {**split, "reason": _bounded(split["reason"], 1000)}
    return {"ok": True, "name": name, "params": params, "log": _bounded(raw.get("log"), MAX_LOG),
            "split": split}


def _reply_json(reply):
    return json.dumps({"ok": True, "name": reply["name"], "log": reply["log"],
                       "params": [_param_dict(p) for p in reply["params"]],
                       "split": reply["split"]}).encode()


def _param_dict(p):
    return {"name": p.name, "ctype": p.ctype, "kind": p.kind, "const": bool(p.const),
            "volatile": bool(p.volatile), "row_quals": p.row_quals, "lanes": p.lanes, "inner": list(p.inner),
            "decl_text": p.decl_text or "", "vector": p.vector, "span": list(p.span)}


def _read_output(path):
    """The shared object the compile child built: a regular file (not a link it planted), of a
    bounded size."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_IMAGE_BYTES:
            raise RuntimeError("the compile child's output is not a plain file of at most "
                               f"{MAX_IMAGE_BYTES >> 20} MiB")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)[:MAX_IMAGE_BYTES]
    finally:
        os.close(fd)


def main(args):
    """The confined compile child: a JSON request on stdin, the reply after a marker on stdout.
    op 'parse': the kernel's signature (libclang); op 'compile': that, then g++ builds
    kernel.so in the current (scratch) folder."""
    request = json.loads(sys.stdin.read())
    try:
        name, params = kernel_signature(request["source"], request["name"], request["options"])
        reply = {"ok": True, "name": name, "params": [_param_dict(p) for p in params], "log": ""}
        if request["op"] == "compile":
            reply["log"], reply["split"] = _compile_here(request, name, params)
    except CompileError as exc:
        reply = {"ok": False, "error": "CompileError", "message": str(exc), "log": exc.log}
    except Exception as exc:   # every failure is a reply
        reply = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
    sys.stdout.flush()
    os.write(1, _REPLY_MARKER + json.dumps(reply).encode())
    return 0


def _compile_here(request, name, params):
    """g++ on the user's source in the scratch folder (the compile child's): kernel.so.
    Returns (compiler log, launch path: {"path", "reason", "frame"}). A plain or profile build
    also holds the kernel split at its barriers (tiledmm/toolchain/split/transform.py) where the
    transform applies; if g++ rejects that, the kernel is built again without it."""
    check, profile = request["check"], request["profile"]
    source = request["source"]
    user_src = checked_shared(checked_source(source, params)) if check else source
    defines, options = split_defines(request["options"])
    tmp = os.getcwd()
    # Check mode keeps the fibers (its reports); profile mode splits where the split counts
    # what the fibers count (SplitPlan.profile_reason: block-level code that may touch memory,
    # shuffles and votes keep the fibers there).
    plan = split_kernel(source, name, defines, profile=profile) \
        if not (check or not request.get("split", True)) else None
    if plan is not None and plan.text is not None:
        # the split right after the kernel's definition (as programs and the registry have
        # it): the macros it expands have their values there, not the file's last ones
        log = _compile_text(request, name, params, _with_split(source, plan), defines, options,
                            tmp, paired=True)
        if log is not None:
            return log, {"path": "thread loops", "reason": "", "frame": plan.frame}
        reason = "the split kernel did not compile (tiledmm's transform: please report it)"
    else:
        reason = plan.reason if plan is not None else \
            "check mode" if check else "TILEDMM_EMU_SPLIT=0"
    log = _compile_text(request, name, params, user_src, defines, options, tmp, paired=False)
    return log, {"path": "fibers", "reason": reason, "frame": 0}


def _with_split(source, plan):
    """The user's source in the emulator's dialect (the text split_kernel read: plan.end is a
    byte offset in it) with the split function after the kernel and a `#line` back to the
    kernel's last line (full_source's dialect pass leaves this text as it is)."""
    data = emu_dialect(source).encode()
    line = data.count(b"\n", 0, plan.end) + 1
    return (data[:plan.end].decode() + "\n" + plan.text + f'#line {line} "{SOURCE_NAME}"\n' +
            data[plan.end:].decode())


def _compile_text(request, name, params, user_src, defines, options, tmp, paired):
    """g++ on the kernel's text with its launcher: the compiler's log. `paired`: user_src holds
    the kernel's split (_with_split) and the launcher launches the pair; then None where it
    fails (the caller retries without the split)."""
    check, profile = request["check"], request["profile"]
    includes = request["includes"]
    text = full_source(user_src, _launcher(name, params, check, paired), defines, "emu")
    src_path = os.path.join(tmp, "kernel.cpp")
    with open(src_path, "w") as f:
        f.write(text)
    out = os.path.join(tmp, "kernel.so")
    build_flags = request["build_flags"]
    split_hooks = profile_split_flags(profile_file(includes, "split_hooks.h")) \
        if profile and paired else []
    compile_flags = [*build_flags, *(["-DTM_CHECK"] if check else []),
                     *(PROFILE_KERNEL_FLAGS if profile else []), *split_hooks, *USER_FLAGS,
                     *[f"-isystem{d}" for d in includes + [stand_ins()]], *options]
    link_flags = [*request["rt_objs"], *request["link_flags"],
                  *(f"-Wl,--wrap={sym}" for sym in PROFILE_WRAPPED if profile)]
    if not profile:
        cmd = [cxx_compiler(), *compile_flags, "-shared", "-o", out, src_path, "-x", "none", *link_flags]
        proc = _run_compiler(cmd, f"compiling kernel '{name}'")
    else:
        # Compiled, then linked apart: -fsanitize=thread on the link line would bring libtsan,
        # whose hooks are tiledmm's own here (emu_profile.o).
        obj = os.path.join(tmp, "kernel.o")
        proc = _run_compiler([cxx_compiler(), *compile_flags, "-c", "-o", obj, src_path],
                             f"compiling kernel '{name}'")
        if proc.returncode == 0:
            linked = _run_compiler([cxx_compiler(), *build_flags, "-shared", "-o", out, "-x", "none",
                                    obj, *link_flags], f"linking kernel '{name}'")
            if linked.returncode != 0:
                raise RuntimeError(f"linking kernel '{name}' for profile mode failed:\n"
                                   + linked.stderr[-4000:])
    if proc.returncode != 0:
        if paired:
            return None
        raise compile_error(name, "emu", proc.stderr.replace(src_path, "kernel.cpp"))
    return proc.stderr.replace(src_path, "kernel.cpp")


def profile_hooks_object(includes, hooks, build_dir):
    """The profiling hooks compiled for one user kernel's profile build (a second or so; the
    profile build is cached as a whole, so this runs once per kernel source)."""
    obj = os.path.join(build_dir, "emu_profile.o")
    cmd = [cxx_compiler(), *kernel_build_flags(), *PROFILE_HOOK_FLAGS, *[f"-I{d}" for d in includes],
           "-c", hooks, "-o", obj]
    proc = _run_compiler(cmd, "building the profiling hooks for a user kernel", build_dir)
    if proc.returncode != 0:
        raise RuntimeError("building the profiling hooks failed:\n" + proc.stderr[-4000:])
    return obj


def stand_ins():
    """tiledmm/native/user: the stand-ins for the CUDA toolkit's headers."""
    return os.path.join(NATIVE, "user")
