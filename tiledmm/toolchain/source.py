"""Reading a user kernel's source: its `__global__` signatures and parameters, the text the
compilers see (tiledmm's prelude, the user's defines, then the user's lines numbered as
written). The errors and the compilers' warnings are tiledmm/toolchain/diagnostics.py's.

Signatures are read by libclang (the `libclang` wheel), a real C++ parser: it expands the
user's macros and `defines=`, so `float A[N][N]` with `#define N 64` is known to take rows of
64 floats, and a template kernel named with its arguments (`name="mm<16>"`) is read with
them substituted. It parses the source as C++ with the CUDA keywords defined as attributes and
function bodies skipped (a body's errors are the compiler's to report). Where libclang cannot
be loaded, a regular expression reads the plain signatures (pointers to numbers and numbers)
and refuses the rest, saying that libclang is needed.

What is checked on the text itself, before any compiler sees it, is what confuses the
compilers' own messages: braces that never close (the kernel's text ended early), a signature
with no body, and slide line numbers pasted with the code (`1.` at the start of lines).
"""
import re

import numpy as np

from ..errors import CompileError
from .diagnostics import SOURCE_NAME, line_col

# ---------------------------------------------------------------------------------------------
# parameter types

# scalar kinds: C type -> (struct format, kind)   kind: 'i' integer, 'f' floating, 'b' bool
SCALARS = {
    "bool": ("?", "b"), "char": ("b", "i"), "signed char": ("b", "i"), "unsigned char": ("B", "i"),
    "short": ("h", "i"), "unsigned short": ("H", "i"),
    "int": ("i", "i"), "unsigned int": ("I", "i"), "long": ("q", "i"), "unsigned long": ("Q", "i"),
    "long long": ("q", "i"), "unsigned long long": ("Q", "i"),
    "float": ("f", "f"), "double": ("d", "f"),
}
# element types of pointers and arrays: canonical C type -> NumPy dtype
ELEMENTS = {
    "float": np.float32, "double": np.float64, "char": np.int8, "signed char": np.int8,
    "unsigned char": np.uint8, "short": np.int16, "unsigned short": np.uint16, "int": np.int32,
    "unsigned int": np.uint32, "long": np.int64, "unsigned long": np.uint64,
    "long long": np.int64, "unsigned long long": np.uint64, "bool": np.bool_,
}
# CUDA's vector types: name -> (element C type, lanes)
_VECTOR_BASES = {"char": "signed char", "uchar": "unsigned char", "short": "short",
                 "ushort": "unsigned short", "int": "int", "uint": "unsigned int",
                 "long": "long", "ulong": "unsigned long", "longlong": "long long",
                 "ulonglong": "unsigned long long", "float": "float", "double": "double"}
VECTORS = {f"{b}{n}": (c, n) for b, c in _VECTOR_BASES.items() for n in (1, 2, 3, 4)}


