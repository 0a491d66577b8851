"""What a program run hands back (tm.run): ProgramResult and its ProgramLaunch rows, read from
the report file the confined program wrote (JSON lines, checked as data and bounded), the
`tiledmm:` lines for its faults and signals, and check mode's findings.
"""
import dataclasses
import html
import json
import os
import shutil
import signal

from ..confine import sandbox
from ..profiling.counters import Profile

# The folder that holds tiledmm/: frames in tiledmm's own files are not the program's, and
# compute-sanitizer's child (programs/sanitize.py) imports tiledmm from there
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What the build child says of the kernels' paths (kernel -> why fibers, "" when split): its
# answer is checked as data, bounded in count and length.
PATHS_MOST, PATH_NAME_CHARS, PATH_REASON_CHARS = 1000, 200, 500

_SIGNAL_NAMES = {signal.SIGSEGV: "segmentation fault", signal.SIGBUS: "bus error",
                 signal.SIGFPE: "floating-point exception", signal.SIGILL: "illegal instruction",
                 signal.SIGABRT: "aborted", signal.SIGKILL: "killed", signal.SIGTERM: "terminated",
                 # the sandbox's refusal (tiledmm/confine/sandbox.py): exec, fork, a socket, ptrace...
                 signal.SIGSYS: "the sandbox refused a system call: a program may compute and "
                                "print, not start programs, open sockets or reach other "
                                "processes"}


@dataclasses.dataclass(frozen=True)
class ProgramLaunch:
    """One kernel launch of a program: the kernel's name, grid and block (x, y, z), dynamic
    shared bytes, its time in ms (None where unknown), and `clock`, what measured it:
    "cuda events" on cuda, "emulator wall time (CPU)" on emu. `error` is the launch's CUDA
    error code (0: none). With tm.run(..., profile=True) on emu, `profile` is the launch's
    counted traffic (a tm.profile.Profile) and `predicted_ms` the H100 time predicted from it.
    On emu, `path` says how the launch ran: "thread loops" (the kernel split at its barriers)
    or "fibers", with `path_reason` saying why fibers."""
    kernel: str
    grid: tuple
    block: tuple
    shared_bytes: int
    ms: float
    clock: str
    error: int = 0
    profile: object = None        # profile=True on emu: the launch's tm.profile.Profile
    predicted_ms: float = None    # profile=True on emu: the H100 time predicted from it
    # emu: "thread loops" (the kernel split at its barriers, issue 34) or "fibers"; None on
    # cuda and for a launch that did not run. path_reason: why fibers ("" for thread loops).
    path: str = None
    path_reason: str = ""


