"""Whole CUDA programs: `tm.run(program)` and `python -m tiledmm run FILE.cu`.

A program (host code with cudaMalloc, cudaMemcpy and `<<<>>>`, and its kernels) is built as a
shared object in a confined compile child (tiledmm/programs/build.py: libclang finds the
launches, g++ against the emulator's runtime or nvcc builds it) and cached as tm.compile's
kernels are; it then runs in a confined process of its own (tiledmm/programs/main.py), whose
stdout, stderr and exit code are the program's. Only data comes back: the outputs, the exit code
and the report file's JSON lines (launches, faults), read by tiledmm/programs/report.py.
"""
import functools
import json
import mmap
import os
import re
import shutil
import stat
import subprocess
import sys
import termios

from .. import _backend, _toolkit
from ..toolchain import compile_emu
from ..toolchain import cache
from . import launch_rewrite, workdir
from ..confine import sandbox
from .._backend import get_backend
from ..confine.isolation import default_timeout
from ..errors import CompileError
from .._emu_build import (PROFILE_HOOK_FLAGS, PROFILE_KERNEL_FLAGS, PROFILE_WRAPPED,
                          profile_split_flags)
from ..profiling.counters import GRID_SMS
from .report import (PATH_NAME_CHARS, PATH_REASON_CHARS, PATHS_MOST,
                     ProgramResult, diagnostics, launches, problems, read_report, signal_line)
from .sanitize import check_options, run_sanitized

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tiledmm/
SOURCE_TEXT_NAME = "program.cu"
_DIALECT = 3   # bumped when the text tiledmm makes of a program changes (cache key)
_UNSET = object()

# ---------------------------------------------------------------------------------------------
# the program and its options

# The largest source file of a program read (each file)
SOURCE_MOST = 8 << 20


def _read_program(program):
    """(source text, the name messages use, the folder its own #includes are relative to)."""
    if isinstance(program, os.PathLike) or (isinstance(program, str) and "\n" not in program
                                            and len(program) < 4096 and os.path.isfile(program)):
        path = os.fspath(program)
        try:   # a submission's file: a FIFO or a link to a terminal must not hang the caller
            text = sandbox.read_bounded(path, SOURCE_MOST, whole=True)
            return (text.decode("utf-8", errors="replace"), os.path.basename(path),
                    os.path.dirname(os.path.abspath(path)))
        except OSError as exc:
            raise FileNotFoundError(f"tm.run: cannot read the program {path!r}: {exc}") from None
    if isinstance(program, os.PathLike):
        raise FileNotFoundError(f"tm.run: no program file {os.fspath(program)!r}")
    if not isinstance(program, str):
        raise TypeError("tm.run(program): give CUDA C++ source text (str) or a path to a .cu file, "
                        f"not {type(program).__name__}")
    if "main" not in program and program.strip().endswith(".cu"):
        raise FileNotFoundError(f"tm.run: no program file {program!r} (a str that names no "
                                "existing file is taken as source text)")
    return program, SOURCE_TEXT_NAME, os.getcwd()


# Libraries nvcc links that the emulator's runtime stands for
_EMULATED_LIBRARIES = ("cudart", "cudart_static", "cuda", "cudadevrt")
# Libraries of the system a program may link on emu
_SYSTEM_LIBRARIES = ("m", "pthread", "rt", "dl", "stdc++")
# Host-compiler options (-Xcompiler) taken on emu: warnings, -f options, optimisation, debug
_HOST_OPTION_PREFIXES = ("-W", "-f", "-O", "-g", "-D", "-U", "-I", "-std=")