class Param:
    """One kernel parameter as the launch sees it.

    kind: 'scalar'   a number (int, float, bool, ...): a Python number
          'pointer'  T * (T a number type): a 1-D NumPy array of T's dtype
          'vector'   float4 * and the other CUDA vector types: an array of the element's dtype
                     whose length is a multiple of the lanes
          'array'    T A[R][C] / T A[][C] / T (*A)[C] (more dimensions too): a C-contiguous
                     array whose trailing dimensions are `inner` (here (C,))
          'rows'     T **: a 2-D array; the kernel gets a table of row pointers built where it
                     runs
    name, ctype (the element type: 'float'), const and volatile (the elements are so
    qualified), row_quals (rows: the row pointers' qualifiers, 'const' in `float *const *`),
    span (the parameter's characters in the source), decl_text (as written).
    `pointer` is True for the plain `T *` kind only (what check mode bounds-checks);
    `takes_array` for every array kind.
    """

    def __init__(self, name, ctype, pointer, const, span, kind=None, lanes=1, inner=(),
                 decl_text=None, vector=None, volatile=False, row_quals=""):
        self.name, self.ctype, self.const, self.span = name, ctype, const, span
        self.volatile, self.row_quals = volatile, row_quals
        self.kind = kind or ("pointer" if pointer else "scalar")
        self.lanes, self.inner, self.vector = lanes, tuple(inner), vector
        self.decl_text = decl_text
        self.pointer = self.kind == "pointer"
        self.dtype = np.dtype(ELEMENTS[ctype]) if self.takes_array else None
        self.fmt, self.number_kind = SCALARS.get(ctype, (None, None))

    @property
    def takes_array(self):
        return self.kind != "scalar"

    @property
    def is_output(self):
        return self.takes_array and not self.const

    def type_text(self):
        """The parameter's type as C: 'const float *', 'float (*)[64]', 'float **', 'int'
        (the kernel's own, as its pointer type in the emu launcher spells it)."""
        c = ("const " if self.const else "") + ("volatile " if self.volatile else "")
        if self.kind == "scalar":
            return self.ctype
        if self.kind == "pointer":
            return f"{c}{self.ctype} *"
        if self.kind == "vector":
            return f"{c}{self.vector} *"
        if self.kind == "rows":
            return f"{c}{self.ctype} *{self.row_quals + ' ' if self.row_quals else ''}*"
        return f"{c}{self.ctype} (*){''.join(f'[{d}]' for d in self.inner)}"

    def decl(self):
        t = self.type_text()
        if self.kind == "array":
            return t.replace("(*)", f"(*{self.name})")
        return f"{t}{'' if t.endswith('*') else ' '}{self.name}"

    def wants(self):
        """What the argument must be, in words (for TypeError messages)."""
        if self.kind == "scalar":
            return "a bool" if self.number_kind == "b" else "a number"
        if self.kind == "vector":
            return (f"an array of {self.dtype} whose length is a multiple of {self.lanes} "
                    f"({self.vector} elements)")
        if self.kind == "array":
            dims = "x".join(str(d) for d in self.inner)
            return (f"a {1 + len(self.inner)}-D array of {self.dtype} with rows of {dims} "
                    f"(shape (n, {', '.join(map(str, self.inner))}))")
        if self.kind == "rows":
            return f"a 2-D array of {self.dtype} (the kernel gets a table of row pointers)"
        return f"an array of {self.dtype}"

    def __repr__(self):
        return f"Param({self.decl()!r})"


# ---------------------------------------------------------------------------------------------
# the text itself

