"""Jupyter's `%%cuda` magics (`%load_ext tiledmm`): nvcc4jupyter's magics on top of tm.run.

A notebook written for nvcc4jupyter runs after one change, `%load_ext nvcc4jupyter` ->
`%load_ext tiledmm`, with a GPU (backend cuda: nvcc) or without one (backend emu: the CPU
emulator). The options are nvcc4jupyter's (its parsers.py: -t, -p, -l, -a, -c; -n and -g for
groups) and tiledmm's own (--backend, --check, --timeout, --args, --stdin). A cell is saved as
a file `cell.cu` whose first line is the magic's line (as a comment), so compile errors name
the cell's own lines as Jupyter numbers them. Groups are folders of a work folder; the group
`shared` is compiled with, and its headers seen by, every program, `%%cuda` cells included.
"""
import argparse
import atexit
import enum
import functools
import html
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import timeit as timeit_module
import uuid

from .programs import nvcc_args
from .programs import run as programs
from .programs.report import PACKAGE_PARENT, ProgramResult
from .confine import sandbox
from . import _toolkit
from ._backend import cuda_device_count, get_backend
from .confine.isolation import default_timeout
from .errors import CompileError

SHARED_GROUP = "shared"
CELL_FILE = "cell.cu"
SOURCE_ENDINGS = (".cu", ".h")
# profile mode's counters shown per launch with --profile on emu (the rest: launch.profile)
PROFILE_COLUMNS = (("global_load_requests", "gld req"), ("global_load_sectors", "gld sectors"),
                   ("global_store_requests", "gst req"), ("global_store_sectors", "gst sectors"),
                   ("shared_load_bank_conflicts", "shared ld conflicts"),
                   ("shared_store_bank_conflicts", "shared st conflicts"),
                   ("barriers", "barriers"), ("divergent_branches", "divergent branches"))


class Profiler(enum.Enum):
    """nvcc4jupyter's choice of profiler on the GPU: Nsight Compute or Nsight Systems."""
    NCU = "ncu"
    NSYS = "nsys"


_defaults = {"profiler": Profiler.NCU, "compiler_args": "", "profiler_args": ""}


def set_defaults(profiler=None, compiler_args=None, profiler_args=None):
    """nvcc4jupyter's set_defaults: the profiler, compiler and profiler arguments a magic uses
    when its line gives none (None keeps the current one)."""
    if profiler is not None:
        _defaults["profiler"] = Profiler(profiler)
    if compiler_args is not None:
        _defaults["compiler_args"] = str(compiler_args)
    if profiler_args is not None:
        _defaults["profiler_args"] = str(profiler_args)


# ---------------------------------------------------------------------------------------------
# the option parsers (nvcc4jupyter's options, then tiledmm's)

class _Parser(argparse.ArgumentParser):
    """argparse that raises (a magic must not end the kernel's interpreter) instead of exiting."""

    def error(self, message):
        raise ValueError(f"{self.prog}: {message}\n{self.format_usage()}".rstrip())


def _add_tiledmm_options(parser):
    parser.add_argument("--backend", choices=("emu", "cuda"), default=None,
                        help="where the program runs (default: tiledmm's default backend)")
    parser.add_argument("--check", action="store_true",
                        help="check mode: races, out-of-bounds accesses, uninitialised reads")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds before the program is stopped (default 60)")
    parser.add_argument("--args", default="", help='the program\'s argv, as a shell splits it')
    parser.add_argument("--stdin", default=None, help="text given to the program on stdin")


def get_parser_cuda():
    """%%cuda's options."""
    parser = _Parser(prog="%%cuda", description="compile and run the cell as a CUDA program")
    parser.add_argument("-t", "--timeit", action="store_true",
                        help="time the whole program (IPython's %%timeit) instead of its output")
    parser.add_argument("-p", "--profile", action="store_true",
                        help="emu: profile mode's counters and predicted time per launch; cuda: "
                             "run the program under ncu or nsys")
    parser.add_argument("-l", "--profiler", choices=[p.value for p in Profiler], default=None)
    parser.add_argument("-a", "--profiler-args", default=None)
    parser.add_argument("-c", "--compiler-args", default=None)
    _add_tiledmm_options(parser)
    return parser