@dataclasses.dataclass
class ProgramResult:
    """What a program did: its stdout and stderr (text), its returncode (negative for a
    signal, -9 after its timeout), whether it timed out, and its kernel launches. tiledmm's own
    diagnostics are the stderr lines that begin with `tiledmm:`."""
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    launches: list
    backend: str = "emu"
    # check=True: what check mode found (each also a `tiledmm:` line of stderr), as dicts with
    # kind ("kernel", "api_error", "unchecked", "leak", "sanitizer"), file, line and message
    problems: list = dataclasses.field(default_factory=list)
    # the files the program wrote in its working folder, {relative path: bytes} (bounded:
    # tiledmm/programs/workdir.py); the CLI writes them back beside the program
    files: dict = dataclasses.field(default_factory=dict)

    @property
    def paths(self):
        """{kernel: (path, path_reason)} of the launches that ran (emu; the last launch of each
        kernel): how each kernel ran, "thread loops" or "fibers" and why."""
        return {ln.kernel: (ln.path, ln.path_reason) for ln in self.launches
                if ln.path is not None}

    def table_headers(self):
        """The launch table's column names (repr, the HTML views, the %%cuda magics)."""
        head = ("kernel", "grid", "block", "shared", "ms")
        head += ("predicted H100 ms",) if self._profiled() else ()
        return head + ("path",) if self._pathed() else head

    def _profiled(self):
        return any(ln.profile is not None for ln in self.launches)

    def _pathed(self):
        return any(ln.path is not None for ln in self.launches)

    def table_rows(self):
        """The launch table's rows, one tuple of text cells per launch."""
        rows = []
        for ln in self.launches:
            row = (ln.kernel, "x".join(map(str, ln.grid)), "x".join(map(str, ln.block)),
                   str(ln.shared_bytes), "-" if ln.ms is None else f"{ln.ms:.3f}")
            if self._profiled():
                row += ("-" if ln.predicted_ms is None else f"{ln.predicted_ms:.4f}",)
            if self._pathed():
                row += (ln.path or "-",)
            rows.append(row)
        return rows

    def __repr__(self):
        out = self.stdout
        if out and not out.endswith("\n"):
            out += "\n"
        err = self.stderr
        if err and not err.endswith("\n"):
            err += "\n"
        head = f"<ProgramResult returncode={self.returncode}"
        head += " timed_out" if self.timed_out else ""
        head += f" backend={self.backend}, {len(self.launches)} launch"
        head += "es>" if len(self.launches) != 1 else ">"
        parts = [head, out + err]
        rows = self.table_rows()
        if rows:
            hdr = self.table_headers()
            shown = rows[:20]
            widths = [max(len(r[i]) for r in [hdr] + shown) for i in range(len(hdr))]
            lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))) for r in [hdr] + shown]
            if len(rows) > len(shown):
                lines.append(f"... {len(rows) - len(shown)} more launches")
            lines.append(f"(ms: {self.launches[0].clock})")
            parts.append("\n".join(lines))
        return "\n".join(p.rstrip("\n") for p in parts if p)

    def _repr_html_(self):
        esc = html.escape
        body = f"<pre>{esc(self.stdout)}</pre>"
        if self.stderr:
            body += f"<pre style='color:#a00'>{esc(self.stderr)}</pre>"
        body += f"<p>returncode {self.returncode}{' (timed out)' if self.timed_out else ''}, " \
                f"backend {esc(self.backend)}</p>"
        rows = self.table_rows()
        if rows:
            body += "<table><tr>" + "".join(f"<th>{h}</th>" for h in self.table_headers()) + "</tr>"
            body += "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>"
                            for r in rows[:200])
            body += f"</table><p>ms: {esc(self.launches[0].clock)}</p>"
        return body


# The most of a program's report file read, and the most records taken from it (each launch
# record becomes a ProgramLaunch)
REPORT_MOST, RECORDS_MOST = 16 << 20, 20000


def read_report(path):
    """The report file's records (JSON objects); a malformed line (the program could write
    there) is skipped."""
    records = []
    try:   # the program's folder: never a link followed, a FIFO waited on, or more than this
        data = sandbox.read_bounded(path, REPORT_MOST)
    except OSError:
        return records
    for line in data.splitlines():
        if len(records) >= RECORDS_MOST:
            break
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("event"), str):
            records.append(rec)
    return records


PATHS = ("thread loops", "fibers")
# A fibers launch of a kernel the build split, whose launch named the kernel itself
_UNNAMED_SPLIT = ("the launch does not name the kernel's split (a kernel of another file, or "
                  "launched through a pointer)")


def launch_path(r, paths):
    """(path, path_reason) of a launch record: the path the runtime reports if it is one of
    PATHS (None otherwise: cuda, or a launch that did not run); the reason the runtime gives,
    else the build's for the kernel (`paths`)."""
    path, reason = r.get("path"), r.get("path_reason")
    if path not in PATHS:
        return None, ""
    if path == "thread loops":
        return path, ""
    reason = reason[:PATH_REASON_CHARS] if isinstance(reason, str) else ""
    return path, reason or paths.get(str(r.get("kernel")), "") or _UNNAMED_SPLIT


def launches(records, backend, paths=None):
    """ProgramLaunch per launch record (records out of schema skipped); paths: the build's
    {kernel: why fibers} (build's meta)."""
    clock = "cuda events" if backend == "cuda" else "emulator wall time (CPU)"
    paths = paths or {}
    out = []
    for r in records:
        if r.get("event") != "launch":
            continue
        try:
            ms = r.get("ms")
            launch = ProgramLaunch(str(r.get("kernel", "?")), tuple(int(v) for v in r["grid"]),
                                   tuple(int(v) for v in r["block"]),
                                   int(r.get("shared_bytes", 0)),
                                   None if ms is None or ms < 0 else float(ms), clock,
                                   int(r.get("error", 0)), None, None,
                                   *launch_path(r, paths))
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(r.get("profile"), dict):
            profile = _profile_of(r["profile"], launch)
            predicted = None
            if profile is not None:
                try:
                    predicted = profile.predict("H100").ms
                except (ValueError, ArithmeticError, KeyError):
                    predicted = None
            launch = dataclasses.replace(launch, profile=profile, predicted_ms=predicted)
        out.append(launch)
    return out


