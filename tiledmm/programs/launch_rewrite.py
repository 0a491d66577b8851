"""Reading a CUDA program's kernel launches with libclang and rewriting them (tm.run,
tiledmm/programs/build.py; issue 44).

The program is parsed as CUDA (`-x cuda --cuda-host-only -nocudainc -nocudalib`, no error
limit) against the emulator compile's own headers (PARSE_PRELUDE), so the parse sees what the
compile sees; every launch `k<<<grid, block, shared, stream>>>(args)` is a CALL_EXPR whose
second child is the call of `__cudaPushCallConfiguration`, and is rewritten in place, on the
same lines, where it was written (a launch in a macro's argument too), into

    tm_prog::config("k", "param,names", __FILE__, __LINE__, k, grid, block, shared, stream)(args)

whose call operator takes the kernel's own parameter types (so arguments convert, or fail to,
as nvcc's launch would); default arguments left out are written out. Launches in the program's
own headers are rewritten in those headers' texts (EditedFile), which build.py compiles from
copies. Also here: the program's variables named like a built-in variable renamed, and check
mode's checked pointer parameters.
"""
import ctypes
import os
import re
import subprocess

from ..toolchain import cache, compile_emu
from ..toolchain.source import apply_edits, cindex, require_cindex

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



class ParseError(Exception):
    """The parse could not read every launch, or could not find a header; the message says
    which and where. On cuda the program is built as nvcc builds it, untimed (build.py)."""