def get_parser_cuda_group_run():
    parser = get_parser_cuda()
    parser.prog = "%cuda_group_run"
    parser.description = "compile and run a group's files (and the shared group's) as one program"
    parser.add_argument("-g", "--group", required=True)
    return parser


def get_parser_cuda_group_save():
    parser = _Parser(prog="%%cuda_group_save", description="save the cell as a file of a group")
    parser.add_argument("-n", "--name", required=True)
    parser.add_argument("-g", "--group", required=True)
    return parser


def get_parser_cuda_group_delete():
    parser = _Parser(prog="%cuda_group_delete", description="delete a group and its files")
    parser.add_argument("-g", "--group", required=True)
    return parser


# options whose value may itself begin with '-' (-c "-DN=8"): argparse would take it for an
# option, so the value is joined to its option (--compiler-args=-DN=8) before parsing
_VALUE_OPTIONS = {"-c": "--compiler-args", "--compiler-args": "--compiler-args",
                  "-a": "--profiler-args", "--profiler-args": "--profiler-args",
                  "--args": "--args", "--stdin": "--stdin"}


def _split_line(line):
    """The magic's line as tokens; quotes keep "-O2 -DN=8" together (as nvcc4jupyter)."""
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise ValueError(f"the magic's line cannot be read ({exc}): {line!r}") from None
    out, i = [], 0
    while i < len(tokens):
        if tokens[i] in _VALUE_OPTIONS and i + 1 < len(tokens):
            out.append(f"{_VALUE_OPTIONS[tokens[i]]}={tokens[i + 1]}")
            i += 2
        else:
            out.append(tokens[i])
            i += 1
    return out


def _emu_compiler_args(args):
    """The compiler arguments the emulator takes (tm.run's: -D, -U, -I, -O*, -std=; -arch and
    -gencode ignored); nvcc's others (-G, -lineinfo, -Xcompiler ...) are left out with one line
    that names them, so a notebook written for nvcc runs unchanged."""
    kept, ignored, i = [], [], 0
    while i < len(args):
        pair = args[i:i + 2] if args[i] in ("-D", "-U", "-I", "-arch", "-gencode", "-code",
                                            "--gpu-architecture", "-Xcompiler") else args[i:i + 1]
        try:
            programs.emu_options(pair)
            kept += pair
        except ValueError:
            ignored += pair
        i += len(pair)
    if ignored:
        _say(f"on emu the compiler arguments {' '.join(ignored)} are ignored (they are nvcc's; "
             "emu takes -D, -U, -I, -O and -std=)")
    return kept


# ---------------------------------------------------------------------------------------------
# output

def _launch_table(result, profiled):
    """The launches as a small HTML table (profile mode's counters with --profile on emu)."""
    from IPython.display import HTML   # IPython: only in a notebook's kernel
    esc = html.escape
    head = list(result.table_headers())   # kernel, grid, block, shared, ms, [predicted], [path]
    rows = [list(r) for r in result.table_rows()[:200]]
    if profiled:
        head += [label for _f, label in PROFILE_COLUMNS]
        for row, ln in zip(rows, result.launches):
            row += ["-" if ln.profile is None else f"{getattr(ln.profile, f):,.0f}"
                    for f, _label in PROFILE_COLUMNS]
    more = len(result.launches) - len(rows)
    body = "<table class='tiledmm-launches'><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head)
    body += "</tr>" + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>"
                              for r in rows) + "</table>"
    note = f"{len(result.launches)} launch{'es' if len(result.launches) != 1 else ''} on " \
           f"{esc(result.backend)}; ms: {esc(result.launches[0].clock)}"
    if more:
        note += f"; {more} more not shown"
    if profiled:
        note += "; predicted: tiledmm's model of an H100 from the counted traffic"
    return HTML(body + f"<p style='font-size:smaller'>{note}</p>")