def split_top_level(text):
    """`text` split at the commas outside (), [] and {}, each part stripped: a declarator list,
    a launch configuration, an argument list."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def apply_edits(text, edits, base=0):
    """`text` (str, or bytes: libclang's offsets are bytes) with each edit `(start, end, new,
    ...)` made: `new` replaces text[start - base:end - base]. Edits must not overlap; they are
    made from the end so that the offsets of those before hold, and at one offset a replacement
    before an insertion, so that the insertion lands in front of it."""
    for start, end, new, *_ in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        if isinstance(text, bytes) and isinstance(new, str):
            new = new.encode()
        text = text[:start - base] + new + text[end - base:]
    return text


def blank_source(source):
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


# A line that starts with a number and a dot, then a word, a brace or a comment: never C (a
# floating literal continuing an expression is followed by an operator), always a slide's line
# number pasted with the code.
_SLIDE_NUMBER_RE = re.compile(r"^([ \t]*)(\d{1,3})\.[ \t]+(?=[A-Za-z_{}/#])", re.M)


def check_text(source):
    """Raise CompileError for what the compilers would misreport: slide line numbers pasted
    with the code, and braces or parentheses that never close (the text ended early)."""
    blank = blank_source(source)
    numbered = [m for m in _SLIDE_NUMBER_RE.finditer(source)   # not inside a comment
                if blank[m.start(2)] == source[m.start(2)]]
    if numbered:
        lines = [line_col(source, m.start())[0] for m in numbered]
        shown = ", ".join(str(n) for n in lines[:8]) + (", ..." if len(lines) > 8 else "")
        first = numbered[0]
        raise CompileError(
            f"{SOURCE_NAME}:{lines[0]}:{len(first.group(1)) + 1}: the line starts with "
            f"'{first.group(2)}.': line numbers copied from the slides? Delete the numbers at the "
            f"start of line{'s' if len(lines) > 1 else ''} {shown} (they are not C).")
    stack = []
    for i, c in enumerate(blank):
        if c in "{(":
            stack.append(i)
        elif c in "})":
            if stack and blank[stack[-1]] == {"}": "{", ")": "("}[c]:
                stack.pop()
            elif not stack:
                line, col = line_col(source, i)
                raise CompileError(f"{SOURCE_NAME}:{line}:{col}: this '{c}' closes nothing: "
                                   f"there are more '{c}' than '{'{' if c == '}' else '('}' "
                                   "before it")
            else:
                break   # mismatched kinds: the compiler says it better
    if stack and all(blank[k] in "{(" for k in stack):
        k = stack[-1]
        line, col = line_col(source, k)
        closer = "}" if blank[k] == "{" else ")"
        raise CompileError(
            f"{SOURCE_NAME}:{line}:{col}: the '{blank[k]}' here is never closed: the kernel's "
            f"text ended before its '{closer}' ({len(stack)} unclosed). Was the end of the "
            "code cut off when copying it?")


# ---------------------------------------------------------------------------------------------
# reading signatures with libclang

PARSE_PRELUDE = r"""
#define __global__ __attribute__((annotate("tm_global")))
#define __device__
#define __host__
#define __shared__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
#define __CUDACC__ 1
#define TM_DYNAMIC_SHARED(type, name) type *name = 0
typedef decltype(sizeof(0)) size_t;
typedef long ptrdiff_t;
typedef signed char int8_t; typedef unsigned char uint8_t;
typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t;
typedef long int64_t; typedef unsigned long uint64_t;
typedef unsigned int uint; typedef unsigned short ushort; typedef unsigned char uchar;
typedef unsigned long ulong;
""" + "".join(
    f"struct {name} {{ {c} {', '.join('xyzw'[:n])}; }};\n" for name, (c, n) in VECTORS.items()
) + r"""
struct dim3 { unsigned x, y, z; };
struct uint3 { unsigned x, y, z; };
"""

_clang = None       # clang.cindex, or the reason it cannot be used


def cindex():
    global _clang
    if _clang is None:
        try:
            import clang.cindex as ci
            ci.Index.create()
            _clang = ci
        except Exception as exc:   # not installed, or its library does not load here
            _clang = f"{type(exc).__name__}: {exc}"
    return _clang if not isinstance(_clang, str) else None


def require_cindex():
    """clang.cindex, or a RuntimeError that says how to get it: tiledmm reads a kernel's
    signature and a program's launches with libclang (a dependency, the `libclang` wheel)."""
    ci = cindex()
    if ci is None:
        raise RuntimeError(f"tiledmm reads CUDA source with libclang, which does not load here "
                           f"({_clang}): pip install libclang")
    return ci


def split_defines(options):
    """(#define/#undef lines for -D/-U options, the other options). Defines become lines after
    tiledmm's prelude, so that a student's `-DN=64` cannot reach tiledmm's own headers."""
    lines, rest, i = [], [], 0
    options = list(options)
    while i < len(options):
        o = options[i]
        if o in ("-D", "-U") and i + 1 < len(options):
            o, i = o + options[i + 1], i + 1
        if o.startswith("-D") and len(o) > 2:
            name, eq, value = o[2:].partition("=")
            lines.append(f"#define {name} {value if eq else '1'}")
        elif o.startswith("-U") and len(o) > 2:
            lines.append(f"#undef {o[2:]}")
        else:
            rest.append(o)
        i += 1
    return lines, rest


INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include\b.*$", re.M)


class KernelDecl:
    """A `__global__` function found in the source: name, template parameters (text, or None),
    params (None for a template until instantiated), line, column, has_body."""

    def __init__(self, name, template, params, line, col, has_body):
        self.name, self.template, self.params = name, template, params
        self.line, self.col, self.has_body = line, col, has_body


def _parse(ci, source, define_lines, probe=""):
    # #include lines are blanked (same length): the parse needs no headers, and a missing one
    # would stop it. The prelude gives the CUDA keywords and types a signature may use. This is
    # no security filter (`#/**/include` gets through it): the parse runs only in the confined
    # compile child (tiledmm/toolchain/compile_emu.py), where the sandbox refuses what may not be read.
    text = INCLUDE_RE.sub(lambda m: " " * len(m.group(0)), source)
    prelude = PARSE_PRELUDE + "\n".join(define_lines) + "\n"
    index = ci.Index.create()
    opts = (ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES |
            ci.TranslationUnit.PARSE_INCOMPLETE)
    return index.parse(SOURCE_NAME, args=["-x", "c++", "-std=c++17", "-nostdinc", "-nostdinc++",
                                          "-include", "/tiledmm-parse/prelude.h"],
                       unsaved_files=[(SOURCE_NAME, text + "\n" + probe),
                                      ("/tiledmm-parse/prelude.h", prelude)],
                       options=opts)


