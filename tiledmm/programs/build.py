"""Building a whole CUDA program (tm.run), inside the confined compile child.

tiledmm/programs/run.py writes a request (JSON) into the child's scratch folder and runs
`main([request])` through tiledmm.confine.sandbox.run_python with a compile policy. Here the student's
source is parsed by libclang as CUDA (`-x cuda --cuda-host-only -nocudainc -nocudalib`, with a
small prelude that declares what clang expects of a CUDA installation); every launch
`k<<<grid, block, shared, stream>>>(args)` shows up as a CALL_EXPR whose second child is the
call of `__cudaPushCallConfiguration`, and is rewritten in place, on the same lines, into

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
import ctypes
import json
import os
import re
import subprocess

from .._emu_build import COMPILER_RUN_SECONDS
from ..toolchain.split import transform as barrier_split
from ..toolchain.check_rewrite import checked_casts, checked_shared
from ..toolchain.diagnostics import SOURCE_NAME as SPLIT_SOURCE_NAME
from ..toolchain.source import emu_dialect


# The parse sees the compile's own headers (tiledmm's prelude, the emulator's runtime and its
# stand-ins for the toolkit's headers, the program's -I folders), as CUDA to clang: the
# qualifiers become clang's CUDA attributes again after them, and the built-in variables
# declarations (the emulator spells them as macros; a host variable may take their names). The
# headers are declared __host__ __device__ (clang's pragma), so device code may call what they
# declare; <new> and <exception> come first (their host-only declarations cannot be made so).
PARSE_PRELUDE = """\
#include <new>
#include <exception>
#pragma clang force_cuda_host_device begin
#include "tiledmm_kernel.h"
#include "emu/program_runtime.h"
#include "cooperative_groups.h"
#include "cooperative_groups/reduce.h"
#include "cuda_fp16.h"
#include "mma.h"
#pragma clang force_cuda_host_device end
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
extern "C" unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared = 0,
                                                void *stream = 0);
