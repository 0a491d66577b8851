"""Building a whole CUDA program (tm.run), inside the confined compile child.

tiledmm/programs/run.py writes a request (JSON) into the child's scratch folder and runs
`main([request])` through tiledmm.confine.sandbox.run_python with a compile policy. Here the
program's launches are read and rewritten by tiledmm/programs/launch_rewrite.py (libclang, the
emulator compile's own headers) into

    tm_prog::config("k", "param,names", __FILE__, __LINE__, k, grid, block, shared, stream)(args)

whose call operator takes the kernel's own parameter types (so arguments convert, or fail to,
as nvcc's launch would). On emu tm_prog::config is emu/program_runtime.h's emulated launch;
on cuda it is tiledmm/native/tiledmm_program_cuda.h's real launch between two CUDA events.
Then g++ (emu) or nvcc (cuda) builds the program as a shared object that tiledmm/programs/main.py
loads and whose `main` it calls. The answer is JSON (result.json), never anything executable.

On emu (plain builds: not check mode, not profile mode) each kernel of the program's file that
the barrier transform applies to (tiledmm/toolchain/split/transform.py, issue 34) gets its split
twin after its definition. A plain kernel's split is registered with the runtime by the
kernel's address as the program loads (tm_prog::register_split), so every launch of it finds
it; a template kernel gets a pair `tm_with_split_<k>` (emu/cuda_emu.h's tm_emu_split_kernel, a
variable template) that its launches pass instead of `k<...>`. The launch (emu/program_runtime.h)
runs as thread loops when the block's per-thread arrays fit, else on fibers. A kernel the transform
refuses, or a build where the split text does not compile (built again without it), keeps the
fibers; the answer says why per kernel ("paths").
"""
import json
import os
import re
import subprocess

from .._emu_build import COMPILER_RUN_SECONDS
from ..toolchain.split import transform as barrier_split
from . import launch_rewrite
from ..toolchain.check_rewrite import checked_casts, checked_shared
from .launch_rewrite import EditedFile, ParseError
from ..toolchain.diagnostics import SOURCE_NAME as SPLIT_SOURCE_NAME
from ..toolchain.compile_emu import PROGRAM_PRELUDE, PROGRAM_PRELUDE_HEADER
from ..toolchain.source import EMU_DIALECT_HINT, emu_dialect
from .workdir import HEADER_ENDINGS, HOST_ENDINGS

class BuildError(Exception):
    """A program that cannot be built: the message is the compiler's (or the parse's) log."""


def rewrite_launches(source, source_name, scratch, includes, defines=(), user_includes=(),
                     check=False, split=None, folder=None, headers=None, emu=False, pch=None):
    """launch_rewrite.rewrite_launches, with the file's kernels split at their barriers where
    `split` (emu plain and profile builds) is {"define_lines": [...], "paths": {}, "profile":
    bool}: the kernels get their split twins (module docstring), "paths" is filled with kernel
    -> why it keeps the fibers ("" for a kernel split; a template's instances that keep them)
    and "split" with the kernels split."""
    split_kernels = None
    if split is not None:
        def split_kernels(ci, tu, path):
            splits = _split_kernels(ci, tu, path, source, source_name, scratch, includes,
                                    split["define_lines"], split["paths"], split["profile"],
                                    split.get("exclude", ()))
            split.setdefault("split", []).extend(sorted(splits))
            return splits
    return launch_rewrite.rewrite_launches(source, source_name, scratch, includes, defines,
                                           user_includes, check=check,
                                           split_kernels=split_kernels, folder=folder,
                                           headers=headers, emu=emu, pch=pch)


# ---- kernels split at their barriers (issue 34) ----

# Folders whose headers are tiledmm's, the compiler's or the system's: what a program's kernels
# reach there neither synchronises nor reads threadIdx (the stand-ins are empty).
_SYSTEM_ROOTS = ("/usr/include/", "/usr/lib/", "/usr/local/include/", "/usr/share/")