def emu_options(compiler_args):
    """(-D/-U defines, -I folders, other g++ options) of compiler_args on emu (nvcc's command
    line, as programs/nvcc_args.py writes it): -D, -U, -I, -O*, -std= are taken; -Xcompiler's
    warnings, -f, -O and -g options; -l of the system's libraries (the CUDA runtime's are the
    emulator's own); -arch/-gencode/-code, -g, -G and -lineinfo are ignored; anything else is
    refused."""
    defines, includes, other = [], [], []
    args = list(compiler_args)
    i = 0
    while i < len(args):
        a = args[i]
        if not isinstance(a, str):
            raise TypeError(f"compiler_args: {a!r} is not a str")
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a in ("-D", "-U", "-I") and nxt is not None:
            (includes if a == "-I" else defines).append(a + nxt)
            i += 2
            continue
        if a in ("-arch", "-gencode", "--gpu-architecture", "-code") and nxt is not None:
            i += 2
            continue
        if a == "-Xcompiler" and nxt is not None:
            for part in (p for p in nxt.split(",") if p):
                if not part.startswith(_HOST_OPTION_PREFIXES):
                    raise ValueError(f"compiler_args: -Xcompiler {part} is not taken on the "
                                     "emulator (it takes the host compiler's -W, -f, -O, -g, "
                                     "-D, -U, -I and -std= options)")
                d, inc, o = emu_options([part]) if part.startswith(("-D", "-U", "-I")) else                     ([], [], [part])
                defines, includes, other = defines + d, includes + inc, other + o
            i += 2
            continue
        if a.startswith(("-D", "-U")) and len(a) > 2:
            defines.append(a)
        elif a.startswith("-I") and len(a) > 2:
            includes.append(a)
        elif a in ("-g", "-G", "-lineinfo"):
            pass   # nvcc's debug information: the emulator's build has its own
        elif a.startswith("-l") and a[2:] in _EMULATED_LIBRARIES:
            pass   # the emulator is the CUDA runtime
        elif a.startswith("-l") and a[2:] in _SYSTEM_LIBRARIES or a.startswith("-L") and len(a) > 2:
            other.append(a)
        elif a.startswith("-l") and len(a) > 2:
            raise ValueError(f"compiler_args: {a} links a library the emulator does not have "
                             f"(it takes the CUDA runtime's, emulated, and "
                             f"{', '.join('-l' + n for n in _SYSTEM_LIBRARIES)}); run the "
                             "program with backend='cuda' on a GPU")
        elif a.startswith("-O") or a.startswith("-std="):
            if a.startswith("-std=") and a[5:] in ("c++98", "c++03", "c++11", "c++14"):
                pass   # the emulator's headers need C++17; the program compiles as C++17
            else:
                other.append(a)
        elif a.startswith(("-arch=", "-gencode=", "--gpu-architecture=", "-code=")):
            pass
        else:
            raise ValueError(f"compiler_args: {a!r} is not taken on the emulator (emu takes -D, "
                             "-U, -I, -O*, -std=, -Xcompiler, -l and ignores -arch/-gencode); "
                             "pass it with backend='cuda', or leave it out")
        i += 1
    return defines, includes, other


def _define_lines(defines):
    lines = []
    for d in defines:
        if d.startswith("-D"):
            name, eq, value = d[2:].partition("=")
            lines.append(f"#define {name} {value if eq else '1'}")
        else:
            lines.append(f"#undef {d[2:]}")
    return lines


# ---------------------------------------------------------------------------------------------
# a program of several files (a list of paths, or a folder: %cuda_group_run)



def read_sources(program, compiler_args):
    """(first file's text, its name, its folder, the other .cu files as (text, name, folder) triples, the
    compiler_args with -I for every folder the files are in) for tm.run's `program`: one file
    or source text as _read_program reads it, a list of paths (.cu files compiled, headers
    found by their folders), or a folder (its .cu files, in name order)."""
    if isinstance(program, (str, os.PathLike)) and os.path.isdir(program):
        folder = os.fspath(program)
        program = sorted(os.path.join(folder, n) for n in os.listdir(folder)
                         if n.endswith(".cu") and os.path.isfile(os.path.join(folder, n)))
        if not program:
            raise FileNotFoundError(f"tm.run: the folder {folder!r} has no .cu file")
    if not isinstance(program, (list, tuple)):
        return (*_read_program(program), [], list(compiler_args))
    paths = [os.fspath(p) for p in program]
    for p in paths:
        if not os.path.isfile(p):
            raise FileNotFoundError(f"tm.run: no program file {p!r}")
    units = [p for p in paths if not p.endswith(workdir.HEADER_ENDINGS)]
    if not units:
        raise ValueError("tm.run: the program's files include no .cu source, only headers")
    names = [os.path.basename(p) for p in units]
    if len(set(names)) != len(names):
        raise ValueError(f"tm.run: two of the program's files have one name ({names}); each "
                         "file of a program needs a name of its own")
    dirs = list(dict.fromkeys(os.path.dirname(os.path.abspath(p)) for p in paths))
    source, name, folder = _read_program(units[0])
    others = [_read_program(p) for p in units[1:]]
    return source, name, folder, others, [*compiler_args, *[f"-I{d}" for d in dirs[1:]]]


