"""check=True on the cuda backend: the program run under compute-sanitizer's memcheck, then its
initcheck, unconfined (compute-sanitizer cannot launch its target inside the sandbox), each
tool's findings as check mode's problems. (On emu, check mode is a build of its own:
programs/run.py.)"""
import os
import re
import sys

from .. import _toolkit
from ..confine import sandbox
from .report import PACKAGE_PARENT, ProgramResult, launches, read_report


def check_options(check, profile, backend):
    if check and profile:
        raise ValueError("tm.run: check=True and profile=True do not go together (check mode's "
                         "checked accesses would be counted); run the program once with each")
    if check and backend == "cuda" and compute_sanitizer() is None:
        raise RuntimeError("tm.run(check=True) on the cuda backend runs the program under "
                           "compute-sanitizer, which was not found (it ships with the CUDA "
                           "toolkit: put it on PATH or set CUDA_HOME); to check the program on "
                           "the CPU emulator instead, pass backend=\"emu\" (--backend emu)")


def compute_sanitizer():
    """compute-sanitizer's binary: the toolkit's <root>/compute-sanitizer/ first, since the
    sandbox lets no shell run and bin/compute-sanitizer is a shell script that starts it."""
    found = _toolkit.tool("compute-sanitizer", ("compute-sanitizer", "bin"))
    if found is None:
        return None
    real = os.path.realpath(found)
    with open(real, "rb") as f:
        script = f.read(2) == b"#!"
    if not script:
        return real
    binary = os.path.join(os.path.dirname(os.path.dirname(real)), "compute-sanitizer",
                          "compute-sanitizer")
    return binary if os.path.isfile(binary) and os.access(binary, os.X_OK) else None


# compute-sanitizer's tools, in order, and the options that make each report what check mode
# reports on emu (leaks at exit; every failed API call)
_SANITIZER_TOOLS = (("memcheck", ("--leak-check", "full", "--report-api-errors", "all")),
                    ("initcheck", ()))


def sanitizer_problems(log, tool):
    """compute-sanitizer's log as tiledmm: problems: each error's first line with the program's
    own frame (file:line) where the log gives one."""
    problems, current = [], None
    for raw in log.splitlines():
        line = raw.lstrip("=").strip()
        if not line or line.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY", "LEAK SUMMARY")):
            continue
        if raw.startswith("========= ") and not raw.startswith("=========     "):
            current = {"kind": "sanitizer", "file": "", "line": 0,
                       "message": f"compute-sanitizer {tool}: {line}"}
            problems.append(current)
        elif current is not None and not current["file"]:
            m = re.search(r"([\w./-]+\.(?:cu|cuh|cpp|h)):(\d+)", line)
            if m:
                current["file"], current["line"] = os.path.basename(m.group(1)), int(m.group(2))
    return problems


def run_sanitized(image, source_name, args, stdin, timeout, capture=True):
    """The program run under compute-sanitizer's memcheck, then its initcheck (cuda, check=True):
    the program's output is memcheck's run; each tool's findings follow as tiledmm: lines."""
    sanitizer = compute_sanitizer()
    first, problems, lines = None, [], []
    for tool, options in _SANITIZER_TOOLS:
        with sandbox.scratch("program-check") as scratch:
            so = os.path.join(scratch, "program.so")
            with open(os.open(so, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700), "wb") as f:
                f.write(image)
            report, log = os.path.join(scratch, "report.jsonl"), os.path.join(scratch, "tool.log")
            code = (f"import sys; sys.path.insert(0, {PACKAGE_PARENT!r}); "
                    "from tiledmm.programs import main as program_main; "
                    "sys.exit(program_main.main(sys.argv[1:]))")
            argv = [sanitizer, "--tool", tool, *options, "--log-file", log, sys.executable, "-c",
                    code, so, report, "cuda", source_name, "--", *[str(a) for a in args]]
            feed = (stdin.encode() if isinstance(stdin, str) else stdin) if stdin is not None \
                else (b"" if capture or first is not None else None)
            # unconfined: compute-sanitizer cannot launch its target inside the sandbox (docs)
            done = sandbox.run_unconfined(argv, cwd=scratch, stdin=feed,
                                           timeout=None if timeout is None else timeout * 20,
                                           capture=capture or first is not None)
            try:
                found = sanitizer_problems(
                    sandbox.read_bounded(log, 1 << 20).decode(errors="replace"), tool)
            except OSError:
                found = []
            records = read_report(report)
        problems += found
        lines += [f"tiledmm: {p['file']}:{p['line']}: {p['message']}" if p["file"] else
                  f"tiledmm: {p['message']}" for p in found]
        if first is None:
            first = (done, records)
    done, records = first
    stderr = (done.stderr or b"").decode(errors="replace")
    if lines:
        stderr += ("" if not stderr or stderr.endswith("\n") else "\n") + "\n".join(lines) + "\n"
    return ProgramResult((done.stdout or b"").decode(errors="replace"), stderr, done.returncode,
                         done.timed_out, launches(records, "cuda"), "cuda", problems)