def _split_kernels(ci, tu, path, source, source_name, scratch, includes, define_lines, paths,
                   profile, exclude=()):
    """{kernel: (offset just past its definition, the text inserted there, whether a template)}
    for the kernels of this file that the transform splits; every kernel of the file gets its
    reason in `paths` ("" when split). profile: profile mode's build (split_kernel(profile=True),
    as in tm.compile). The transform (barrier_split.split_kernel) reads this file alone,
    without its headers; the real parse here (headers read) refuses first the kernels that
    reach into the program's own headers (_split_guard). `exclude`: kernels whose split did not
    compile in an earlier try (build)."""
    trusted = tuple(os.path.join(os.path.realpath(d), "") for d in
                    [*includes, launch_rewrite.gcc_include() or "/usr"]) \
        + _SYSTEM_ROOTS
    users = _users_header(path, trusted, launch_rewrite.PRELUDE_PATH)
    constants = _header_constants(ci, tu, users)
    typedefs = _header_typedefs(ci, tu, users)
    define_lines = [*define_lines, *(f"#define {k} {v}" for k, v in constants.items()),
                    *typedefs.values()]
    kernels = {}

    def find(cursor=None):   # this file's kernel definitions (None: the translation unit's;
        # the headers' declarations not walked)
        for c, name in launch_rewrite.children(tu, cursor):
            if name != path:
                continue
            if c.kind in (ci.CursorKind.NAMESPACE, ci.CursorKind.LINKAGE_SPEC,
                          ci.CursorKind.UNEXPOSED_DECL):
                find(c)
            elif c.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE) and \
                    c.is_definition() and \
                    any(k.kind == ci.CursorKind.CUDAGLOBAL_ATTR for k in c.get_children()):
                kernels.setdefault(c.spelling, []).append(c)
    find()
    out = {}
    for name, defs in kernels.items():
        try:
            if len(defs) != 1:
                raise _NoSplit("several kernels of this name")
            if name in exclude:
                raise _NoSplit(_SPLIT_DID_NOT_COMPILE)
            if defs[0].semantic_parent is None or defs[0].semantic_parent.kind not in (
                    ci.CursorKind.TRANSLATION_UNIT, ci.CursorKind.LINKAGE_SPEC):
                raise _NoSplit("a kernel in a namespace")
            _split_guard(ci, tu, defs[0], path, users, constants, typedefs)
            plan = barrier_split.split_kernel(source, name, define_lines, templates=True,
                                              profile=profile)
            if plan.text is None:
                raise _NoSplit(plan.reason)
            out[name] = (plan.end, _split_text(plan, name, source, source_name),
                         bool(plan.template_args))
            # "" (split), or which instances of a template keep the fibers (fiber_guard)
            paths[name] = barrier_split.guarded_reason(plan)
        except _NoSplit as exc:
            paths[name] = str(exc) or "refused by the transform"
        except Exception as exc:   # the transform failing here: fibers, never a failed build
            paths[name] = f"the transform failed ({type(exc).__name__}: {str(exc)[:200]})"
    return out


class _NoSplit(Exception):
    """This kernel keeps its fibers; the message says why."""


def _users_header(path, trusted, prelude):
    """name -> whether the file of this name (as the parse spells it; None for none) is a
    header of the program's own (not the program's file, nor tiledmm's, the compiler's or the
    system's)."""
    known = {}

    def users(name):
        if name is None or name == path:
            return False
        if name not in known:
            real = os.path.realpath(name)
            known[name] = not real.startswith(trusted) and real != prelude
        return known[name]
    return users


def _header_constants(ci, tu, users):
    """{name: replacement} of the program's headers' object-like macros that are plain constants
    (`#define TILE 16`: literals and operators only), defined once: the transform, which reads
    the .cu alone, gets them as definitions (a kernel's `As[TILE][TILE]`)."""
    found, twice = {}, set()
    for c, name in launch_rewrite.top_level(tu):
        if c.kind != ci.CursorKind.MACRO_DEFINITION:
            continue
        if c.spelling in found:
            twice.add(c.spelling)
        if not users(name):
            found.setdefault(c.spelling, None)   # defined elsewhere too: not taken
            continue
        name, *toks = list(c.get_tokens())
        if toks and toks[0].spelling == "(" and \
                toks[0].extent.start.offset == name.extent.end.offset:   # F(x): function-like
            found.setdefault(c.spelling, None)
            continue
        if toks and all(t.kind in (ci.TokenKind.LITERAL, ci.TokenKind.PUNCTUATION) for t in toks) \
                and not any(t.spelling in ("#", "##", "\\") for t in toks):
            found.setdefault(c.spelling, " ".join(t.spelling for t in toks))
        else:
            found.setdefault(c.spelling, None)
    return {k: v for k, v in found.items() if v is not None and k not in twice}