extern const __device__ uint3 threadIdx, blockIdx;
extern const __device__ dim3 blockDim, gridDim;
"""


class BuildError(Exception):
    """A program that cannot be built: the message is the compiler's (or the parse's) log."""


class ParseError(BuildError):
    """The parse could not read every launch (or a header it needs is missing): on cuda the
    program is built as nvcc builds it, without per-launch timing (build)."""


def _gcc_include():
    """The compiler's own headers (stddef.h, ...): the libclang wheel ships none."""
    try:
        out = subprocess.run(["gcc", "-print-file-name=include"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
        return out if out and os.path.isdir(out) else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _parse_args(scratch, includes, defines, user_includes, folder):
    """clang's arguments: the compile's headers (`includes`: tiledmm/native and its user/
    stand-ins, as -isystem, as g++ gets them), no error limit (past clang's default 20 errors
    the parse turns fatal and stops instantiating templates, whose launches then vanish), the
    file's own folder first for its quoted includes (as nvcc)."""
    prelude = os.path.join(scratch, "parse-prelude.h")
    if not os.path.exists(prelude):
        with open(prelude, "w") as f:
            f.write(PARSE_PRELUDE)
    args = ["-x", "cuda", "--cuda-host-only", "-nocudainc", "-nocudalib", "-std=c++17",
            "-ferror-limit=0", "-Wno-unknown-cuda-version", "-DTM_EMU",
            *[f"-isystem{d}" for d in includes], "-iquote", folder, *user_includes, *defines]
    gcc = _gcc_include()
    if gcc:
        args += ["-isystem", gcc]
    return args + ["-include", prelude]


_FILE_LOCATION = []


def _file_location(ci, loc):
    """(the file's real path or None, offset) where a location was written: for a token of a
    macro's argument, where the argument was written (clang_getFileLocation; the Python
    binding's location is the macro's expansion)."""
    if not _FILE_LOCATION:
        fn = ci.conf.lib.clang_getFileLocation
        fn.argtypes = [ci.SourceLocation, ctypes.POINTER(ci.c_object_p),
                       ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                       ctypes.POINTER(ctypes.c_uint)]
        fn.restype = None
        _FILE_LOCATION.append(fn)
    f, line, col, offset = ci.c_object_p(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    _FILE_LOCATION[0](loc, ctypes.byref(f), ctypes.byref(line), ctypes.byref(col),
                      ctypes.byref(offset))
    if not f:
        return None, offset.value
    return os.path.realpath(ci.File(f).name), offset.value


def _parse_problem(tu, source_name, path):
    """A fatal problem of the parse (a header not found), said as what it is; None if none."""
    for d in tu.diagnostics:
        if d.severity < 4 or d.location.file is None:
            continue
        m = re.match(r"'(.+)' file not found", d.spelling)
        where = (source_name if d.location.file.name == path else
                 os.path.basename(d.location.file.name)) + f":{d.location.line}"
        if m:
            return (f"{where}: fatal error: {m.group(1)}: no such header where tiledmm looks "
                    f"(the program's folder, its -I folders, and tiledmm's stand-ins for the "
                    f"CUDA toolkit's headers, tiledmm/native/user: docs/programs.md lists "
                    f"them)")
        return f"{where}: fatal error: {d.spelling}"
    return None


def _default_arguments(ci, kernel):
    """The source text of each parameter's default argument of a kernel's declaration (None
    for a parameter without one)."""
    out = []
    for p in kernel.get_children():
        if p.kind != ci.CursorKind.PARM_DECL:
            continue
        toks = [t.spelling for t in p.get_tokens()]
        out.append(" ".join(toks[toks.index("=") + 1:]) if "=" in toks else None)
    return out


class _Edited:
    """One file's text and the edits made to it (offset, length replaced, text)."""

    def __init__(self, data):
        self.data, self.edits, self.seen = data, [], set()

    def apply(self):
        out = self.data
        # from the end; at one offset a replacement (`<<<`) before an insertion
        for offset, length, text in sorted(self.edits, key=lambda e: (e[0], e[1]),
                                           reverse=True):
            out = out[:offset] + text + out[offset + length:]
        return out


def rewrite_launches(source, source_name, scratch, includes, defines=(), user_includes=(),
                     check=False, split=None, folder=None, headers=None):
    """(the source with every launch rewritten on its own lines, the launches found: a list of
    {"kernel", "params", "line"} and "file" for a launch in a header). Raises ParseError for a
    `<<<` the parse could not read, or a header it could not find. folder: the program file's
    own folder (its quoted includes, first). headers: {real path: _Edited} of the program's own
    headers, whose launches are rewritten too (their edits added there; build writes the
    copies). A launch inside a macro's argument is rewritten where it was written; a launch
    that leaves out default arguments gets them written out (the launch's call operator takes
    every parameter). split (emu plain and profile builds): None, or {"define_lines": [...],
    "paths": {}, "profile": bool}: the file's kernels get their split twins (module docstring),
    "paths" is filled with kernel -> why it keeps the fibers ("" for a kernel split; a
    template's instances that keep them) and "split" with the kernels split."""
    import clang.cindex as ci
    data = source.encode()
    path = os.path.join(scratch, source_name)
    with open(path, "wb") as f:
        f.write(data)
    headers = {} if headers is None else headers
    files = {os.path.realpath(path): _Edited(data), **headers}
    main = files[os.path.realpath(path)]
    # the detailed record (macro expansions) only where the kernels are split (_split_guard)
    options = ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD if split is not None else 0
    tu = ci.Index.create().parse(path, args=_parse_args(scratch, includes, defines, user_includes,
                                                        folder or scratch),
                                 options=options)
    problem = _parse_problem(tu, source_name, path)
    if problem:
        raise ParseError(problem)
    launches = []
    # the parameter names and default arguments of every kernel (templates too), for launches
    # in templates
    kernel_params, kernel_defaults = {}, {}
    for c in _cursors_in(tu, files):
        if c.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE) and \
                any(k.kind == ci.CursorKind.CUDAGLOBAL_ATTR for k in c.get_children()):
            kernel_params.setdefault(c.spelling, [k.spelling for k in c.get_children()
                                                  if k.kind == ci.CursorKind.PARM_DECL])
            kernel_defaults.setdefault(c.spelling, _default_arguments(ci, c))
    template_splits = set()   # template kernels split here: their launches name the pair
    if split is not None:
        splits = _split_kernels(ci, tu, path, source, source_name, scratch, includes,
                                split["define_lines"], split["paths"], split["profile"])
        main.edits.extend((end, 0, text.encode()) for end, text, _template in splits.values())
        template_splits = {k for k, (_e, _t, template) in splits.items() if template}
        split["split"] = sorted(splits)

    def visit(cursor):
        for child in cursor.get_children():
            loc = child.location
            if loc.file is not None and os.path.realpath(loc.file.name) not in files:
                continue
            if child.kind == ci.CursorKind.CALL_EXPR:
                kids = list(child.get_children())
                if len(kids) >= 2 and kids[1].kind == ci.CursorKind.CALL_EXPR and \
                        kids[1].spelling in ("__cudaPushCallConfiguration", "cudaConfigureCall"):
                    _launch(child, kids[1], kids[2:])
            visit(child)

    def _launch(call, cfg, args):
        name, start = _file_location(ci, call.extent.start)
        _, end = _file_location(ci, call.extent.end)
        cname, c0 = _file_location(ci, cfg.extent.start)
        _, c1 = _file_location(ci, cfg.extent.end)
        target = files.get(name)
        if target is None or cname != name:
            return
        text = target.data
        if text[c0:c0 + 3] != b"<<<" or text[c1 - 3:c1] != b">>>" or c0 in target.seen or \
                text[end - 1:end] != b")":
            return   # inside a macro's own text: left for the check below
        ref = call.referenced
        kernel = ref.spelling if ref is not None else ""
        params = [a.spelling or f"#{i + 1}" for i, a in enumerate(ref.get_arguments())] \
            if ref is not None else []
        defaults = _default_arguments(ci, ref) if ref is not None else []
        if not kernel:   # a launch in a template: the kernel named by the call's first token
            first = next(iter(call.get_tokens()), None)
            kernel = first.spelling if first is not None else "?"
            params = kernel_params.get(kernel, [])
            defaults = kernel_defaults.get(kernel, [])
        target.seen.add(c0)
        head = f'tm_prog::config("{kernel}", "{",".join(params)}", __FILE__, __LINE__, '
        target.edits.extend([(start, 0, head.encode()), (c0, 3, b", "), (c1 - 3, 3, b")")])
        # the arguments written (a default argument's expression lies outside the call)
        written = sum(1 for a in args if start <= _file_location(ci, a.extent.start)[1] < end
                      and _file_location(ci, a.extent.start)[0] == name)
        missing = [d for d in defaults[written:]]
        if missing and all(d is not None for d in missing):
            target.edits.append((end - 1, 0, ("".join(
                (", " if written or i else "") + d for i, d in enumerate(missing))).encode()))
        if target is main and kernel in template_splits:   # an instance and its split, a pair
            named = _split_callee(ci, ref, text[start:c0], kernel)
            if named is not None:
                target.edits.append((start + named, len(kernel),
                                     f"tm_with_split_{kernel}".encode()))
        deduced = _deduced_template_arguments(ci, call, ref, text, start, c0)
        if deduced:   # kernel<<<...>>>(args) of a template: its arguments, as nvcc deduced them
            target.edits.append(deduced)
        found = {"kernel": kernel, "params": params, "line": text.count(b"\n", 0, start) + 1}
        if target is not main:
            found["file"] = os.path.basename(name)
        launches.append(found)

    visit(tu.cursor)
    main.edits.extend(_renamed_builtins(ci, tu, path, data))
    if check:
        main.edits.extend(_checked_param_edits(ci, tu, path, data))
    # every `<<<` of the file (and of the headers it included) must have been a launch read
    for real, edited in files.items():
        f = tu.get_file(real) if edited is main or _included(tu, real) else None
        if f is None:
            continue
        extent = ci.SourceRange.from_locations(ci.SourceLocation.from_offset(tu, f, 0),
                                               ci.SourceLocation.from_offset(
                                                   tu, f, len(edited.data)))
        for tok in tu.get_tokens(extent=extent):
            if tok.spelling != "<<<" or tok.extent.start.offset in edited.seen:
                continue
            line = tok.location.line
            shown = source_name if edited is main else os.path.basename(real)
            near = [d for d in tu.diagnostics if d.severity >= 3 and d.location.file is not None
                    and os.path.realpath(d.location.file.name) == real
                    and abs(d.location.line - line) <= 1]
            why = "\n".join(_clang_diag(d, shown) for d in near) or \
                "(a launch written inside a macro's own definition: write it in the code, " \
                "or pass it to the macro as an argument)"
            raise ParseError(f"{shown}:{line}: error: tiledmm could not read this kernel "
                             f"launch; write it as kernel<<<grid, block>>>(arguments);\n{why}")
    return main.apply().decode(), launches


def _cursors_in(tu, files):
    """The translation unit's cursors written in `files` (real paths), in preorder: the
    subtrees of every other file (tiledmm's headers, the system's) are not walked."""
    todo, real = list(reversed(list(tu.cursor.get_children()))), {}
    while todo:
        c = todo.pop()
        f = c.location.file
        if f is not None:
            if f.name not in real:
                real[f.name] = os.path.realpath(f.name) in files
            if not real[f.name]:
                continue
        yield c
        todo.extend(reversed(list(c.get_children())))


def _included(tu, real):
    """Whether the translation unit included the file at this real path."""
    return any(os.path.realpath(inc.include.name) == real for inc in tu.get_includes())


# ---- kernels split at their barriers (issue 34) ----

# Folders whose headers are tiledmm's, the compiler's or the system's: what a program's kernels
# reach there neither synchronises nor reads threadIdx (the stand-ins are empty).
_SYSTEM_ROOTS = ("/usr/include/", "/usr/lib/", "/usr/local/include/", "/usr/share/")


def _split_kernels(ci, tu, path, source, source_name, scratch, includes, define_lines, paths,
                   profile):
    """{kernel: (offset just past its definition, the text inserted there, whether a template)}
    for the kernels of this file that the transform splits; every kernel of the file gets its
    reason in `paths` ("" when split). profile: profile mode's build (split_kernel(profile=True),
    as in tm.compile). The transform (barrier_split.split_kernel) reads this file alone,
    without its headers; the real parse here (headers read) refuses first the kernels that
    reach into the program's own headers (_split_guard)."""
    trusted = tuple(os.path.join(os.path.realpath(d), "") for d in
                    [*includes, os.path.join(scratch, "parse-include"), _gcc_include() or "/usr"]) \
        + _SYSTEM_ROOTS
    users = _users_header(path, trusted, os.path.realpath(os.path.join(scratch, "parse-prelude.h")))
    constants = _header_constants(ci, tu, users)
    define_lines = [*define_lines, *(f"#define {k} {v}" for k, v in constants.items())]
    kernels = {}

    def find(cursor):   # this file's kernel definitions (the headers' declarations not walked)
        for c in cursor.get_children():
            if c.location.file is None or c.location.file.name != path:
                continue
            if c.kind in (ci.CursorKind.NAMESPACE, ci.CursorKind.LINKAGE_SPEC,
                          ci.CursorKind.UNEXPOSED_DECL):
                find(c)
            elif c.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE) and \
                    c.is_definition() and \
                    any(k.kind == ci.CursorKind.CUDAGLOBAL_ATTR for k in c.get_children()):
                kernels.setdefault(c.spelling, []).append(c)
    find(tu.cursor)
    out = {}
    for name, defs in kernels.items():
        try:
            if len(defs) != 1:
                raise _NoSplit("several kernels of this name")
            if defs[0].semantic_parent is None or defs[0].semantic_parent.kind not in (
                    ci.CursorKind.TRANSLATION_UNIT, ci.CursorKind.LINKAGE_SPEC):
                raise _NoSplit("a kernel in a namespace")
            _split_guard(ci, tu, defs[0], path, users, constants)
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
    """f -> whether the libclang File f is a header of the program's own (not the program's
    file, nor tiledmm's, the compiler's or the system's)."""
    def users(f):
        if f is None or f.name == path:
            return False
        real = os.path.realpath(f.name)
        return not real.startswith(trusted) and real != prelude
    return users


def _header_constants(ci, tu, users):
    """{name: replacement} of the program's headers' object-like macros that are plain constants
    (`#define TILE 16`: literals and operators only), defined once: the transform, which reads
    the .cu alone, gets them as definitions (a kernel's `As[TILE][TILE]`)."""
    found, twice = {}, set()
    for c in tu.cursor.get_children():
        if c.kind != ci.CursorKind.MACRO_DEFINITION:
            continue
        if c.spelling in found:
            twice.add(c.spelling)
        if not users(c.location.file):
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


def _split_guard(ci, tu, kernel, path, users, constants):
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
            if users(ref.location.file):
                raise _NoSplit(f"it uses {ref.spelling or 'a name'} from the header "
                               f"{os.path.basename(ref.location.file.name)}, which the "
                               "transform does not read")
            if c.kind == ci.CursorKind.CALL_EXPR and ref.kind in (
                    ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE):
                d = ref.get_definition()
                if d is not None and ours(d.location.file):
                    todo.append(d)
    for c in tu.cursor.get_children():
        if c.kind != ci.CursorKind.MACRO_INSTANTIATION or not ours(c.location.file):
            continue
        at = c.location.offset
        if any(a <= at < b for a, b in extents):
            d = c.referenced
            if d is not None and users(d.location.file) and c.spelling not in constants:
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


def _split_callee(ci, ref, callee, kernel):
    """Offset of the kernel's name in a launch's callee text (`k`, `::k`, `k<float, 16>`) where
    the launch names this file's top-level kernel; None otherwise (the launch keeps `k`)."""
    if ref is not None and (ref.semantic_parent is None or ref.semantic_parent.kind not in (
            ci.CursorKind.TRANSLATION_UNIT, ci.CursorKind.LINKAGE_SPEC)):
        return None
    m = re.match(rb"\s*(::\s*)?(" + re.escape(kernel.encode()) + rb")\s*(<.*>)?\s*$", callee,
                 re.S)
    return m.start(2) if m else None


# The emulator spells the built-in variables as macros (emu/cuda_emu.h); host code may
# name its own variables so (lecture 001's reduction loops declare `int blockDim`), as nvcc
# allows, so those declarations and their uses are renamed.
_BUILTIN_VARIABLES = ("threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize")
_DECLS = ("VAR_DECL", "PARM_DECL", "FIELD_DECL")
_REFS = ("DECL_REF_EXPR", "MEMBER_REF_EXPR")


def _renamed_builtins(ci, tu, path, data):
    """Edits renaming the program's own variables, parameters and fields named like a built-in
    variable (and every use of them) to tm_user_<name>."""
    kinds = {getattr(ci.CursorKind, k) for k in _DECLS + _REFS}
    decl_kinds = {getattr(ci.CursorKind, k) for k in _DECLS}
    edits, done = [], set()

    def ours(cursor):
        loc = cursor.location
        return loc.file is not None and loc.file.name == path

    for c in _cursors_in(tu, {os.path.realpath(path)}):
        if c.kind not in kinds or c.spelling not in _BUILTIN_VARIABLES or not ours(c):
            continue
        decl = c if c.kind in decl_kinds else c.referenced
        if decl is None or decl.kind not in decl_kinds or not ours(decl):
            continue   # the built-in itself
        # the identifier's own token: the declaration's name, or the reference's last token
        start = c.location.offset
        name = c.spelling.encode()
        if data[start:start + len(name)] != name:
            continue
        if start not in done:
            done.add(start)
            edits.append((start, len(name), b"tm_user_" + name))
    return edits


_NOT_CHECKED = ("VOID", "POINTER", "FUNCTIONPROTO", "FUNCTIONNOPROTO", "LVALUEREFERENCE",
                "CONSTANTARRAY", "INCOMPLETEARRAY")


def _checked_param_edits(ci, tu, path, data):
    """Check mode (tm.run(..., check=True)): every pointer parameter of every kernel (its
    declarations too, so that they still match) becomes a tm_checked_ptr<T> of the same name,
    on the same lines (tiledmm_kernel.h): the launch (emu/program_runtime.h) gives it the
    allocation the program passed. Pointers to pointers, void and functions stay as they are."""
    edits = []
    for c in _cursors_in(tu, {os.path.realpath(path)}):
        if c.kind not in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE) or \
                c.location.file is None or c.location.file.name != path or \
                not any(k.kind == ci.CursorKind.CUDAGLOBAL_ATTR for k in c.get_children()):
            continue
        for p in c.get_children():
            if p.kind != ci.CursorKind.PARM_DECL or p.type.kind != ci.TypeKind.POINTER:
                continue
            pointee = p.type.get_pointee()
            if pointee.get_canonical().kind.name in _NOT_CHECKED:
                continue
            start, end = p.extent.start.offset, p.extent.end.offset
            text = data[start:end]
            if b"=" in text or b"[" in text or b"(" in text or p.extent.start.file is None or \
                    p.extent.start.file.name != path:
                continue   # a default argument, an array or a macro: left as written
            lines = b"\n" * text.count(b"\n")
            edits.append((start, end - start, f" tm_checked_ptr<{pointee.spelling}> "
                                              f"{p.spelling}".encode() + lines))
    return edits