_PROFILE_INTS = {"launches", "blocks", "blocks_profiled", "threads_profiled", "warps_profiled"}


def _profile_of(counts, launch):
    """A Profile from one launch's counters (the program's report: numbers only), or None."""
    names = [f.name for f in dataclasses.fields(Profile)]
    counted = names[:names.index("sampled")]
    try:
        kw = {k: (int(round(float(counts[k]))) if k in _PROFILE_INTS else float(counts[k]))
              for k in counted}
    except (KeyError, TypeError, ValueError):
        return None
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    return Profile(**kw, kernel=launch.kernel, family="program", threads_per_block=threads,
                   shared_bytes=launch.shared_bytes)


def _source_lines(so_path, offsets, scratch):
    """addr2line's file:line for offsets in the program's shared object, run confined."""
    tool = shutil.which("addr2line")
    if not tool or not offsets:
        return []
    done = sandbox.run([tool, "-e", so_path, *[hex(o) for o in offsets]],
                        sandbox.compile_policy(scratch, read=(so_path,)), cwd=scratch, timeout=60)
    if done.returncode != 0:
        return []
    return [ln.split(" (discriminator")[0].strip()
            for ln in (done.stdout or b"").decode(errors="replace").splitlines()]


def diagnostics(records, so_path, scratch, source_name):
    """tiledmm: lines for the faults the report records."""
    lines = []
    for r in records:
        if r.get("event") == "kernel_fault" and isinstance(r.get("signal"), int):
            sig = r["signal"]
            what = {signal.SIGABRT: "a failed assert or abort()",
                    signal.SIGFPE: "an integer division by zero",
                    signal.SIGILL: "__trap() or an illegal instruction",
                    signal.SIGTRAP: "a trap", signal.SIGBUS: "a bus error"}.get(sig, "a signal")
            lines.append(f"tiledmm: kernel '{str(r.get('kernel'))[:200]}' ended the program "
                         f"({what}); on a GPU the launch fails and the program's next "
                         "synchronising call returns its error")
        elif r.get("event") == "kernel_fault":
            where = ("outside every device allocation" if r.get("device_memory") else
                     "outside device memory")
            lines.append(f"tiledmm: kernel '{str(r.get('kernel'))[:200]}' made an invalid memory "
                         f"access ({where}); on a GPU the launch fails and the program's next "
                         "synchronising call returns cudaErrorIllegalAddress, on the emulator the "
                         "program ends here")
        if r.get("event") != "host_access":
            continue
        frames = [int(x) for x in r.get("frames", []) if isinstance(x, int) and x >= 0][:8]
        located = [loc.rsplit(":", 1) for loc in _source_lines(so_path, frames, scratch)
                   if ":" in loc and not loc.startswith("??")]
        # the innermost frame in the program's own file, else in any file but tiledmm's
        ours = [f for f in located if os.path.basename(f[0]) == source_name and f[1] != "0"] or \
            [f for f in located if not f[0].startswith(PACKAGE_PARENT) and f[1] != "0"]
        where = f"{os.path.basename(ours[0][0])}:{ours[0][1]}" if ours else None
        access = r.get("access") if r.get("access") in ("read", "wrote", "accessed") else "accessed"
        alloc = ""
        if r.get("alloc_by"):
            alloc = (f" (allocated by {r['alloc_by']} at "
                     f"{os.path.basename(str(r.get('alloc_file')))}:{int(r.get('alloc_line', 0))})")
        else:
            alloc = " (memory no live allocation holds: freed, or never allocated)"
        lines.append(f"tiledmm: host code {access} device memory at {where or source_name}{alloc}; "
                     "host code reaches device memory only through cudaMemcpy (or use "
                     "cudaMallocManaged)")
    return lines


def signal_line(returncode):
    if returncode >= 0 or returncode == -9:
        return None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    what = _SIGNAL_NAMES.get(-returncode, "")
    return f"tiledmm: the program was ended by {name}{' (' + what + ')' if what else ''}"


def problems(records):
    """check mode's findings from the report file (numbers and text only)."""
    out = []
    for r in records:
        if r.get("event") == "check" and isinstance(r.get("message"), str):
            line = r.get("line")
            out.append({"kind": str(r.get("kind", "")), "file": str(r.get("file", "")),
                        "line": line if isinstance(line, int) else 0,
                        "message": r["message"][:4000]})
    return out