def _include_dirs(compiler_args):
    """The folders compiler_args names with -I (the compile child reads them)."""
    args, dirs = [str(a) for a in compiler_args], []
    for i, a in enumerate(args):
        if a == "-I" and i + 1 < len(args):
            dirs.append(args[i + 1])
        elif a.startswith("-I") and len(a) > 2:
            dirs.append(a[2:])
    return [d for d in dirs if os.path.isdir(d)]


def _program_files(folder):
    """The files in the program's folder it may #include (workdir.INCLUDED_ENDINGS),
    regular files and not links, at most 200 in name order: what the compile child may read
    there (never the folder: a grader's or a notebook's other files) and what the cache key
    hashes."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(workdir.INCLUDED_ENDINGS))
    except OSError:
        return []
    out = []
    for n in names:
        try:
            if stat.S_ISREG(os.lstat(os.path.join(folder, n)).st_mode):
                out.append(n)
        except OSError:
            continue
        if len(out) >= 200:
            break
    return out


def _group_key_parts(extra_sources, source_dir, compiler_args):
    """What else the cache key holds: the other files, and the files next to the program and
    in its -I folders that it may #include (an edited header or kernel.cu is a new program)."""
    parts = [list(map(list, extra_sources))]
    for d in [source_dir, *_include_dirs(compiler_args)]:
        for n in _program_files(d):
            try:   # never following a link, never blocking on a FIFO: a submission's folder
                parts.append((d, n, sandbox.read_bounded(n, 1 << 20, folder=d)))
            except OSError:
                continue
    return parts


def _write_extra_sources(extra_sources, scratch):
    """The other files written into the compile child's scratch folder: [path, name, their
    original folder] triples."""
    out = []
    for i, (text, name, folder) in enumerate(extra_sources):
        path = os.path.join(scratch, f"extra_{i + 1}.cu")
        with open(path, "w") as f:
            f.write(text)
        out.append([path, name, folder])
    return out


def _built_names(extra_sources):
    return [f"program_{i + 1}{ext}" for i in range(len(extra_sources))
            for ext in (".cpp", ".cu")] + [n for _t, n, _folder in extra_sources]


# ---------------------------------------------------------------------------------------------
# building (cached)

def _nvcc():
    return _toolkit.tool("nvcc")