# The canonical types a header's typedef may name for the transform to be given it as text
_PLAIN_TYPES = ("BOOL", "CHAR_U", "UCHAR", "USHORT", "UINT", "ULONG", "ULONGLONG", "CHAR_S",
                "SCHAR", "SHORT", "INT", "LONG", "LONGLONG", "FLOAT", "DOUBLE", "LONGDOUBLE")


def _header_typedefs(ci, tu, users):
    """{name: its typedef's text} of the program's headers' typedefs of plain arithmetic types
    (`typedef unsigned int uint;`, NVIDIA's scan_common.h), where every typedef of the name
    agrees (glibc's <sys/types.h> has the same `uint`): the transform, which reads the .cu
    alone, gets them before it as it gets the headers' constants."""
    found, meanings = {}, {}
    for c, name in launch_rewrite.top_level(tu):
        if c.kind != ci.CursorKind.TYPEDEF_DECL:
            continue
        under = c.underlying_typedef_type.get_canonical()
        meanings.setdefault(c.spelling, set()).add(under.spelling)
        if users(name) and under.kind.name in _PLAIN_TYPES:
            found[c.spelling] = f"typedef {under.spelling} {c.spelling};"
    return {k: v for k, v in found.items() if len(meanings[k]) == 1}


def _split_guard(ci, tu, kernel, path, users, constants, typedefs):
    """Raises _NoSplit when the kernel, or a function of this file it calls, uses anything (a
    function, a variable, a type, a macro other than a plain constant) from the program's own
    headers: the transform does not read them, so a helper there could synchronise or read
    threadIdx unseen."""
    def ours(f):
        return f is not None and f.name == path

    todo, done, extents = [kernel], set(), []
    while todo:
        fn = todo.pop()
        if fn.hash in done:
            continue
        done.add(fn.hash)
        extents.append((fn.extent.start.offset, fn.extent.end.offset))
        for c in fn.walk_preorder():
            ref = c.referenced if c.kind.is_reference() or c.kind.is_expression() else None
            if ref is None or ref.location is None:
                continue
            if ref.kind == ci.CursorKind.TYPEDEF_DECL and ref.spelling in typedefs:
                continue   # given to the transform (_header_typedefs)
            if users(launch_rewrite.file_name(ref)):
                raise _NoSplit(f"it uses {ref.spelling or 'a name'} from the header "
                               f"{os.path.basename(ref.location.file.name)}, which the "
                               "transform does not read")
            if c.kind == ci.CursorKind.CALL_EXPR and ref.kind in (
                    ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE):
                d = ref.get_definition()
                if d is not None and ours(d.location.file):
                    todo.append(d)
    for c, name in launch_rewrite.top_level(tu):
        if c.kind != ci.CursorKind.MACRO_INSTANTIATION or name != path:
            continue
        at = c.location.offset
        if any(a <= at < b for a, b in extents):
            d = c.referenced
            if d is not None and users(launch_rewrite.file_name(d)) and c.spelling not in constants:
                raise _NoSplit(f"it uses the macro {c.spelling} from the header "
                               f"{os.path.basename(d.location.file.name)}, which the transform "
                               "does not read")


def _split_text(plan, name, source, source_name):
    """What follows the kernel's definition: its split (barrier_split's text, its `#line`s
    naming the program's file), its registration (a plain kernel) or the pair its launches pass
    (a template), and a `#line` back to the file."""
    text = plan.text.replace(f'"{SPLIT_SOURCE_NAME}"', f'"{source_name}"')
    a = plan.template_args
    if a:   # a template kernel: the pair as a variable template, one per instance (the
        # instances plan.fiber_guard names: the kernel itself, fibers), as the registry's
        pair = barrier_split.template_pair(plan, name)
    else:   # registered with the runtime when the program loads: found from the kernel's
        # address at every launch (declared before, launched from another file, through a
        # pointer). The split's type is the kernel's (its parameters as written): the cast to it
        # picks the kernel where its name is also a libc function's (`select`).
        pair = (f"static const bool tm_split_registered_{name} = tm_prog::register_split("
                f"reinterpret_cast<const void *>(static_cast<decltype(&tm_split_{name})>("
                f"&{name})), "
                f"reinterpret_cast<void (*)()>(&tm_split_{name}), tm_split_frame_{name});")
    line = source.encode().count(b"\n", 0, plan.end) + 1
    return f"\n{text}\n{pair}\n#line {line} \"{source_name}\"\n"