def _in_source(cursor):
    f = cursor.location.file
    return f is not None and f.name == SOURCE_NAME


def kernel_cursors(ci, cursor):
    for c in cursor.get_children():
        if not _in_source(c) and c.kind != ci.CursorKind.LINKAGE_SPEC:
            continue
        if c.kind in (ci.CursorKind.LINKAGE_SPEC, ci.CursorKind.UNEXPOSED_DECL):
            yield from kernel_cursors(ci, c)
        elif c.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE):
            if any(a.kind == ci.CursorKind.ANNOTATE_ATTR and a.spelling == "tm_global"
                   for a in c.get_children()):
                yield c


def _has_body(blank, end_offset):
    m = re.compile(r"\s*(?:const\b\s*)?(.)", re.S).match(blank, end_offset)
    return bool(m) and m.group(1) == "{"


def read_kernels(source, options=()):
    """{name: KernelDecl} for every `__global__` function of the source (templates by their
    name without arguments)."""
    define_lines, _ = split_defines(options)
    ci = require_cindex()
    blank = blank_source(source)
    tu = _parse(ci, source, define_lines)
    kernels = {}
    for c in kernel_cursors(ci, tu.cursor):
        parms = [a for a in c.get_children() if a.kind == ci.CursorKind.PARM_DECL]
        template = None
        if c.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            tparams = [a for a in c.get_children() if a.kind in (
                ci.CursorKind.TEMPLATE_TYPE_PARAMETER, ci.CursorKind.TEMPLATE_NON_TYPE_PARAMETER,
                ci.CursorKind.TEMPLATE_TEMPLATE_PARAMETER)]
            template = ", ".join(source[a.extent.start.offset:a.extent.end.offset]
                                 for a in tparams)
            params = None
        else:
            params = _params(ci, source, c.spelling, parms, list(c.type.argument_types()))
        has_body = _has_body(blank, c.extent.end.offset)
        if c.spelling in kernels and kernels[c.spelling].has_body and not has_body:
            continue   # a declaration before or after the definition
        kernels[c.spelling] = KernelDecl(c.spelling, template, params, c.location.line,
                                         c.location.column, has_body)
    return kernels