def _deduced_template_arguments(ci, call, ref, data, start, c0):
    """For a template kernel launched without template arguments (deduced from the call's),
    an edit that writes them after its name (tm_prog::config takes a function, not a
    template); None otherwise."""
    if ref is None or ref.kind != ci.CursorKind.FUNCTION_DECL:
        return None
    try:
        n = ref.get_num_template_arguments()
    except AttributeError:
        return None
    callee = data[start:c0].strip()
    if n <= 0 or b"<" in callee or not re.fullmatch(rb"[A-Za-z_]\w*(::[A-Za-z_]\w*)*", callee):
        return None
    args = []
    for i in range(n):
        kind = ref.get_template_argument_kind(i)
        if kind == ci.TemplateArgumentKind.TYPE:
            args.append(ref.get_template_argument_type(i).spelling)
        elif kind == ci.TemplateArgumentKind.INTEGRAL:
            args.append(str(ref.get_template_argument_value(i)))
        else:
            return None
    return (start + len(callee), 0, f"<{', '.join(args)}>".encode())


def _clang_diag(d, source_name):
    loc = d.location
    return f"{source_name}:{loc.line}:{loc.column}: {d.spelling}"


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
    """The program built (result.json's answer); with splits where the transform applies, or,
    when that build fails, once more without them (a program that does not compile fails
    there with the compiler's own log)."""
    split = _split_request(req)
    if split is None:
        result = _build(req, None)
        reason = req.get("no_split") or "not the emulator"
        result["paths"] = {ln["kernel"]: reason for ln in result["launches"]}
        return result
    try:
        result = _build(req, split)
    except BuildError:
        if not split.get("split"):
            raise
        result = _build(req, None)
        result["paths"] = {k: _SPLIT_DID_NOT_COMPILE if k in split["split"] else v
                           for k, v in split["paths"].items()}
    else:
        result["paths"] = dict(split["paths"])
    for ln in result["launches"]:   # launched here, defined in a header or another file
        result["paths"].setdefault(ln["kernel"], "not defined in the file that launches it")
    return result