def _unsupported_note(log):
    """g++'s "'cudaX' was not declared" for a runtime call the emulator lacks, said plainly."""
    names = sorted(set(re.findall(r"'(cuda\w+|cu[A-Z]\w+)' was not declared", log)))
    return "".join(f"tiledmm: {n} is not part of the CUDA runtime API that the emulator supports "
                   f"(docs/programs.md lists what is); run the program with backend=\"cuda\" on a "
                   f"GPU, or do without it\n" for n in names)


def _compile(cmd, cwd):
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=COMPILER_RUN_SECONDS, cwd=cwd,
                              env=dict(os.environ, LC_ALL="C"))   # plain quotes in messages
    except FileNotFoundError:
        raise BuildError(f"the compiler '{cmd[0]}' was not found") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"the compiler ran for more than {COMPILER_RUN_SECONDS} s") from None
    return proc.returncode, (proc.stdout + proc.stderr).decode(errors="replace")


# A split build that g++ rejects is built again without the splits: the transform's fault.
_SPLIT_DID_NOT_COMPILE = ("the split kernels did not compile (tiledmm's transform: please "
                          "report it)")


def _split_request(req):
    """rewrite_launches' `split` argument for this build: None where the kernels keep their
    fibers (cuda, check mode: the caller's "no_split" reason)."""
    if req["backend"] != "emu" or req.get("no_split"):
        return None
    # the kernels as the program's compile sees them (program_runtime.h's __CUDA_ARCH__)
    return {"define_lines": ["#define __CUDA_ARCH__ 900", *req["define_lines"]], "paths": {},
            "profile": bool(req.get("profile"))}


def build(req):
    """The program built (result.json's answer); with splits where the transform applies. When
    that build fails in the splits of some kernels (the compiler's log names their tm_split_
    functions), once more without those; failing again, or elsewhere, once more without any
    (a program that does not compile fails there with the compiler's own log)."""
    split = _split_request(req)
    if split is None:
        result = _build(req, None)
        reason = req.get("no_split") or "not the emulator"
        result["paths"] = {ln["kernel"]: reason for ln in result["launches"]}
        return result
    try:
        result = _build(req, split)
    except BuildError as exc:
        if not split.get("split"):
            raise
        failed = set(re.findall(r"\btm_split_(\w+)", str(exc))) & set(split["split"])
        result = None
        if failed:
            retry = {**_split_request(req), "exclude": failed}
            try:
                result = _build(req, retry)
                split = retry
            except BuildError:
                pass
        if result is None:
            result = _build(req, None)
            split["paths"] = {k: _SPLIT_DID_NOT_COMPILE if k in split["split"] else v
                              for k, v in split["paths"].items()}
    result["paths"] = dict(split["paths"])
    for ln in result["launches"]:   # launched here, defined in a header or another file
        result["paths"].setdefault(ln["kernel"], "not defined in the file that launches it")
    return result


_HEADER_MOST = 1 << 20   # the most of one header read


def _own_headers(req):
    """{real path: EditedFile} of the program's own headers: the header files beside it, as the
    caller listed them (this child may read them, not list their folder)."""
    out = {}
    for path in req.get("program_files", ()):
        if not path.endswith(HEADER_ENDINGS):
            continue
        try:
            with open(path, "rb") as f:
                out[os.path.realpath(path)] = EditedFile(f.read(_HEADER_MOST))
        except OSError:
            continue
    return out


def _iquote(backend, folder):
    """The flags that search `folder` first for quoted includes (nvcc takes -iquote through to
    its preprocessor, the host compiler)."""
    if backend == "emu":
        return ["-iquote", folder]
    return ["-Xcompiler", "-iquote", "-Xcompiler", folder]