def instantiate(source, decl, name, options=()):
    """The parameters of template kernel `decl` instantiated as `name` ("mm<16>")."""
    ci = cindex()
    define_lines, _ = split_defines(options)
    tu = _parse(ci, source, define_lines, f"auto *tiledmm_probe_ = &{name};\n")
    probe = None
    for c in tu.cursor.get_children():
        if c.kind == ci.CursorKind.VAR_DECL and c.spelling == "tiledmm_probe_":
            probe = c
    ftype = probe.type.get_canonical().get_pointee() if probe is not None else None
    if ftype is None or ftype.kind != ci.TypeKind.FUNCTIONPROTO:
        errors = [d.spelling for d in tu.diagnostics if d.severity >= 3]
        raise CompileError(f"{SOURCE_NAME}:{decl.line}:{decl.col}: cannot instantiate kernel "
                           f"template '{decl.name}' (template <{decl.template}>) as {name!r}"
                           + (f": {errors[-1]}" if errors else ""))
    for c in kernel_cursors(ci, tu.cursor):
        if c.spelling == decl.name and c.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            parms = [a for a in c.get_children() if a.kind == ci.CursorKind.PARM_DECL]
            return _params(ci, source, name, parms, list(ftype.argument_types()))
    raise CompileError(f"kernel template '{decl.name}' not found")


def _number_name(ci, t):
    """The canonical name of a number type ('float', 'unsigned int'), else None."""
    k = ci.TypeKind
    names = {k.BOOL: "bool", k.CHAR_S: "char", k.SCHAR: "signed char", k.CHAR_U: "unsigned char",
             k.UCHAR: "unsigned char", k.SHORT: "short", k.USHORT: "unsigned short",
             k.INT: "int", k.UINT: "unsigned int", k.LONG: "long", k.ULONG: "unsigned long",
             k.LONGLONG: "long long", k.ULONGLONG: "unsigned long long", k.FLOAT: "float",
             k.DOUBLE: "double"}
    return names.get(t.get_canonical().kind)


def _params(ci, source, kernel, parms, types):
    out = []
    for i, (parm, t) in enumerate(zip(parms, types)):
        start, end = parm.extent.start.offset, parm.extent.end.offset
        text = " ".join(source[start:end].split())
        name = parm.spelling or f"arg{i}"
        where = (f"{SOURCE_NAME}:{parm.extent.start.line}:{parm.extent.start.column}: kernel "
                 f"'{kernel}', parameter '{text}'")
        p = _classify(ci, t.get_canonical(), name, (start, end), text, where)
        if p.kind == "array":   # `const float A[N][N]`: the decayed type that libclang gives
            e = parm.type       # loses the const (and volatile); the declared one keeps it
            while e.kind in (ci.TypeKind.CONSTANTARRAY, ci.TypeKind.INCOMPLETEARRAY,
                             ci.TypeKind.POINTER):
                e = e.get_pointee() if e.kind == ci.TypeKind.POINTER else e.element_type
            p.const = p.const or e.get_canonical().is_const_qualified()
            p.volatile = p.volatile or e.get_canonical().is_volatile_qualified()
        out.append(p)
    return out


