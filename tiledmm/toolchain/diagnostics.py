"""What tiledmm says about a user kernel: the compilers' warnings as CompileWarning at the
user's line numbers, and the compile error's headline, all about the user's source as written
(file name 'kernel.cu'). The exceptions themselves are tiledmm/errors.py's."""
import re
import warnings

from ..errors import CompileError, CompileWarning

SOURCE_NAME = "kernel.cu"       # the file name diagnostics show for the user's source


def line_col(source, pos):
    """(line, column), both from 1, of offset `pos` in `source`."""
    line = source.count("\n", 0, pos) + 1
    return line, pos - (source.rfind("\n", 0, pos) + 1) + 1


_GCC_DIAG_RE = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)? "
                          r"(?P<sev>warning|error|note): (?P<msg>.*)$", re.M)
_NVRTC_DIAG_RE = re.compile(r"^(?P<file>[^(\n]+)\((?P<line>\d+)\): (?P<sev>warning|error)"
                            r"(?: (?P<num>#\d+-D))?: (?P<msg>.*)$", re.M)


def parse_warnings(log, backend):
    """[(line, column or None, message)] for the compiler's warnings about the user's source
    (kernel.cu), without those about tiledmm's own text (check mode's rewriting included)."""
    out = []
    rx = _GCC_DIAG_RE if backend == "emu" else _NVRTC_DIAG_RE
    for m in rx.finditer(log or ""):
        if m.group("sev") != "warning" or m.group("file").strip() != SOURCE_NAME:
            continue
        msg = m.group("msg").strip()
        if re.search(r"\btm_\w+|tiledmm", msg):
            continue
        num = m.groupdict().get("num")
        col = m.groupdict().get("col")
        item = (int(m.group("line")), int(col) if col else None,
                f"{msg} ({num})" if num else msg)
        flag = re.search(r"\[-W[\w-]+\]$", msg)
        # one warning per place and kind: g++ says both "unused variable" and "defined but not
        # used" of an unused __shared__ array (a static variable on the emulator)
        if not any(o[:2] == item[:2] and (o[2] == item[2] or (flag and o[2].endswith(flag.group(0))))
                   for o in out):
            out.append(item)
    return out


def emit_warnings(items, kernel, backend):
    """Issue each (line, column, message) as a CompileWarning at kernel.cu:line."""
    for line, col, msg in items:
        where = f"{SOURCE_NAME}:{line}:{col}" if col else f"{SOURCE_NAME}:{line}"
        warnings.warn_explicit(CompileWarning(f"{where}: kernel '{kernel}' ({backend}): {msg}"),
                               CompileWarning, SOURCE_NAME, line)


def compile_error(name, backend, log):
    log = log.strip()
    lines = log.splitlines()
    errors = [ln for ln in lines if "error" in ln]
    own = [ln for ln in errors if ln.startswith(SOURCE_NAME)]
    head = own[0] if own else errors[0] if errors else (lines[0] if lines else "no diagnostics")
    if not own and errors and "tiledmm-launcher" in errors[0] and "expected" in errors[0]:
        head = (f"the kernel's text does not end where it should (the error shows in the code "
                f"tiledmm adds after it): check the end of '{name}' for a missing '}}' or ';'"
                f"\n{head}")
    return CompileError(f"kernel '{name}' does not compile ({backend}): {head}\n\n{log}", log)