def _mirrored_headers(req, headers):
    """The program's own headers as the compile sees them: copies in a folder searched first,
    each with a #line back to its own file, their launches rewritten (`headers`, filled by
    rewrite_launches) and, on emu, in the emulator's dialect (emu_dialect, as the program's
    files get it). Every own header is copied, so that each include of a rewritten one, from
    the program or from another of its headers, resolves to the copy (include guards and
    `#pragma once` differ by path). On emu, the -I folders' headers that emu_dialect changes
    (`extern __shared__` arrays, `__shared__ alignas`, inline PTX) are copied too, in the dialect. The flags that put the folder first ([]
    where nothing is copied)."""
    out = os.path.join(req["scratch"], "tm-headers")
    emu = req["backend"] == "emu"
    copies = {}
    for real, edited in headers.items():
        text = edited.apply().decode(errors="replace")
        copies.setdefault(os.path.basename(real), (real, emu_dialect(text) if emu else text))
    for flag in req.get("user_includes", ()) if emu else ():
        folder = flag[2:] if flag.startswith("-I") else flag
        try:
            names = sorted(os.listdir(folder))[:500]
        except OSError:
            continue
        for n in names:
            path = os.path.join(folder, n)
            if not n.endswith(HEADER_ENDINGS) or n in copies or not os.path.isfile(path):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read(_HEADER_MOST)
            except OSError:
                continue
            if EMU_DIALECT_HINT.search(text) and emu_dialect(text) != text:
                copies[n] = (path, emu_dialect(text))
    if not copies:
        return []
    os.makedirs(out, exist_ok=True)
    for n, (path, text) in copies.items():
        with open(os.path.join(out, n), "w") as f:
            f.write(f'#line 1 "{path}"\n{text}')
    return [*_iquote(req["backend"], out), f"-I{out}"]


_NOT_TIMED = ("tiledmm: the program is built as nvcc builds it, its launches not timed "
              "(tiledmm's parse could not read them: {why})\n")


def _translation_unit(text, name, backend, define_lines, first, precompiled=False):
    """The text the compiler sees for one of the program's files (its launches rewritten).
    precompiled (emu): the prelude through its header, which compile_emu.prelude_pch
    precompiled (a later file of the program defines a macro first: g++ reads the header)."""
    once = "" if first else "#define TM_PROG_NOT_FIRST_FILE 1\n"
    if backend == "emu" and name.endswith(HOST_ENDINGS):   # nvcc gives it to g++ as it is
        once += "#define TM_PROG_HOST_FILE 1\n"
    if backend == "emu":
        prelude = f'#include "{PROGRAM_PRELUDE_HEADER}"\n' if precompiled else PROGRAM_PRELUDE
        return once + prelude + define_lines + f'#line 1 "{name}"\n{text}\n'
    return (once + '#include "tiledmm_program_cuda.h"\n' + define_lines +
            f'#line 1 "{name}"\n{text}\n')


def _read_units(req, split):
    """[(text to compile, the name messages use, its original folder)] for every file of the
    program (the first is the program's file), its launches, and the flags for its own headers'
    copies. On cuda a program the parse cannot read is built as nvcc builds it (launches [],
    a note in its log)."""
    units = [(req["source_path"], req["source_name"], req["source_dir"])] + \
        [tuple(u) for u in req.get("extra_sources", ())]
    check = bool(req.get("check")) and req["backend"] == "emu"
    headers = _own_headers(req)
    out, launches = [], []
    try:
        for i, (path, name, folder) in enumerate(units):
            with open(path, encoding="utf-8", errors="replace") as f:
                text, found = rewrite_launches(
                    f.read(), name, req["scratch"], req["parse_includes"], req["defines"],
                    req["user_includes"], check=check, split=split, folder=folder,
                    headers=headers, emu=req["backend"] == "emu", pch=req.get("parse_pch"))
            if check:   # shared arrays race-checked, casts of checked pointers kept checked
                text = checked_shared(checked_casts(text))
            launches += [dict(ln, file=ln.get("file", name)) if i else ln for ln in found]
            out.append((text, name, folder))
    except ParseError as exc:
        if req["backend"] != "cuda":
            raise
        note = _NOT_TIMED.format(why=str(exc).splitlines()[0])
        units_read = []
        for path, name, folder in units:
            with open(path, encoding="utf-8", errors="replace") as f:
                units_read.append((f.read(), name, folder))
        return units_read, [], [], note
    return out, launches, _mirrored_headers(req, headers), ""


