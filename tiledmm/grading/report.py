"""What tm.grade returns: the cases with their points, the compile step, the argument mapping,
the launch and the speed part; printed as a table, rendered in Jupyter, and as a dict for the
JSON, JUnit and Gradescope writers (tiledmm/grading/outputs.py)."""
import html

from . import outputs

__all__ = ["GradeReport"]


def _fmt(v):
    if isinstance(v, float):
        return "-" if v != v else f"{v:.3g}"
    return str(v)


class GradeReport:
    """The grade of one submission. `.score`, `.max_score`, `.passed` (every case passed),
    `.cases` (dicts: name, sizes, mode, passed, score, points, max_error, tolerance, ms,
    message), `.speed` (a dict), `.compile_error`, `.mapping`, `.launch`, `.to_dict()`,
    `.write_json(path)`, `.write_junit(path)`, `.write_gradescope(path)`."""

    def __init__(self, submission, assignment, backend, seed, seed_secret):
        self.submission, self.assignment, self.backend = submission, assignment, backend
        self.seed, self.seed_secret = seed, seed_secret
        self.kernel = self.signature = None
        self.compile_error = None
        self.confinement = ""   # tiledmm/confine/sandbox.py's describe(): what held the submission
        self.warnings = []
        self.mapping = self.launch = ""
        self.cases = []
        self.speed = {"graded": False, "note": "not measured"}

    @property
    def score(self):
        """Points earned: the cases' plus the speed part's."""
        return round(sum(c["score"] for c in self.cases) + (self.speed.get("score") or 0.0), 6)

    @property
    def max_score(self):
        """Points available: the cases' plus the speed part's when it is graded (cuda)."""
        return round(sum(c["points"] for c in self.cases) +
                     (self.speed["points"] if self.speed.get("graded") else 0.0), 6)

    @property
    def passed(self):
        """True when the submission compiled and every case passed."""
        return self.compile_error is None and bool(self.cases) and \
            all(c["passed"] for c in self.cases)

    def __bool__(self):
        return self.passed

    @property
    def seed_text(self):
        """The seed as the report shows it: the number, or 'secret (random)'."""
        return "secret (random)" if self.seed_secret else str(self.seed)

    def to_dict(self, reveal_seed=True):
        """Everything in the report as plain data (the --json output). The seed is included
        unless reveal_seed=False."""
        return {"submission": self.submission, "assignment": self.assignment,
                "backend": self.backend, "kernel": self.kernel, "signature": self.signature,
                "seed": self.seed if (reveal_seed or not self.seed_secret) else None,
                "seed_secret": self.seed_secret, "compile_error": self.compile_error,
                "warnings": list(self.warnings), "arguments": self.mapping,
                "launch": self.launch, "score": self.score, "max_score": self.max_score,
                "passed": self.passed, "cases": [dict(c) for c in self.cases],
                "speed": dict(self.speed), "confinement": self.confinement}

    def headline(self):
        """One line: points, cases passed, the kernel and the backend."""
        n_ok = sum(c["passed"] for c in self.cases)
        return (f"{self.assignment}: {self.score:g} / {self.max_score:g} points, {n_ok} of "
                f"{len(self.cases)} cases pass ({self.kernel or 'no kernel'} on {self.backend})")

    def preamble(self):
        """The lines above the table: submission, kernel, argument mapping, launch, seed,
        compile error and warnings."""
        lines = [f"submission: {self.submission}"]
        if self.signature:
            lines.append(f"kernel: {self.signature}")
        if self.mapping:
            lines.append(f"arguments: {self.mapping}")
        if self.launch:
            lines.append(f"launch: {self.launch}")
        lines.append(f"seed: {self.seed_text}")
        if self.confinement:
            lines.append(self.confinement)
        if self.compile_error:
            lines.append("compile error:\n  " + self.compile_error.replace("\n", "\n  "))
        for w in self.warnings:
            lines.append(f"warning: {w}")
        return lines

    def speed_line(self):
        """One line on the speed part: the times and points, or why it is not graded."""
        s = self.speed
        if not s.get("graded"):
            return f"speed: not graded ({s.get('note', '')})"
        return (f"speed: {s['submission_ms']:.4g} ms vs {s['reference_ms']:.4g} ms for "
                f"{s['reference']} ({s['ratio']:.3g}x its time): {s['score']:g} / "
                f"{s['points']:g} points")

    _COLS = ["case", "mode", "result", "points", "max_error", "ms", "message"]

    def _cells(self):
        rows = []
        for c in self.cases:
            first = (c["message"] or "").splitlines()[0] if c["message"] else ""
            rows.append([c["name"], c["mode"], "pass" if c["passed"] else "FAIL",
                         f"{c['score']:g}/{c['points']:g}", _fmt(c["max_error"]), _fmt(c["ms"]),
                         first])
        return rows

    def __str__(self):
        cells = self._cells()
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(self._COLS)]
        widths[-1] = 0
        table = ["  ".join(h.ljust(w) for h, w in zip(self._COLS, widths)).rstrip()]
        table += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
        details = [f"{c['name']}: {c['message']}" for c in self.cases
                   if c["message"] and "\n" in c["message"]]
        parts = self.preamble() + [""] + table + [""] + [self.speed_line(), self.headline()]
        if details:
            parts[-2:-2] = ["", "full messages:"] + details
        return "\n".join(parts)

    def __repr__(self):
        return str(self)

    def _repr_html_(self):
        esc = html.escape
        head = "".join(f"<th>{esc(h)}</th>" for h in self._COLS)
        body = []
        for c, cells in zip(self.cases, self._cells()):
            color = "#e6ffe6" if c["passed"] else "#ffe6e6"
            cells[-1] = f"<pre style='margin:0;white-space:pre-wrap'>{esc(c['message'])}</pre>"
            body.append(f"<tr style='background:{color}'>" + "".join(
                f"<td>{v if i == len(cells) - 1 else esc(v)}</td>" for i, v in enumerate(cells))
                + "</tr>")
        pre = "<br>".join(esc(line) for line in self.preamble()).replace("\n", "<br>")
        return (f"<div><p><b>{esc(self.headline())}</b></p><p style='font-size:smaller'>{pre}</p>"
                f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
                f"<p>{esc(self.speed_line())}</p></div>")

    def write_json(self, path):
        """Write to_dict() as JSON (NaN as null)."""
        outputs.write_json(self, path)

    def write_junit(self, path):
        """Write JUnit XML: one testcase per case, and one for the speed part."""
        outputs.write_junit(self, path)

    def write_gradescope(self, path):
        """Write Gradescope's autograder results.json (the seed left out when secret)."""
        outputs.write_gradescope(self, path)