def gcc_include():
    """The compiler's own headers (stddef.h, ...): the libclang wheel ships none."""
    try:
        out = subprocess.run(["gcc", "-print-file-name=include"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
        return out if out and os.path.isdir(out) else None
    except (OSError, subprocess.TimeoutExpired):
        return None


# The prelude reaches the parse as an unsaved file at a path no folder holds: its quoted includes
# find tiledmm's headers (-isystem), never a file beside the program (as g++'s precompiled
# prelude, which is built without the program's folders), and its precompiled copy (parse_pch)
# names the same file in every build.
PRELUDE_PATH = "/tiledmm-parse/prelude.h"


def _parse_args(includes, defines, user_includes, folder):
    """clang's arguments: the compile's headers (`includes`: tiledmm/native and its user/
    stand-ins, as -isystem, as g++ gets them), no error limit (past clang's default 20 errors
    the parse turns fatal and stops instantiating templates, whose launches then vanish), the
    file's own folder first for its quoted includes (as nvcc); the prelude not yet."""
    args = ["-x", "cuda", "--cuda-host-only", "-nocudainc", "-nocudalib", "-std=c++17",
            "-ferror-limit=0", "-Wno-unknown-cuda-version", "-DTM_EMU",
            *[f"-isystem{d}" for d in includes], *(["-iquote", folder] if folder else []),
            *user_includes, *defines]
    gcc = gcc_include()
    if gcc:
        args += ["-isystem", gcc]
    return args


def parse_pch(scratch, includes):
    """The parse's prelude precompiled by libclang (a file in scratch, which the parse reads with
    -include-pch in the prelude's place), or None where libclang is missing or fails on it.
    Parsing the prelude is most of a small program's parse: 1.7 of 2.3 s (session 19). Built once
    per cache folder, libclang and set of headers, kept in the cache as compile_emu.prelude_pch's
    is; clang itself refuses a copy whose headers changed since (the parse then reads them)."""
    ci = cindex()
    if ci is None:
        return None
    args = _parse_args(includes, (), (), None)
    library = os.stat(ci.conf.lib._name)   # the precompiled form is the one library's own
    key = cache.key("parse-prelude", PARSE_PRELUDE, PRELUDE_PATH, args, ci.conf.lib._name,
                    library.st_size, library.st_mtime_ns, compile_emu.header_stamps(includes))
    path = os.path.join(scratch, "parse-prelude.pch")

    def precompile(path):
        try:
            tu = ci.Index.create().parse(
                PRELUDE_PATH, args=args, unsaved_files=[(PRELUDE_PATH, PARSE_PRELUDE)],
                options=ci.TranslationUnit.PARSE_INCOMPLETE | _FOR_SERIALIZATION)
            if any(d.severity >= 3 for d in tu.diagnostics):
                return False
            tu.save(path)
        except (ci.TranslationUnitLoadError, ci.TranslationUnitSaveError):
            return False
        return True
    return path if compile_emu.cached_copy(f"user-parse-prelude-{key}.pch", path, precompile) \
        else None


_FOR_SERIALIZATION = 0x10   # CXTranslationUnit_ForSerialization, which the binding does not name


def _parse(ci, path, args, options, pch):
    """The program's translation unit: over the precompiled prelude where there is one and clang
    takes it (it refuses one that a -D or -U of the program's contradicts), else over the
    prelude itself."""
    unsaved = [(PRELUDE_PATH, PARSE_PRELUDE)]
    index = ci.Index.create()
    if pch:
        try:
            tu = index.parse(path, args=[*args, "-include-pch", pch], unsaved_files=unsaved,
                             options=options)
            if not any("precompiled header" in d.spelling or "AST file" in d.spelling
                       for d in tu.diagnostics):
                return tu
        except ci.TranslationUnitLoadError:
            pass
    return index.parse(path, args=[*args, "-include", PRELUDE_PATH], unsaved_files=unsaved,
                       options=options)


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


_INSTANTIATION_FILE = []


def top_level(tu):
    """[(cursor, its file's name as the parse spells it, or None)] for the translation unit's
    top-level cursors (tiledmm's and the system's headers' declarations and macros too: tens
    of thousands), read once per translation unit: several passes filter them by file, and the
    binding's `cursor.location.file.name` costs three C calls and two Python objects each."""
    kept = tu.__dict__.get("_tm_top_level")
    if kept is not None:
        return kept
    ci = require_cindex()
    if not _INSTANTIATION_FILE:
        fn = ci.conf.lib.clang_getInstantiationLocation
        fn.argtypes = [ci.SourceLocation, ctypes.POINTER(ci.c_object_p), ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = None
        _INSTANTIATION_FILE.append(fn)
    where, names, kept = _INSTANTIATION_FILE[0], {}, []
    location = ci.conf.lib.clang_getCursorLocation
    for c in tu.cursor.get_children():
        f = ci.c_object_p()
        where(location(c), ctypes.byref(f), None, None, None)
        if not f:
            kept.append((c, None))
            continue
        key = ctypes.cast(f, ctypes.c_void_p).value
        if key not in names:
            names[key] = ci.File(f).name
        kept.append((c, names[key]))
    tu.__dict__["_tm_top_level"] = kept
    return kept


def file_name(cursor):
    """The name of the file a cursor was written in, as the parse spells it (None for none)."""
    f = cursor.location.file
    return f.name if f is not None else None


def children(tu, cursor=None):
    """[(child, its file's name)] of a cursor; None: the translation unit's (top_level)."""
    if cursor is None:
        return top_level(tu)
    return [(c, file_name(c)) for c in cursor.get_children()]


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


class EditedFile:
    """One file's text and the edits made to it (offset, length replaced, text)."""

    def __init__(self, data):
        self.data, self.edits, self.seen = data, [], set()

    def apply(self):
        return apply_edits(self.data, [(offset, offset + length, text)
                                       for offset, length, text in self.edits])


def rewrite_launches(source, source_name, scratch, includes, defines=(), user_includes=(),
                     check=False, split_kernels=None, folder=None, headers=None, emu=False,
                     pch=None):
    """(the source with every launch rewritten on its own lines, the launches found: a list of
    {"kernel", "params", "line"} and "file" for a launch in a header). Raises ParseError for a
    `<<<` the parse could not read, or a header it could not find. folder: the program file's
    own folder (its quoted includes, first). headers: {real path: EditedFile} of the program's own
    headers, whose launches are rewritten too (their edits added there; build writes the
    copies). A launch inside a macro's argument is rewritten where it was written; a launch
    that leaves out default arguments gets them written out (the launch's call operator takes
    every parameter). split_kernels (build.py, emu's kernels split at their barriers): None,
    or f(ci, tu, path) -> {kernel: (offset, text inserted there, whether a template)}: the
    texts are inserted, and the launches of a template kernel split name its pair
    `tm_with_split_<k>`. emu: the build is the emulator's (members named like its macro
    built-ins renamed, kernels entered in its table of kernels by address). pch: parse_pch's
    file, or None."""
    ci = require_cindex()
    data = source.encode()
    path = os.path.join(scratch, source_name)
    with open(path, "wb") as f:
        f.write(data)
    headers = {} if headers is None else headers
    files = {os.path.realpath(path): EditedFile(data), **headers}
    main = files[os.path.realpath(path)]
    # the detailed record (macro expansions) only where the kernels are split (their guard)
    options = ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD if split_kernels else 0
    tu = _parse(ci, path, _parse_args(includes, defines, user_includes, folder or scratch),
                options, pch)
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
    if split_kernels is not None:
        splits = split_kernels(ci, tu, path)
        main.edits.extend((end, 0, text.encode()) for end, text, _template in splits.values())
        template_splits = {k for k, (_e, _t, template) in splits.items() if template}

    in_files = {}   # a file's name as the parse spells it -> whether it is one of `files`

    def ours(name):
        if name not in in_files:
            in_files[name] = os.path.realpath(name) in files
        return in_files[name]

    def visit(cursor=None):   # None: the translation unit
        for child, name in children(tu, cursor):
            if name is not None and not ours(name):
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
            named = split_callee(ci, ref, text[start:c0], kernel)
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

    visit()
    main.edits.extend(_renamed_builtins(ci, tu, path, data, emu))
    if emu:
        main.edits.extend(_kernel_registrations(ci, tu, path, data))
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
    subtrees of every other file (tiledmm's headers, the system's) are not walked. Kept on the
    translation unit: several passes read them, and each cursor's file costs the binding a call."""
    kept = tu.__dict__.setdefault("_tm_cursors_in", {})
    key = frozenset(files)
    if key in kept:
        return kept[key]
    real = {}

    def ours(name):
        if name not in real:
            real[name] = os.path.realpath(name) in files
        return real[name]

    out, todo = [], [c for c, name in reversed(top_level(tu))
                     if name is None or ours(name)]
    while todo:
        c = todo.pop()
        f = c.location.file
        if f is not None and not ours(f.name):
            continue
        out.append(c)
        todo.extend(reversed(list(c.get_children())))
    kept[key] = out
    return out


def _included(tu, real):
    """Whether the translation unit included the file at this real path."""
    if "_tm_included" not in tu.__dict__:
        tu.__dict__["_tm_included"] = {os.path.realpath(inc.include.name)
                                       for inc in tu.get_includes()}
    return real in tu.__dict__["_tm_included"]


def split_callee(ci, ref, callee, kernel):
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


# Of those, the ones emu/cuda_emu.h spells as macros: a member of that name (`kp.gridDim`) cannot
# be written on the emulator; its structs name such fields tm_user_<name> (emu/runtime_api.h).
_MACRO_BUILTINS = ("threadIdx", "blockIdx", "blockDim", "gridDim")


def _renamed_builtins(ci, tu, path, data, emu=False):
    """Edits renaming the program's own variables, parameters and fields named like a built-in
    variable (and every use of them) to tm_user_<name>; on emu, also every member access of a
    name the emulator spells as a macro."""
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
    # A member named like one (`params.gridDim` of a cudaKernelNodeParams, a field of a struct
    # the parse could not resolve) is never the built-in: renamed by its tokens, as tiledmm's
    # own structs spell those fields (emu/runtime_api.h).
    previous = None
    for t in tu.cursor.get_tokens() if emu else ():
        if t.location.file is None or t.location.file.name != path:
            continue
        if t.spelling in _MACRO_BUILTINS and previous in (".", "->"):
            start = t.extent.start.offset
            if start not in done and data[start:start + len(t.spelling)] == t.spelling.encode():
                done.add(start)
                edits.append((start, len(t.spelling), b"tm_user_" + t.spelling.encode()))
        previous = t.spelling
    return edits


def _kernel_registrations(ci, tu, path, data):
    """On the emulator, an edit at the end of the file entering each of its kernels in the
    table of kernels by address when the program loads (emu/program_graphs.h): a kernel a
    program names only by its address (a graph's kernel node, cudaLaunchKernel) is launched
    before, or without, any <<<>>> launch. Templates (no address until instantiated) and
    overloaded names (an ambiguous address) are left to their first launch."""
    found = {}
    for c in _cursors_in(tu, {os.path.realpath(path)}):
        if c.kind != ci.CursorKind.FUNCTION_DECL or not c.is_definition() or \
                c.location.file is None or c.location.file.name != path or \
                not any(k.kind == ci.CursorKind.CUDAGLOBAL_ATTR for k in c.get_children()):
            continue
        scope, parent = [], c.semantic_parent
        while parent is not None and parent.kind != ci.CursorKind.TRANSLATION_UNIT:
            if parent.kind == ci.CursorKind.NAMESPACE and parent.spelling:
                scope.append(parent.spelling)
            elif parent.kind not in (ci.CursorKind.NAMESPACE, ci.CursorKind.LINKAGE_SPEC):
                break   # a class's static member: not a kernel a program takes the address of
            parent = parent.semantic_parent
        else:
            name = "::".join([*reversed(scope), c.spelling])
            params = ",".join(a.spelling or f"#{i + 1}" for i, a in enumerate(c.get_arguments()))
            found.setdefault(name, []).append(params)
    calls = [f'tm_prog::register_kernel({name}, "{name}", "{params[0]}")'
             for name, params in sorted(found.items()) if len(params) == 1]
    if not calls:
        return []
    text = ("\n#ifdef TM_EMU\n[[maybe_unused]] static const bool tm_kernels_by_address[] = {" +
            ", ".join(calls) + "};\n#endif\n")
    return [(len(data), 0, text.encode())]


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
