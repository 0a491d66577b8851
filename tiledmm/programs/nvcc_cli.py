"""`tiledmm-nvcc`: nvcc's command line for a course's Makefile (issue 44), so that
`make NVCC=tiledmm-nvcc` builds and runs the course's programs on a laptop without a GPU.

    tiledmm-nvcc [nvcc's options] -c kernel.cu -o kernel.o      an object: what to build
    tiledmm-nvcc [nvcc's options] main.o kernel.o -o app         an executable
    tiledmm-nvcc [nvcc's options] main.cu kernel.cu -o app       both at once

An object written here is a small JSON record (the source's path and the options), not
machine code: the program is built when it is linked, through tm.run's build (cached), for
the backend of $TILEDMM_BACKEND (the default: cuda where a GPU is present, else emu). The
executable is a Python script that runs that program as `python -m tiledmm run` does (confined,
in a working folder of links to the program's folder; the files it writes come back into the
folder it is run from). Objects the host compiler made (g++ -c of a .cpp) cannot be linked
here: compile those files with $(NVCC) as well. `-dc` is taken as `-c`.
"""
import json
import os
import shlex
import stat
import sys

from . import nvcc_args
from .run import run_cli

OBJECT_MAGIC = "tiledmm-nvcc object 1\n"
_OWN_VALUED = ("-o", "--output-file", "-x", "--x")
_OWN_FLAGS = ("-c", "--compile", "-dc", "--device-c", "-h", "--help")
_SOURCES = (".cu", ".cpp", ".cc", ".cxx", ".c")
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class UsageError(Exception):
    """A command line tiledmm-nvcc cannot follow; the message says why."""


def _parse(argv):
    """(compiler_args, files, output, compile_only) of the command line."""
    compiler_args, rest = nvcc_args.split(argv, _OWN_VALUED, _OWN_FLAGS)
    files, output, compile_only, i = [], None, False, 0
    while i < len(rest):
        a = rest[i]
        name, eq, value = a.partition("=")
        if a in ("-c", "--compile", "-dc", "--device-c"):
            compile_only = True
        elif a in ("-h", "--help"):
            raise UsageError(__doc__)
        elif name in ("-o", "--output-file"):
            if not eq and i + 1 >= len(rest):
                raise UsageError("-o needs a file name")
            output = value if eq else rest[i + 1]
            i += 0 if eq else 1
        elif name in ("-x", "--x"):
            i += 0 if eq else 1   # the language: every source is CUDA C++ here
        else:
            files.append(a)
        i += 1
    if not files:
        raise UsageError("no input files")
    return compiler_args, files, output, compile_only


def _write_object(source, compiler_args, output):
    with open(output, "w") as f:
        f.write(OBJECT_MAGIC)
        json.dump({"source": os.path.abspath(source), "compiler_args": compiler_args}, f)


def _read_object(path):
    """(source path, compiler_args) of an object written here; UsageError for anything else."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(len(OBJECT_MAGIC))
            record = json.loads(f.read(1 << 20)) if head == OBJECT_MAGIC else None
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("source"), str):
        raise UsageError(f"{path} is not an object tiledmm-nvcc wrote (an object of the host "
                         "compiler cannot be linked here: compile that file with tiledmm-nvcc "
                         "-c too)")
    return record["source"], [str(a) for a in record.get("compiler_args", [])]


def _write_executable(sources, compiler_args, output):
    """The executable: a script that runs the program through `python -m tiledmm run`'s path."""
    spec = json.dumps({"sources": sources, "compiler_args": compiler_args})
    text = (f"#!{shlex.quote(sys.executable)}\n"
            "# Made by tiledmm-nvcc: runs this CUDA program through tiledmm (python -m tiledmm "
            "run).\nimport sys\n"
            f"sys.path.insert(0, {PACKAGE_PARENT!r})\n"
            "from tiledmm.programs.nvcc_cli import run_executable\n"
            f"sys.exit(run_executable({spec!r}, sys.argv[1:]))\n")
    with open(output, "w") as f:
        f.write(text)
    mode = os.stat(output).st_mode
    os.chmod(output, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def run_executable(spec, argv):
    """What an executable made here does: builds (cached) and runs its program on the
    terminal, with argv, the files it writes coming back into the current folder."""
    spec = json.loads(spec)
    return run_cli(spec["sources"], compiler_args=spec["compiler_args"], args=argv,
                   outdir=os.getcwd())


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        compiler_args, files, output, compile_only = _parse(argv)
        if compile_only:
            if output is not None and len(files) > 1:
                raise UsageError("-o with -c names one object: give one source file")
            for source in files:
                if not source.endswith(_SOURCES):
                    raise UsageError(f"{source}: -c takes CUDA or C++ source files")
                if not os.path.isfile(source):
                    raise UsageError(f"{source}: no such file")
                _write_object(source, compiler_args,
                              output or os.path.splitext(os.path.basename(source))[0] + ".o")
            return 0
        sources, args, seen = [], list(compiler_args), []   # the objects' own options
        for f in files:
            if f.endswith(_SOURCES):
                if not os.path.isfile(f):
                    raise UsageError(f"{f}: no such file")
                sources.append(os.path.abspath(f))
            else:
                source, recorded = _read_object(f)
                sources.append(source)
                if recorded != compiler_args and recorded not in seen:
                    seen.append(recorded)
                    args += recorded
        _write_executable(sources, args, output or "a.out")
        return 0
    except (UsageError, nvcc_args.OptionError) as exc:
        print(f"tiledmm-nvcc: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