def _show(result, profiled=False):
    """The program's stdout, its stderr (the notebook's stderr style), the launches, then a
    non-zero exit code in one line."""
    if result.stdout:
        sys.stdout.write(result.stdout if result.stdout.endswith("\n") else result.stdout + "\n")
        sys.stdout.flush()
    if result.stderr:
        sys.stderr.write(result.stderr if result.stderr.endswith("\n") else result.stderr + "\n")
        sys.stderr.flush()
    if result.launches:
        from IPython.display import display   # IPython: only in a notebook's kernel
        display(_launch_table(result, profiled))
    if result.returncode > 0:
        print(f"tiledmm: the program exited with code {result.returncode}", file=sys.stderr)


def _say(message):
    print(f"tiledmm: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# the profilers on the GPU (--profile on cuda)

def _profile_on_gpu(files, compiler_args, profiler, profiler_args, args, stdin, timeout):
    """Build the program for the GPU and run it under ncu or nsys as nvcc4jupyter does (the
    profiler's report follows the program's output)."""
    tool = _toolkit.tool(profiler.value)
    if tool is None:
        product = "Nsight Compute" if profiler is Profiler.NCU else "Nsight Systems"
        raise RuntimeError(f"--profile with {profiler.value} needs NVIDIA {product}'s "
                           f"'{profiler.value}', which was not found on PATH, in $CUDA_HOME/bin "
                           "or /usr/local/cuda/bin; install it or put its folder on PATH (or "
                           "run with --backend emu --profile for profile mode's counters)")
    source, name, folder, others, compiler_args = programs.read_sources(files, compiler_args)
    image, _meta, _origin = programs.build(source, name, "cuda", compiler_args, folder,
                                           extra_sources=others)
    with tempfile.TemporaryDirectory(prefix="tiledmm-profile-") as scratch:
        so = os.path.join(scratch, "program.so")
        with open(so, "wb") as f:
            f.write(image)
        report = os.path.join(scratch, "report.jsonl")
        runner = (f"import sys; sys.path.insert(0, {PACKAGE_PARENT!r}); "
                  "from tiledmm.programs import main as program_main; sys.exit(program_main.main(sys.argv[1:]))")
        # The profiler attaches to the program (injection, its own sockets), which the sandbox
        # refuses a confined process: under ncu or nsys the program runs outside it, as
        # tm.compile(..., profile=True)'s kernels do under ncu (tiledmm/profiling/ncu.py).
        tool_args = shlex.split(profiler_args)
        if profiler is Profiler.NSYS and (not tool_args or tool_args[0].startswith("-")):
            tool_args = ["profile", *(tool_args or ["--stats=true"])]   # nsys's subcommand
        argv = [tool, *tool_args, sys.executable, "-c", runner, so, report,
                "cuda", name, "--", *args]
        return _run_profiler(argv, (stdin or "").encode(), timeout)


def _run_profiler(argv, stdin, timeout):
    """(stdout, stderr, returncode, timed_out) of the profiler's run; its whole process group
    ended on every path (an interrupt too)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            env=sandbox.minimal_env())
    timed_out = False
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    return (out.decode(errors="replace"), err.decode(errors="replace"),
            -9 if timed_out else proc.returncode, timed_out)


# ---------------------------------------------------------------------------------------------
# the magics

@functools.lru_cache(maxsize=None)
def plugin_class():
    """The %%cuda magics' class, made on first use: IPython and traitlets are a notebook
    kernel's, imported only there (tiledmm imports this module in every process)."""
    from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
    from IPython.core.magics.execution import TimeitResult
    from traitlets import Unicode, observe, validate

    @magics_class
    class NVCCPlugin(Magics):
        """The %%cuda magics. Named as nvcc4jupyter's class, so that its configuration
        (`%config NVCCPlugin.wd = "folder"`) keeps working: `wd` is the folder groups are saved in."""

        wd = Unicode("", help="the folder where groups' files are saved (default: a new temporary "
                              "folder)").tag(config=True)

        def __init__(self, shell=None, **kw):
            super().__init__(shell=shell, **kw)
            if not self.wd:
                self.wd = tempfile.mkdtemp(prefix="tiledmm-cuda-")
                # the temporary folder goes with the kernel (one %config chose stays)
                atexit.register(shutil.rmtree, self.wd, ignore_errors=True)
            self._announced = False

        @validate("wd")
        def _wd_absolute(self, proposal):
            return os.path.abspath(proposal["value"]) if proposal["value"] else ""

        @observe("wd")
        def _wd_changed(self, change):
            if change["new"]:
                os.makedirs(change["new"], exist_ok=True)

        # -- helpers ---------------------------------------------------------------------------
        def _announce(self, backend):
            """With no GPU, the first magic says once which backend runs."""
            if self._announced:
                return
            self._announced = True
            if backend == "emu" and cuda_device_count() == 0:
                    _say("no GPU here: CUDA programs run on tiledmm's CPU emulator (backend emu); "
                         "their output is the program's, their times are CPU times")

        def _group_dir(self, group):
            if not group or group in (".", "..") or os.sep in group or "/" in group or \
                    group.startswith("."):
                raise ValueError(f"group {group!r}: a group's name is a plain name (no '/', no "
                                 "leading '.')")
            return os.path.join(self.wd, group)

        def _group_files(self, group):
            """(the group's .cu and .h files, its folder), the shared group's after the group's."""
            folder = self._group_dir(group)
            if not os.path.isdir(folder):
                raise ValueError(f"group {group!r} does not exist; save files in it first with "
                                 f"%%cuda_group_save -g {group} -n NAME.cu")
            files = self._files_of(folder)
            if not any(f.endswith(".cu") for f in files):
                raise ValueError(f"group {group!r} has no .cu file")
            if group != SHARED_GROUP:
                files += self._files_of(os.path.join(self.wd, SHARED_GROUP))
            return files, folder

        def _group_or_say(self, lookup, group):
            """lookup(group) (_group_dir: its folder; _group_files: its files and folder), or
            None after saying why the group cannot be used (no traceback for a typo)."""
            try:
                return lookup(group)
            except ValueError as exc:
                _say(str(exc))
                return None

        @staticmethod
        def _files_of(folder):
            if not os.path.isdir(folder):
                return []
            return sorted(os.path.join(folder, n) for n in os.listdir(folder)
                          if n.endswith(SOURCE_ENDINGS))

        def _options(self, line, parser):
            """The parsed line, or None after saying what is wrong (no traceback for a typo)."""
            try:
                return parser.parse_args(_split_line(line))
            except ValueError as exc:
                _say(str(exc))
                return None

        def _run(self, files, opts):
            """Compile and run `files` as one program with the options of %%cuda."""
            backend = opts.backend or get_backend()
            self._announce(backend)
            try:   # nvcc's command line, as `python -m tiledmm run` takes it
                compiler_args, others = nvcc_args.split(shlex.split(
                    opts.compiler_args if opts.compiler_args is not None
                    else _defaults["compiler_args"]))
                if others:
                    raise nvcc_args.OptionError(f"-c takes compiler options, not {others[0]!r} "
                                                f"(nvcc's {nvcc_args.TAKEN})")
            except nvcc_args.OptionError as exc:
                _say(str(exc))
                return None
            if backend == "emu":
                compiler_args = _emu_compiler_args(compiler_args)
            shared = os.path.join(self.wd, SHARED_GROUP)
            if os.path.isdir(shared):
                compiler_args.append(f"-I{shared}")
            profiler = Profiler(opts.profiler) if opts.profiler else _defaults["profiler"]
            profiler_args = opts.profiler_args if opts.profiler_args is not None \
                else _defaults["profiler_args"]
            timeout = default_timeout() if opts.timeout is None else opts.timeout
            argv = shlex.split(opts.args)
            try:
                if opts.profile and backend == "cuda" and not opts.timeit:
                    out, err, code, timed_out = _profile_on_gpu(
                        files, compiler_args, profiler, profiler_args, argv, opts.stdin, timeout)
                    _show(ProgramResult(out, err, code, timed_out, [], backend))
                    return
                profile = bool(opts.profile) and not opts.timeit
                if profile and profiler_args:
                    _say(f"--profiler-args {profiler_args!r} are ncu's or nsys's: ignored on emu")
                if profile and profiler is Profiler.NSYS:
                    _say("--profiler nsys is not available on emu (it traces a GPU's timeline); "
                         "--profile on emu shows profile mode's counters and predicted times")
                    profile = False

                def once():
                    return programs.run(files, args=argv, stdin=opts.stdin, backend=backend,
                                        check=opts.check, profile=profile, timeout=timeout,
                                        compiler_args=compiler_args)

                result = once()   # builds (or finds in the cache), runs, shows its output
                if opts.timeit:
                    self._timeit(once, result)
                else:
                    _show(result, profiled=profile)
            except CompileError as exc:
                sys.stderr.write((exc.log or str(exc)).rstrip("\n") + "\n")
                _say("the program does not compile (the lines above are the compiler's)")
            except (ValueError, RuntimeError, NotImplementedError, FileNotFoundError,
                    TypeError) as exc:
                _say(str(exc))
            except KeyboardInterrupt:
                _say("interrupted: the program was stopped")
                raise

        def _timeit(self, once, first):
            """nvcc4jupyter's -t: IPython's %timeit of the whole program (the build cached), shown
            instead of its output; a program that fails shows its output instead."""
            if first.returncode != 0:
                _show(first)
                return
            timer = timeit_module.Timer(once)
            number, _elapsed = timer.autorange()
            runs = [t / number for t in timer.repeat(repeat=7, number=number)]
            result = TimeitResult(number, 7, min(runs), max(runs), [r * number for r in runs], 0, 3)
            print(result)

        # -- the magics ------------------------------------------------------------------------
        @cell_magic
        def cuda(self, line, cell):
            """%%cuda [-c "ARGS"] [-t] [-p [-l ncu|nsys] [-a "ARGS"]] [--backend emu|cuda] [--check]
            [--timeout S] [--args "..."] [--stdin "..."]: compile and run the cell as a program,
            with the shared group's files."""
            opts = self._options(line, get_parser_cuda())
            if opts is None:
                return
            folder = os.path.join(self.wd, ".cells", uuid.uuid4().hex)
            os.makedirs(folder)
            try:
                path = os.path.join(folder, CELL_FILE)
                with open(path, "w", encoding="utf-8") as f:
                    # the magic's line as line 1: the cell's lines are the file's
                    f.write(f"// %%cuda {line}\n{cell}")
                self._run([path] + self._files_of(os.path.join(self.wd, SHARED_GROUP)), opts)
            finally:
                shutil.rmtree(folder, ignore_errors=True)

        @cell_magic
        def cuda_group_save(self, line, cell):
            """%%cuda_group_save -n NAME(.cu|.h) -g GROUP: save the cell as a file of a group."""
            opts = self._options(line, get_parser_cuda_group_save())
            if opts is None:
                return
            name = opts.name
            if not name.endswith(SOURCE_ENDINGS) or os.path.basename(name) != name or \
                    name.startswith("."):
                _say(f"file name {name!r}: give a plain name ending in .cu or .h")
                return
            folder = self._group_or_say(self._group_dir, opts.group)
            if folder is None:
                return
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                f.write(f"// %%cuda_group_save {line}\n{cell}")

        @line_magic
        def cuda_group_run(self, line):
            """%cuda_group_run -g GROUP [%%cuda's options]: compile and run the group's files (and
            the shared group's) as one program."""
            opts = self._options(line, get_parser_cuda_group_run())
            if opts is None:
                return
            found = self._group_or_say(self._group_files, opts.group)
            if found is None:
                return
            self._run(found[0], opts)

        @line_magic
        def cuda_group_delete(self, line):
            """%cuda_group_delete -g GROUP: delete the group's files."""
            opts = self._options(line, get_parser_cuda_group_delete())
            if opts is None:
                return
            folder = self._group_or_say(self._group_dir, opts.group)
            if folder is None:
                return
            shutil.rmtree(folder, ignore_errors=True)

    return NVCCPlugin


def load_ipython_extension(shell):
    """`%load_ext tiledmm`: registers the magics (IPython calls it)."""
    plugin = plugin_class()(shell=shell)
    shell.configurables.append(plugin)
    shell.register_magics(plugin)