@functools.lru_cache(maxsize=1)
def _gpu_arch():
    """-gencode for the GPU present (nvidia-smi's compute capability), or [] (nvcc's default
    architecture, with PTX the driver compiles for any newer GPU)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if not out or not out[0].replace(".", "").isdigit():
        return ()
    cc = out[0].replace(".", "")
    return (f"-gencode=arch=compute_{cc},code=[sm_{cc},compute_{cc}]",)


def _emu_build_plan(compiler_args, profile):
    """(includes, runtime sources, defines, user includes, compile command, link command: None
    unless the program is compiled and linked apart, as profile mode's build is)."""
    includes, rt_sources = compile_emu.emu_headers()
    defines, user_includes, other = emu_options(compiler_args)
    flags = list(compile_emu.kernel_build_flags())
    counted = [*PROFILE_KERNEL_FLAGS, "-DTM_PROG_PROFILE", f"-DTM_PROG_GRID_SMS={GRID_SMS}",
               *profile_split_flags(compile_emu.profile_file(includes, "split_hooks.h"))] \
        if profile else []
    compile_cmd = [compile_emu.cxx_compiler(), *flags, "-g", *counted, *compile_emu.USER_FLAGS,
                   *[f"-isystem{d}" for d in includes + [compile_emu.stand_ins()]],
                   *user_includes, *other]
    if not profile:
        return includes, rt_sources, defines, user_includes, [*compile_cmd, "-shared"], None
    return (includes, rt_sources, defines, user_includes, [*compile_cmd, "-c"],
            [compile_emu.cxx_compiler(), *flags, "-shared", "-x", "none"])


def toolkit_header(log, toolkit_include):
    """The CUDA toolkit header that a program whose emu build failed included itself: in the
    compiler's include chains ("In file included from A:1, from B:2, from p.cu:3:"), the last
    header inside the toolkit's include folder (`toolkit_include`, links resolved: a system may
    link them into /usr/local/include, where g++ looks by default) before a file outside it.
    None where no chain enters the toolkit."""
    if not toolkit_include:
        return None
    root = os.path.realpath(toolkit_include) + os.sep
    chain = []
    for line in log.splitlines() + [""]:
        m = re.match(r"(?:In file included from|\s+from) (.+?):\d+[,:]$", line)
        if m:
            chain.append(m.group(1))
            continue
        for inner, outer in zip(chain, chain[1:]):
            if os.path.realpath(inner).startswith(root) and \
                    not os.path.realpath(outer).startswith(root):
                return os.path.basename(inner)
        chain = []
    return None


def _headers_text(includes):
    """The program's prelude as the compiler sees it (part of the cache key)."""
    parts = [compile_emu.prelude_text()]
    for rel in ("emu/program_runtime.h", "emu/cuda_emu.h", "emu/runtime_api.h"):
        for d in includes:
            p = os.path.join(d, rel)
            if os.path.exists(p):
                parts.append(open(p).read())
                break
    for name in ("cooperative_groups.h", "cuda.h", "tiledmm_program_cuda.h",
                 "tiledmm_program_report.h"):
        for d in (compile_emu.stand_ins(), compile_emu.NATIVE):
            p = os.path.join(d, name)
            if os.path.exists(p):
                parts.append(open(p).read())
    return parts




def _build_paths(raw):
    """The build child's "paths" as {kernel: reason} (str -> str, bounded), or raises
    RuntimeError for anything else."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > PATHS_MOST or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= PATH_NAME_CHARS
            and len(v) <= 4 * PATH_REASON_CHARS for k, v in raw.items()):
        raise RuntimeError("building the program failed: the compile child's answer is not in "
                           "tiledmm's schema (its kernels' paths)")
    return {k: v[:PATH_REASON_CHARS] for k, v in raw.items()}


def _no_split_reason(backend, check):
    """Why no kernel of this build is split ("" where the transform runs; profile builds split
    where SplitPlan.profile_reason allows, program_build._split_kernels)."""
    if backend != "emu":
        return "not the emulator"
    return "check mode" if check else ""


def build(source, source_name, backend, compiler_args=(), source_dir=None, profile=False,
          extra_sources=(), check=False):
    """The program's shared object (bytes) and what the build found, from the cache or built
    in a confined compile child. Raises tm.CompileError with the compiler's messages.
    profile (emu): the kernels instrumented and linked with profile mode's counters.
    extra_sources: the program's other files, (text, name, folder) triples, compiled apart and
    linked."""
    source_dir = source_dir or os.getcwd()
    link_cmd = None
    if backend == "emu":
        includes, rt_sources, defines, user_includes, compile_cmd, link_cmd = \
            _emu_build_plan(compiler_args, profile)
        compile_cmd = _with_check_flags(compile_cmd, check)
        runtime = compile_emu.runtime_key(includes, rt_sources)
        parse_includes = includes + [compile_emu.stand_ins()]
    else:
        nvcc = _nvcc()
        if nvcc is None:
            raise RuntimeError("tm.run on the cuda backend needs nvcc, which was not found (put it "
                               "on PATH or set CUDA_HOME); to run the program on the CPU emulator "
                               "instead, pass backend=\"emu\"")
        includes, rt_sources, runtime = [], [], None
        defines = [a for a in compiler_args if str(a).startswith(("-D", "-U"))]
        user_includes = [a for a in compiler_args if str(a).startswith("-I")]
        compile_cmd = [nvcc, "-x", "cu", "-std=c++17", "-O2", "-lineinfo", "-shared",
                       "-Xcompiler", "-fPIC", f"-I{compile_emu.NATIVE}", *_gpu_arch(),
                       *[str(a) for a in compiler_args]]
        parse_includes = compile_emu.emu_headers()[0] + [compile_emu.stand_ins()]
    hooks = compile_emu.profile_file(includes, "emu_profile.cpp") if profile else None
    key = cache.key("program", backend, source, source_name, list(compiler_args), compile_cmd,
                    link_cmd, hooks and open(hooks, "rb").read(),
                    hooks and open(compile_emu.profile_file(includes, "split_hooks.h"), "rb").read(),
                    PROFILE_HOOK_FLAGS,
                    PROFILE_WRAPPED, _headers_text(compile_emu.emu_headers()[0]), runtime, _DIALECT,
                    open(os.path.join(HERE, "programs", "build.py"), "rb").read(),
                    open(os.path.join(HERE, "programs", "launch_rewrite.py"), "rb").read(),
                    compile_emu.SPLIT_SOURCE,   # the barrier transform program_build applies
                    *_group_key_parts(extra_sources, source_dir, compiler_args))
    so_entry = cache.entry_path(f"user-program-{key}.so")
    meta_entry = cache.entry_path(f"user-program-{key}.json")
    image = cache.read_verified(so_entry)
    meta = cache.read_verified(meta_entry)
    if image is not None and meta is not None:
        cache.count("disk_hits")
        meta = json.loads(meta)
        meta["paths"] = _build_paths(meta.get("paths"))
        meta["note"] = str(meta.get("note", ""))[:2000]
        return image, meta, "disk_hits"
    with sandbox.scratch("program-build") as scratch:
        link, prelude = [], None
        if backend == "emu":
            # tiledmm's own runtime (trusted sources), compiled once per cache folder
            # the prelude reads tiledmm's headers and the system's: one for every program,
            # whatever its -I folders (a folder of its own is not searched for them)
            prelude = compile_emu.prelude_pch([a for a in compile_cmd if a not in user_includes],
                                              scratch, runtime)
            link = ["-x", "none",
                    *compile_emu.runtime_objects(includes, rt_sources, scratch, runtime),
                    *compile_emu.kernel_link_flags(),
                    "-Wl,-z,defs"]   # a symbol nothing defines: a link error, never the loader's
            if profile:   # the counters' hooks (tiledmm's own source), wrapping the emulator
                link += [compile_emu.profile_hooks_object(includes, hooks, scratch),
                         *(f"-Wl,--wrap={sym}" for sym in PROFILE_WRAPPED)]
        parse_pch = launch_rewrite.parse_pch(scratch, parse_includes)
        src_path = os.path.join(scratch, "source.cu")
        with open(src_path, "w") as f:
            f.write(source)
        user_inc = [f"-I{source_dir}"] + [i if i.startswith("-I") else "-I" + i
                                          for i in user_includes]
        request = {"scratch": scratch, "source_path": src_path, "source_name": source_name,
                   "backend": backend, "parse_includes": parse_includes,
                   "defines": [d for d in defines], "define_lines": _define_lines(defines),
                   "user_includes": user_inc, "source_dir": source_dir,
                   "program_files": [os.path.join(source_dir, n)
                                     for n in _program_files(source_dir)],
                   # each file's own folder first for its quoted includes, as for nvcc
                   # (programs/build.py adds it per file)
                   "compile": [*compile_cmd, f"-I{source_dir}"], "link": link,
                   "prelude": prelude, "parse_pch": parse_pch,
                   "link_cmd": link_cmd, "check": bool(check),
                   "no_split": _no_split_reason(backend, check), "profile": bool(profile),
                   "extra_sources": _write_extra_sources(extra_sources, scratch)}
        req_path = os.path.join(scratch, "request.json")
        with open(req_path, "w") as f:
            json.dump(request, f)
        # the child reads the source, the files beside it that it may #include (not the
        # folder: a grader's working folder holds hidden tests) and tiledmm's headers
        policy = sandbox.compile_policy(scratch, read=(
                                            src_path, HERE,
                                            *[os.path.join(source_dir, n)
                                              for n in _program_files(source_dir)],
                                                        *compile_emu.emu_headers()[0],
                                                        *_include_dirs(compiler_args)))
        done = sandbox.run_python("programs.build", [req_path], policy, cwd=scratch,
                                   timeout=600)
        try:
            result = json.loads(sandbox.read_bounded("result.json", 64 << 20, folder=scratch,
                                                     whole=True))
            if not isinstance(result, dict):
                raise ValueError("not an object")
        except (OSError, ValueError):
            raise RuntimeError("building the program failed: the compile child ended with code "
                               f"{done.returncode} and no result\n"
                               f"{(done.stderr or b'').decode(errors='replace')[-3000:]}") from None
        if not result.get("ok"):
            log = str(result.get("log", ""))
            for built in ("program.cpp", "program_build.cu", source_name,
                          *_built_names(extra_sources)):
                log = log.replace(os.path.join(scratch, built), source_name)
            first = next((ln for ln in log.splitlines() if "error" in ln), log[:200])
            header = toolkit_header(log, _toolkit.include_dir()) if backend == "emu" else None
            if header:
                first = (f"it includes {header}, a CUDA toolkit header the emulator has no "
                         "stand-in for (the toolkit's own redefines the emulator's types); "
                         f"the compiler's first error: {first}")
            raise CompileError(f"the program {source_name} does not compile ({backend}): {first}"
                               f"\n\n{log}", log)
        image = sandbox.read_bounded("program.so", 1 << 30, folder=scratch, whole=True)
        meta = {"launches": result.get("launches", []), "log": result.get("log", ""),
                "paths": _build_paths(result.get("paths")),
                # cuda: the program built as nvcc builds it, its launches not timed (why)
                "note": str(result.get("note", ""))[:2000]}
        cache.store_bytes(image, so_entry)
        cache.store_bytes(json.dumps(meta).encode(), meta_entry)
    cache.count("compiled")
    return image, meta, "compiled"


# ---------------------------------------------------------------------------------------------
# running

# The most device memory an emulated program gets (emu/program_runtime.h maps it twice).
DEVICE_MEMORY_MOST = 16 << 30


def _device_memory_file():
    """The emulated program's device memory: a sealed memfd the caller makes, since the sandbox
    lets a program make no shared memory of its own (emu/program_runtime.h maps it twice:
    the program's view, closed while host code runs, and the runtime's). Sparse: pages are
    allocated as the program touches them, up to this process's host-memory limit."""
    limit = _backend.module("emu").host_memory()[0] or DEVICE_MEMORY_MOST
    size = min(DEVICE_MEMORY_MOST, limit) // mmap.PAGESIZE * mmap.PAGESIZE
    return sandbox.sealed_memory("tiledmm-device-memory", size)


def execute(image, source_name, backend, args=(), stdin=None, timeout=None, capture=True,
            folder=None):
    """Run a built program. Returns (Completed, report records, the tiledmm: lines to add, the
    files it wrote: {relative path: bytes}). The program works in a scratch folder of its own
    (the caller's working folder, a grader's with its hidden tests, is never granted): given
    `folder` (the program's own), that folder's entries are staged there (small files copied,
    the rest linked read-only: tiledmm/programs/workdir.py)."""
    with sandbox.scratch("program") as scratch:
        work = os.path.join(scratch, "work")
        os.mkdir(work, 0o700)
        read, staged = workdir.stage(folder, work) if folder else ([], {})
        cwd = work
        so = os.path.join(scratch, "program.so")
        with open(os.open(so, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700), "wb") as f:
            f.write(image)
        report = os.path.join(scratch, "report.jsonl")
        policy = sandbox.run_policy(scratch, read=(so, *read, HERE), devices=backend == "cuda",
                                    threads=sandbox.threads_most(program=backend == "emu"))
        feed = b"" if stdin is None and capture else stdin
        if isinstance(feed, str):
            feed = feed.encode()
        memory_fd = _device_memory_file() if backend == "emu" else None
        try:
            done = sandbox.run_python(
                "programs.main", [so, report, backend, source_name, "--", *[str(a) for a in args]],
                policy, cwd=cwd, stdin=feed, timeout=timeout, capture=capture,
                env=sandbox.minimal_env(
                    {} if memory_fd is None else {"TILEDMM_DEVICE_MEMORY_FD": str(memory_fd)}),
                pass_fds=() if memory_fd is None else (memory_fd,))
        finally:
            if memory_fd is not None:
                os.close(memory_fd)
        records = read_report(report)
        extra = diagnostics(records, so, scratch, source_name)
        files, left_out = workdir.collect(work, staged)
        extra += left_out
    if done.timed_out:
        extra.append(f"tiledmm: the program ran past its timeout of {timeout:g} s and was "
                     "stopped (returncode -9); raise timeout= (or --timeout) if it needs longer")
    else:
        line = signal_line(done.returncode)
        if line:
            extra.append(line)
    return done, records, extra, files


def run(program, *, args=(), stdin=None, backend=None, check=False, profile=False,
        timeout=_UNSET, compiler_args=(), link_folder=True):
    """Build and run a whole CUDA C++ program; returns a ProgramResult.

    program: a path (os.PathLike, or a str naming an existing file) or the source text.
    args: the program's argv after its name. stdin: None (an empty stdin), str or bytes.
    backend: "emu" (g++ against tiledmm's emulator) or "cuda" (nvcc, the GPU); default as for
    kernels. timeout: seconds (default 60, $TILEDMM_KERNEL_TIMEOUT; None for no limit).
    compiler_args: nvcc's options (programs/nvcc_args.py), given to nvcc on cuda; on emu
    emu_options says which are taken. link_folder: the program (a file) works among its
    folder's files (small ones copies it may overwrite, sources and the rest read-only links:
    programs/workdir.py; False: in an empty folder, as source text does); the files it writes
    come back as ProgramResult.files.

    A program that exits non-zero, faults or times out returns its code (negative for a
    signal, -9 after the timeout) with stderr saying why; one that does not compile raises
    tm.CompileError with the compiler's messages at the program's own lines.
    """
    backend = backend or get_backend()
    check_options(check, profile, backend)
    if backend not in ("emu", "cuda"):
        raise ValueError(f"tm.run: unknown backend {backend!r}; choose 'emu' or 'cuda'")
    if profile and backend != "emu":
        raise NotImplementedError("tm.run: profile=True counts a program's traffic on the "
                                  "emulator only (backend='emu'); on cuda, each launch's ms is "
                                  "already CUDA-event time")
    timeout = default_timeout() if timeout is _UNSET else timeout
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError(f"tm.run: timeout={timeout!r}; give seconds > 0, or None for no limit")
    if stdin is not None and not isinstance(stdin, (str, bytes)):
        raise TypeError("tm.run: stdin is None, str or bytes")
    source, name, folder, others, compiler_args = read_sources(program, compiler_args)
    image, meta, _origin = build(source, name, backend, compiler_args, folder, profile=profile,
                                 extra_sources=others, check=check and backend == "emu")
    if check and backend == "cuda":
        return run_sanitized(image, name, args, stdin, timeout)
    # a program given as a file works among its folder's files (source text: in none)
    done, records, extra, files = execute(
        image, name, backend, args, stdin, timeout,
        folder=folder if link_folder and not _is_text(program) else None)
    extra = ([meta["note"]] if meta.get("note") else []) + extra
    stderr = (done.stderr or b"").decode(errors="replace")
    if extra:
        if stderr and not stderr.endswith("\n"):
            stderr += "\n"
        stderr += "\n".join(extra) + "\n"
    return ProgramResult((done.stdout or b"").decode(errors="replace"), stderr, done.returncode,
                         done.timed_out, launches(records, backend, meta.get("paths")),
                         backend, problems(records), files)


def _is_text(program):
    """Whether tm.run's program is source text (not a file, a list of files or a folder)."""
    return isinstance(program, str) and ("\n" in program or len(program) >= 4096 or
                                         not os.path.exists(program))


class _terminal_kept:
    """The terminal's mode (echo, canonical input...) as it was before the program ran, set
    again after it (a program on the terminal may change it; seccomp refuses the terminal
    ioctls that set it, and this holds where a request gets past)."""

    def __enter__(self):
        self.saved = []
        for fd in (0, 1, 2):
            try:
                if os.isatty(fd):
                    self.saved.append((fd, termios.tcgetattr(fd)))
            except (OSError, termios.error):
                pass
        return self

    def __exit__(self, *exc):
        for fd, mode in self.saved:
            try:
                termios.tcsetattr(fd, termios.TCSANOW, mode)
            except (OSError, termios.error):
                pass


def run_cli(paths, backend=None, timeout=None, args=(), compiler_args=(), profile=False,
            check=False, outdir=None):
    """`python -m tiledmm run`: the program (one file, or several: a path or a list of paths)
    on the terminal's stdin, stdout and stderr; returns the exit code a shell would give (128 +
    the signal for a signal). The files the program writes in its working folder are written
    back beside its first file, or into `outdir`. With profile (emu), the launches' counted
    traffic and predicted H100 times follow on stderr."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    backend = backend or get_backend()
    if profile and backend != "emu":
        print("tiledmm: run --profile counts traffic on the emulator only (--backend emu)",
              file=sys.stderr)
        return 2
    for path in paths:
        if not os.path.isfile(path):
            print(f"tiledmm: no program file {path!r}", file=sys.stderr)
            return 2
    if outdir is not None and not os.path.isdir(outdir):
        print(f"tiledmm: --outdir {outdir!r} is not a folder", file=sys.stderr)
        return 2
    # the folders nvcc's host compiler searches after the -I ones, from the terminal's
    # environment (the compile child gets none of it)
    compiler_args = [*compiler_args, *(f"-I{d}" for v in ("CPATH", "CPLUS_INCLUDE_PATH")
                                       for d in os.environ.get(v, "").split(os.pathsep) if d)]
    try:
        check_options(check, profile, backend)
        source, name, folder, others, compiler_args = read_sources(
            [os.path.abspath(p) for p in paths] if len(paths) > 1 else os.path.abspath(paths[0]),
            compiler_args)
        image, meta, _origin = build(source, name, backend, compiler_args, folder,
                                     profile=profile, extra_sources=others,
                                     check=check and backend == "emu")
    except CompileError as exc:
        print(exc.log or str(exc), file=sys.stderr)
        return 1
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"tiledmm: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    if check and backend == "cuda":
        res = run_sanitized(image, name, args, None, timeout, capture=False)
        sys.stderr.write(res.stderr)
        return res.returncode if res.returncode >= 0 else 128 - res.returncode
    with _terminal_kept():
        done, records, extra, files = execute(image, name, backend, args, None, timeout,
                                              capture=False, folder=folder)
    # the program's sources are never overwritten: the files beside it that it may include
    _written, refused = workdir.write_back(files, outdir or folder,
                                           protected=set(_program_files(folder)) | {
                                               os.path.basename(p) for p in paths})
    for line in ([meta["note"]] if meta.get("note") else []) + extra + refused:
        print(line, file=sys.stderr)
    if profile:
        table = ProgramResult("", "", done.returncode, done.timed_out,
                              launches(records, backend, meta.get("paths")), backend)
        print(repr(table).split("\n", 1)[-1], file=sys.stderr)
    return done.returncode if done.returncode >= 0 else 128 - done.returncode


# ---------------------------------------------------------------------------------------------
# check mode's emulator build (check=True on cuda: programs/sanitize.py)

def _with_check_flags(compile_cmd, check):
    """The emulator's compile command for check mode: the kernels' pointer parameters checked
    (tiledmm_kernel.h, TM_CHECK), the runtime's host-side checks on (TM_PROG_CHECK)."""
    return [*compile_cmd, "-DTM_CHECK", "-DTM_PROG_CHECK"] if check else compile_cmd
