"""nvcc's command line where a user types it (issue 44): `python -m tiledmm run` and `%%cuda -c`.

`split` takes nvcc's common options, in either of nvcc's spellings (`-I DIR`, `-IDIR`,
`--include-path=DIR`...), apart from the files and tiledmm's own options, and writes them the
one way tm.run's compiler_args take them (`-IDIR`, `-DX=Y`, `-std=c++17`, `-arch=sm_90`,
`-Xcompiler X` as two words, `-lNAME`). Anything else that looks like an option is refused with
the list of what is taken. On emu, programs/run.py's emu_options says what each means there.
"""


class OptionError(ValueError):
    """An option tiledmm does not take; the message says which are taken."""


TAKEN = ("-I DIR, -D X[=Y], -U X, -std=..., -O0..-O3, -arch/-gencode/-code ..., -Xcompiler X, "
         "-l LIB, -L DIR, -g, -G, -lineinfo")

# option -> (its one spelling in compiler_args, how its value joins: "" attached, "=" with =,
# " " as a second word)
_VALUED = {
    "-I": ("-I", ""), "--include-path": ("-I", ""),
    "-D": ("-D", ""), "--define-macro": ("-D", ""),
    "-U": ("-U", ""), "--undefine-macro": ("-U", ""),
    "-l": ("-l", ""), "--library": ("-l", ""),
    "-L": ("-L", ""), "--library-path": ("-L", ""),
    "-std": ("-std", "="), "--std": ("-std", "="),
    "-arch": ("-arch", "="), "--gpu-architecture": ("-arch", "="),
    "-gencode": ("-gencode", "="), "--generate-code": ("-gencode", "="),
    "-code": ("-code", "="), "--gpu-code": ("-code", "="),
    "-Xcompiler": ("-Xcompiler", " "), "--compiler-options": ("-Xcompiler", " "),
}
_FLAGS = {"-g": "-g", "--debug": "-g", "-G": "-G", "--device-debug": "-G",
          "-lineinfo": "-lineinfo", "--generate-line-info": "-lineinfo"}
_OPTIMIZE = ("-O0", "-O1", "-O2", "-O3")


def _valued(option, value):
    spelling, join = _VALUED[option]
    return [spelling, value] if join == " " else [spelling + join + value]


def split(argv, own_valued=(), own_flags=()):
    """(compiler_args, the other words: files and tiledmm's own options with their values) of
    argv. own_valued / own_flags: tiledmm's own options (kept among the other words). Raises
    OptionError for an option neither nvcc's common ones nor tiledmm's."""
    compiler_args, rest = [], []
    i = 0
    while i < len(argv):
        a = str(argv[i])
        nxt = str(argv[i + 1]) if i + 1 < len(argv) else None
        name, eq, value = a.partition("=")
        if a in own_flags:
            rest.append(a)
        elif a in own_valued or (eq and name in own_valued):
            rest.append(a)
            if not eq and nxt is not None:
                rest.append(nxt)
                i += 1
        elif not a.startswith("-") or a == "-":
            rest.append(a)
        elif a in _FLAGS:
            compiler_args.append(_FLAGS[a])
        elif a in _OPTIMIZE or a == "-O":
            compiler_args.append("-O3" if a == "-O" else a)
        elif a in _VALUED:
            if nxt is None:
                raise OptionError(f"{a} needs a value")
            compiler_args += _valued(a, nxt)
            i += 1
        elif eq and name in _VALUED:
            compiler_args += _valued(name, value)
        elif a[:2] in ("-I", "-D", "-U", "-l", "-L") and len(a) > 2:
            compiler_args.append(a)
        else:
            raise OptionError(f"{a} is not an option tiledmm takes; it takes nvcc's {TAKEN}")
        i += 1
    return compiler_args, rest