_HEADER_ENDINGS = (".h", ".cuh", ".hpp", ".hh", ".inl")
_EXTERN_SHARED_HINT = re.compile(r"\bextern\b[^;{}]*\b__shared__\b")
_HEADER_MOST = 1 << 20   # the most of one header read


def _own_headers(req):
    """{real path: _Edited} of the program's own headers: the header files beside it, as the
    caller listed them (this child may read them, not list their folder)."""
    out = {}
    for path in req.get("program_files", ()):
        if not path.endswith(_HEADER_ENDINGS):
            continue
        try:
            with open(path, "rb") as f:
                out[os.path.realpath(path)] = _Edited(f.read(_HEADER_MOST))
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
    `#pragma once` differ by path). On emu, the -I folders' headers that declare `extern
    __shared__` arrays are copied too, in the dialect. The flags that put the folder first ([]
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
            if not n.endswith(_HEADER_ENDINGS) or n in copies or not os.path.isfile(path):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read(_HEADER_MOST)
            except OSError:
                continue
            if _EXTERN_SHARED_HINT.search(text) and emu_dialect(text) != text:
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


def _translation_unit(text, name, backend, define_lines, first):
    """The text the compiler sees for one of the program's files (its launches rewritten)."""
    once = "" if first else "#define TM_PROG_NOT_FIRST_FILE 1\n"
    if backend == "emu":
        return (once + '#include "tiledmm_kernel.h"\n#include "emu/program_runtime.h"\n' +
                define_lines + f'#line 1 "{name}"\n{text}\n')
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
                    headers=headers)
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
    compile_cmd = [req["compile"][0], *mirror, *req["compile"][1:]]
    define_lines = "".join(d + "\n" for d in req["define_lines"])
    sources = []
    for i, (text, name, folder) in enumerate(units):
        if backend == "emu":
            text = emu_dialect(text)
        base = ("program" if backend == "emu" else "program_build") if i == 0 else f"program_{i}"
        src = os.path.join(scratch, base + (".cpp" if backend == "emu" else ".cu"))
        with open(src, "w") as f:
            f.write(_translation_unit(text, name, backend, define_lines, first=i == 0))
        sources.append((src, folder))
    out = os.path.join(scratch, "program.so")
    if len(sources) > 1:   # a program of several files: each compiled, then linked
        result = _build_several(req, compile_cmd, sources, out)
    elif req.get("link_cmd"):   # compiled, then linked apart (profile mode: see _compile_emu)
        src, folder = sources[0]
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
        src, folder = sources[0]
        returncode, log = _compile([*compile_cmd, *_iquote(backend, folder), src, "-o", out,
                                    *req["link"]], scratch)
        if returncode != 0 or not os.path.exists(out):
            raise BuildError(_unsupported_note(log) + log)
        result = {"ok": True, "log": log, "so": out}
    result["log"] = note + result["log"]
    result["launches"] = launches
    if note:
        result["note"] = note.strip()
    return result


def _build_several(req, compile_cmd, sources, out):
    """A program of several files (tm.run of a list or a folder, %cuda_group_run): each
    compiled to an object with the program's compile command (its own folder first for its
    quoted includes, as nvcc), and the objects linked into one shared object (the runner's
    entry points in the first)."""
    scratch, backend = req["scratch"], req["backend"]
    log, objects = "", []
    compile_cmd = [a for a in compile_cmd if a != "-shared"]
    for src, folder in sources:
        obj = os.path.splitext(src)[0] + ".o"
        returncode, step = _compile([*compile_cmd, *_iquote(backend, folder), "-c", src, "-o",
                                     obj], scratch)
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
    except BuildError as exc:
        result = {"ok": False, "log": str(exc)}
    except ImportError as exc:
        result = {"ok": False, "log": f"libclang is needed to read a program's launches: {exc} "
                                      "(pip install libclang)"}
    with open(os.path.join(req["scratch"], "result.json"), "w") as f:
        json.dump(result, f)
    return 0