def _classify(ci, t, name, span, text, where):
    K = ci.TypeKind
    number = _number_name(ci, t)
    if number is not None:
        return Param(name, number, False, False, span, "scalar", decl_text=text)
    if t.kind in (K.LVALUEREFERENCE, K.RVALUEREFERENCE):
        raise CompileError(f"{where}: a reference parameter cannot be passed from the host; "
                           "take a pointer or a value")
    if t.kind in (K.CONSTANTARRAY, K.INCOMPLETEARRAY):   # not decayed (should not happen)
        t = t.element_type
        inner_t = t
    elif t.kind == K.POINTER:
        inner_t = t.get_pointee()
    else:
        raise CompileError(f"{where}: type '{t.spelling}' is not supported (it cannot be "
                           "passed from NumPy); use a pointer to numbers (float *, int *, ...), a number, an array "
                           "(float A[][N]), float ** or a vector pointer (float4 *)")
    const, volatile = inner_t.is_const_qualified(), inner_t.is_volatile_qualified()
    number = _number_name(ci, inner_t)
    if number is not None:
        return Param(name, number, True, const, span, "pointer", decl_text=text,
                     volatile=volatile)
    if inner_t.kind == K.RECORD:
        vname = inner_t.get_declaration().spelling
        if vname in VECTORS:
            base, lanes = VECTORS[vname]
            return Param(name, base, False, const, span, "vector", lanes=lanes,
                         decl_text=text, vector=vname, volatile=volatile)
    if inner_t.kind == K.CONSTANTARRAY:
        dims, e = [], inner_t
        while e.kind == K.CONSTANTARRAY:
            dims.append(e.get_array_size())
            e = e.element_type
        number = _number_name(ci, e)
        if number is not None:
            return Param(name, number, False, e.is_const_qualified() or const, span, "array",
                         inner=dims, decl_text=text,
                         volatile=e.is_volatile_qualified() or volatile)
    if inner_t.kind == K.POINTER:
        e = inner_t.get_pointee()
        number = _number_name(ci, e)
        if number is not None:
            return Param(name, number, False, e.is_const_qualified(), span, "rows",
                         decl_text=text, volatile=e.is_volatile_qualified(),
                         row_quals=" ".join(q for q, on in (("const", const),
                                                            ("volatile", volatile)) if on))
    raise CompileError(f"{where}: type '{t.spelling}' is not supported (it cannot be "
                       "passed from NumPy); use a pointer to numbers (float *, int *, ...), a number, an array "
                       "(float A[][N]), float ** or a vector pointer (float4 *)")


def kernel_signature(source, name, options=()):
    """(name, [Param]) of the kernel to launch: `name` None picks the only one; a template is
    named with its arguments (name="mm<16>"). Raises CompileError (the text, no kernel, no
    body) or ValueError (a name not in the source)."""
    check_text(source)
    kernels = read_kernels(source, options)
    if not kernels:
        blank = blank_source(source)
        for m in re.finditer(r"__global__\s+void\s+([A-Za-z_]\w*)\s*\(([^()]*)\)", blank):
            if not _has_body(blank, m.end()):
                line, col = line_col(source, m.start(1))
                raise CompileError(f"{SOURCE_NAME}:{line}:{col}: kernel '{m.group(1)}' has no body: "
                                   "the signature must be followed by '{ ... }' (was the rest of "
                                   "the code cut off?)")
        m = re.search(r"__global__", blank)
        if m:
            line, col = line_col(source, m.start())
            raise CompileError(f"{SOURCE_NAME}:{line}:{col}: this `__global__` does not start a "
                               "kernel tiledmm can read (`__global__ void name(parameters) "
                               "{ ... }`)")
        raise CompileError("no `__global__ void name(...)` kernel found in the source")
    base = None if name is None else name.split("<", 1)[0].strip()
    if name is None:
        if len(kernels) > 1:
            raise ValueError(f"the source defines {len(kernels)} kernels "
                             f"({', '.join(kernels)}): choose one with name=")
        name = base = next(iter(kernels))
    if base not in kernels:
        raise ValueError(f"no kernel named {name!r} in the source; found {', '.join(kernels)}")
    decl = kernels[base]
    if not decl.has_body:
        raise CompileError(f"{SOURCE_NAME}:{decl.line}:{decl.col}: kernel '{base}' is declared "
                           "but has no body: the signature must be followed by '{ ... }' (was "
                           "the rest of the code cut off?)")
    if decl.template is not None:
        if "<" not in name:
            raise ValueError(f"kernel '{base}' is a template (template <{decl.template}>): name "
                             f"it with its arguments, e.g. name=\"{base}<16>\"")
        name = re.sub(r"\s+", " ", name.strip())
        return name, instantiate(source, decl, name, options)
    if "<" in name:
        raise ValueError(f"kernel '{base}' is not a template: name it {base!r}")
    return name, decl.params


# ---------------------------------------------------------------------------------------------
# the text the compilers see