def _build(req, split):
    scratch, backend = req["scratch"], req["backend"]
    units, launches, mirror, note = _read_units(req, split)
    prelude = req.get("prelude") if backend == "emu" else None   # compile_emu.prelude_pch
    compile_cmd = [req["compile"][0], *([f"-I{prelude}"] if prelude else []), *mirror,
                   *req["compile"][1:]]
    define_lines = "".join(d + "\n" for d in req["define_lines"])
    sources = []
    for i, (text, name, folder) in enumerate(units):
        if backend == "emu":
            text = emu_dialect(text)
        base = ("program" if backend == "emu" else "program_build") if i == 0 else f"program_{i}"
        host = backend == "cuda" and name.endswith(HOST_ENDINGS)
        src = os.path.join(scratch, base + (".cpp" if backend == "emu" or host else ".cu"))
        with open(src, "w") as f:
            f.write(_translation_unit(text, name, backend, define_lines, first=i == 0,
                                      precompiled=bool(prelude)))
        sources.append((src, folder, host))
    out = os.path.join(scratch, "program.so")
    if len(sources) > 1:   # a program of several files: each compiled, then linked
        result = _build_several(req, compile_cmd, sources, out)
    elif req.get("link_cmd"):   # compiled, then linked apart (profile mode: see _compile_emu)
        src, folder, _ = sources[0]
        obj = os.path.join(scratch, "program.o")
        returncode, log = _compile([*compile_cmd, *_iquote(backend, folder), src, "-o", obj],
                                   scratch)
        if returncode == 0:
            returncode, link_log = _compile([*req["link_cmd"], "-o", out, obj, *req["link"]],
                                            scratch)
            log += link_log
        if returncode != 0 or not os.path.exists(out):
            raise BuildError(_unsupported_note(log) + log)
        result = {"ok": True, "log": log, "so": out}
    else:
        src, folder, host = sources[0]
        returncode, log = _compile([*_as_host(compile_cmd, host), *_iquote(backend, folder), src,
                                    "-o", out,
                                    *req["link"]], scratch)
        if returncode != 0 or not os.path.exists(out):
            raise BuildError(_unsupported_note(log) + log)
        result = {"ok": True, "log": log, "so": out}
    result["log"] = note + result["log"]
    result["launches"] = launches
    if note:
        result["note"] = note.strip()
    return result


def _as_host(compile_cmd, host):
    """nvcc's command for one of the program's files: a host file (.cpp, .c, ...) is C++ for the
    host compiler, as nvcc takes it (`-x c++`, no __CUDACC__: CUDA's device functions such as
    umin are not declared there), a .cu file CUDA (`-x cu`)."""
    if not host:
        return compile_cmd
    return [("c++" if i and compile_cmd[i - 1] == "-x" else a) for i, a in enumerate(compile_cmd)]


def _build_several(req, compile_cmd, sources, out):
    """A program of several files (tm.run of a list or a folder, %cuda_group_run): each
    compiled to an object with the program's compile command (its own folder first for its
    quoted includes, as nvcc), and the objects linked into one shared object (the runner's
    entry points in the first)."""
    scratch, backend = req["scratch"], req["backend"]
    log, objects = "", []
    compile_cmd = [a for a in compile_cmd if a != "-shared"]
    for src, folder, host in sources:
        obj = os.path.splitext(src)[0] + ".o"
        returncode, step = _compile([*_as_host(compile_cmd, host), *_iquote(backend, folder), "-c",
                                     src, "-o", obj], scratch)
        log += step
        if returncode != 0:
            raise BuildError(_unsupported_note(log) + log)
        objects.append(obj)
    link_cmd = req.get("link_cmd") or req["compile"]
    if backend == "cuda":   # nvcc links objects: not "-x cu" (that reads them as CUDA source)
        link_cmd = [a for i, a in enumerate(link_cmd)
                    if not (a == "-x" or (i and link_cmd[i - 1] == "-x"))]
    else:                   # g++: the objects as objects, not C++ (the compile's "-x c++")
        objects = ["-x", "none", *objects]
    returncode, step = _compile([*link_cmd, "-o", out, *objects, *req["link"]], scratch)
    log += step
    if returncode != 0 or not os.path.exists(out):
        raise BuildError(_unsupported_note(log) + log)
    return {"ok": True, "log": log, "so": out}


def main(args):
    request_path, = args
    with open(request_path) as f:
        req = json.load(f)
    try:
        result = build(req)
    except (BuildError, ParseError) as exc:
        result = {"ok": False, "log": str(exc)}
    except ImportError as exc:
        result = {"ok": False, "log": f"libclang is needed to read a program's launches: {exc} "
                                      "(pip install libclang)"}
    with open(os.path.join(req["scratch"], "result.json"), "w") as f:
        json.dump(result, f)
    return 0
