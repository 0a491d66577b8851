"""Reading a user kernel's source: its `__global__` signatures and parameters, the text the
compilers see (tiledmm's prelude, then the user's lines numbered as written), and the errors
that speak about it.

The signature is read with a regular expression over the source with comments and literals
blanked out; what it cannot read (array or reference parameters, templates) is refused with a
message naming the parameter and its line.
"""
import re

import numpy as np

SOURCE_NAME = "kernel.cu"       # the file name diagnostics show for the user's source


class CompileError(ValueError):
    """The compiler rejected the kernel source. `.log` holds its diagnostics; line numbers are
    those of the source passed to `tm.compile` (file name 'kernel.cu')."""

    def __init__(self, message, log=""):
        super().__init__(message)
        self.log = log


class KernelError(RuntimeError):
    """A launch of a user kernel failed: the emulator's report (barrier, check mode's
    out-of-bounds access or shared-memory race), a fault of the kernel (an access outside an
    argument's buffer, abort, a timeout), or the CUDA runtime's error."""



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


_GLOBAL_RE = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^()]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^()]*\)\s*)?([A-Za-z_]\w*)\s*\(([^()]*)\)")


def _line_of(source, pos):
    return source.count("\n", 0, pos) + 1


def parse_kernels(source):
    """{name: [Param, ...]} for every `__global__ void name(...)` in the source."""
    blank = blank_source(source)
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


def full_source(source, extra=""):
    return f'#include "tiledmm_kernel.h"\n#line 1 "{SOURCE_NAME}"\n{source}\n{extra}'


def compile_error(name, backend, log):
    log = log.strip()
    lines = log.splitlines()
    errors = [ln for ln in lines if "error" in ln]
    head = errors[0] if errors else (lines[0] if lines else "no diagnostics")
    return CompileError(f"kernel '{name}' does not compile ({backend}): {head}\n\n{log}", log)