# `extern __shared__ T name[];` in either word order (`extern T __shared__ name[];`), with
# __align__(n), and 2-D (`name[][N]`). Each word ends at a word boundary: without it the words
# of `extern "C" __global__ void kernel(` split in exponentially many ways (the build hung).
_EXTERN_SHARED_RE = re.compile(
    r"\bextern\s+(?P<type>(?:(?:__align__\s*\(\s*\w+\s*\)|__attribute__\s*\(\(\s*\w+\s*"
    r"(?:\(\s*\w+\s*\))?\s*\)\)|[A-Za-z_]\w*\b)\s*)+?)(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*"
    r"(?P<dims>(?:\[[^\[\];{}]+\]\s*)*);")
_ALIGN_RE = re.compile(r"__align__\s*\(\s*\w+\s*\)|__attribute__\s*\(\(.*?\)\)")
# `__shared__ alignas(16) float x[N];`: nvcc takes a standard attribute after the qualifier; the
# emulator's __shared__ is `static thread_local`, which g++ refuses before alignas ("standard
# attributes in middle of decl-specifiers"), so the attribute moves in front of the qualifier.
_ALIGNAS_AFTER_SHARED_RE = re.compile(
    r"\b__shared__(?P<space>\s+)(?P<alignas>alignas\s*\((?:[^()]|\([^()]*\))*\))")
# What emu_dialect rewrites, cheaply found: a header without it needs no copy in the dialect.
EMU_DIALECT_HINT = re.compile(r"\bextern\b[^;{}]*\b__shared__\b|\b__shared__\s+alignas\b|"
                              r"\b(?:asm|__asm__)\b")


# Inline PTX reading a special register (`asm("mov.u32 %0, %%laneid;" : "=r"(x));`): the
# emulator's value of it. Any other PTX is a compile error at its line that says so, never the
# assembler's raw message.
_PTX_SPECIAL = {
    "laneid": "(unsigned)(tm_emu_tls.linear_tid % 32)",
    "warpid": "(unsigned)(tm_emu_tls.linear_tid / 32)",
    "nwarpid": "(unsigned)64",
    "smid": "(unsigned)0",
    "nsmid": "(unsigned)132",
    "lanemask_eq": "(1u << (tm_emu_tls.linear_tid % 32))",
    "lanemask_lt": "((1u << (tm_emu_tls.linear_tid % 32)) - 1u)",
    "lanemask_le": "((2u << (tm_emu_tls.linear_tid % 32)) - 1u)",
    "lanemask_gt": "(~((2u << (tm_emu_tls.linear_tid % 32)) - 1u))",
    "lanemask_ge": "(~((1u << (tm_emu_tls.linear_tid % 32)) - 1u))",
    "clock": "(unsigned)clock64()",
    "clock64": "(unsigned long long)clock64()",
    "globaltimer": "(unsigned long long)clock64()",
}
_ASM_RE = re.compile(r"\b(?:asm|__asm__)\s*(?:volatile\s*|__volatile__\s*)?\(\s*(?P<body>(?:\"(?:[^\"\\\n]|\\.)*\"\s*)+)"
                     r"(?P<rest>[^;]*?)\)\s*;")
_ASM_MOV_RE = re.compile(r"^\s*mov\.[usb](?:32|64)\s+%0\s*,\s*%%(?P<reg>\w+)\s*;?\s*$")
_ASM_OUT_RE = re.compile(r"^\s*:\s*\"=[rlh]\"\s*\((?P<out>[^()]*(?:\([^()]*\)[^()]*)*)\)\s*$")
_PTX_HINT = re.compile(r"%%\w|\.(?:[usbf](?:8|16|32|64)|pred|global|shared)\b")


def _emu_inline_ptx(source, blank):
    """The edits (start, end, text) for inline PTX in `source` (`blank`: its comments and
    strings blanked, so that asm in a comment is left alone)."""
    edits = []
    for m in _ASM_RE.finditer(source):
        if not blank[m.start():m.start() + 3].startswith(("asm", "__a")):
            continue   # in a comment or a string
        body = "".join(re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group("body")))
        if not _PTX_HINT.search(body):
            continue   # not PTX (host assembly): left to the compiler
        mov, out = _ASM_MOV_RE.match(body), _ASM_OUT_RE.match(m.group("rest"))
        if mov and out and mov.group("reg") in _PTX_SPECIAL:
            text = f"(({out.group('out')}) = {_PTX_SPECIAL[mov.group('reg')]});"
        else:
            shown = body.replace("\\", "").replace('"', "'")[:80]
            text = (f'static_assert(sizeof(int) == 0, "tiledmm: inline PTX is not emulated on the CPU '
                    f'emulator ({shown}); only reads of special registers (mov.u32 %0, %%laneid; '
                    f'...) are");')
        edits.append((m.start(), m.end(), text))
    return edits


def _alignas_in_front(source, blank):
    """The edits putting `alignas(n)` in front of the `__shared__` it follows (the same length:
    offsets into the text stay valid)."""
    return [(m.start(), m.end(),
             source[m.start("alignas"):m.end("alignas")] + m.group("space") + "__shared__")
            for m in _ALIGNAS_AFTER_SHARED_RE.finditer(blank)]


def alignas_in_front(source):
    """`source` with each `__shared__ alignas(n)` written `alignas(n) __shared__`, at the same
    offsets (the barrier transform's parse of a program's text, whose offsets it keeps)."""
    return apply_edits(source, _alignas_in_front(source, blank_source(source)))


def emu_dialect(source):
    """The emulator's spelling of nvcc's dialect: `extern __shared__ T name[];` becomes
    TM_DYNAMIC_SHARED(T, name) in a function and a tm_extern_shared<T> object at namespace
    scope (both read the launch's dynamic shared memory), on the same line; `__shared__
    alignas(n)` becomes `alignas(n) __shared__`; inline PTX, the special registers' values."""
    blank = blank_source(source)
    edits = []
    for m in _EXTERN_SHARED_RE.finditer(blank):
        words = _ALIGN_RE.sub(" ", m.group("type")).split()
        if "__shared__" not in words:
            continue
        ctype = " ".join(w for w in words if w != "__shared__")
        if not ctype or re.search(r"[^\w\s]", ctype):
            continue
        dims = " ".join(m.group("dims").split())
        in_function, opens = False, []
        for k in range(m.start()):
            if blank[k] == "{":
                opens.append(k)
            elif blank[k] == "}" and opens:
                opens.pop()
        if opens:   # inside braces: a function unless the brace opens a namespace
            head = blank[max(0, opens[-1] - 200):opens[-1]]
            in_function = not re.search(r"\bnamespace\b[\s\w:]*$", head) and \
                not re.search(r"extern\s*$", head)
        name = m.group("name")
        if dims:   # a 2-D array: a pointer to its rows
            text = (f"{ctype} (*{name}){dims} = reinterpret_cast<{ctype} (*){dims}>"
                    f"(tm_emu_dynamic_shared());" if in_function
                    else f"static const tm_extern_shared<{ctype}{dims}> {name}{{}};")
        else:
            text = (f"TM_DYNAMIC_SHARED({ctype}, {name});" if in_function
                    else f"static const tm_extern_shared<{ctype}> {name}{{}};")
        edits.append((m.start(), m.end(), text))
    edits += _alignas_in_front(source, blank)
    if "asm" in source:
        edits += _emu_inline_ptx(source, blank)
    return apply_edits(source, edits)


def full_source(source, extra="", defines=(), backend="emu"):
    """The text compiled: tiledmm's prelude (and on emu its fault report), the user's defines,
    the user's source numbered as written (kernel.cu), then `extra` (the launcher)."""
    head = '#include "tiledmm_kernel.h"\n'
    if backend == "emu":
        head += '#include "tiledmm_fault.h"\n'
        source = emu_dialect(source)
    return (head + "".join(d + "\n" for d in defines) +
            f'#line 1 "{SOURCE_NAME}"\n{source}\n{extra}')
