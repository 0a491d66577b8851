"""Pages of the tiledmm site that are written from the project itself before each build.

- kernels/<family>.md, one page per kernel family of the registry (tm.kernels()): name,
  parameters, dtypes, lecture, summary, the global-traffic model where tiledmm.model has one,
  and the figures measured on a GPU from benchmarks/results/*.csv where a row exists, one
  table per device named in the rows. A kernel
  added to cuda/registry.cu appears here with no edit to the docs.
- notebooks/*.ipynb: copies of ../notebooks/*.ipynb as committed (rendered, never executed).
- _generated/readme_setup.md: README.md's "Set up" quoted verbatim for the install page, so the
  site and README cannot drift apart.
- _generated/guide_user_kernels.md: the guide's user-kernel section, empty until tiledmm has
  a `compile` function.

Every generated path is ignored by git (docs/.gitignore). Files are rewritten only when their
text changes, so an unchanged build stays incremental.
"""
import csv
import glob
import itertools
import os
import re

DOCS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(DOCS)

FAMILY_INTROS = {
    "matmul": (
        "Matrix multiply C = A @ B, from the lectures' naive kernel up the optimisation "
        "ladder to a kernel within reach of cuBLAS. Call any of them with "
        "`tm.matmul(A, B, kernel=NAME, **params)`."),
    "reduce": (
        "The sum of an array, from the lectures' first (and one deliberately wrong) tree "
        "reductions to warp shuffles and atomics. Call any of them with "
        "`tm.reduce(x, kernel=NAME, **params)`; `float(res.out)` is the sum."),
    "elementwise": (
        "The lectures' first kernels: one thread per element. `tm.vec_add(a, b)` and "
        "`tm.mat_add(A, B)`."),
}

# The matmul cube the traffic tables are evaluated at.
MODEL_SIZE = 4096
MODEL_SMS = 132   # fast's config 0 picks by the multiprocessor count: the model pages use an H100's


def _write(path, text):
    """Write `text` to `path` unless it already holds exactly that."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _code(text):
    """Inline code for a Markdown table cell."""
    text = str(text).replace("|", "\\|")
    return f"`{text}`"


def _cell(text):
    """Plain text for a Markdown table cell (pipes escaped, no line breaks)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


# ----------------------------------------------------------------------------- README sections

def readme_section(title_part, readme=None):
    """The body of README's section whose heading contains `title_part` (case-insensitive),
    up to the next heading of the same or a higher level; None when README has none."""
    readme = readme or os.path.join(ROOT, "README.md")
    with open(readme, encoding="utf-8") as f:
        lines = f.read().splitlines()
    fence = False
    start = level = None
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence:
            continue
        m = re.match(r"^(#{1,6})\s+(.*)$", line)
        if not m:
            continue
        if start is None:
            if title_part.lower() in m.group(2).lower():
                start, level = i + 1, len(m.group(1))
        elif len(m.group(1)) <= level:
            return "\n".join(lines[start:i]).strip("\n") + "\n"
    if start is None:
        return None
    return "\n".join(lines[start:]).strip("\n") + "\n"


def _demote_headings(text, below=1):
    """Shift the section's headings so its highest one sits right below level `below`
    (a README ### inside a page whose title is # becomes ##)."""
    levels = [len(m.group(1)) for m in re.finditer(r"^(#{1,6})\s", text, re.M)]
    if not levels:
        return text
    shift = below + 1 - min(levels)
    return re.sub(r"^(#{1,6})(\s)", lambda m: "#" * max(1, min(6, len(m.group(1)) + shift))
                  + m.group(2), text, flags=re.M)


def write_readme_sections():
    setup = readme_section("Set up")
    if setup is None:
        raise RuntimeError("README.md has no 'Set up' section for the install page")
    _write(os.path.join(DOCS, "_generated", "readme_setup.md"), _demote_headings(setup))


# ----------------------------------------------------------------------------- notebooks

def copy_notebooks():
    """notebooks/*.ipynb -> docs/notebooks/ as committed (outputs and all); stale copies go."""
    src = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
    dst_dir = os.path.join(DOCS, "notebooks")
    os.makedirs(dst_dir, exist_ok=True)
    names = {os.path.basename(p) for p in src}
    for old in glob.glob(os.path.join(dst_dir, "*.ipynb")):
        if os.path.basename(old) not in names:
            os.remove(old)
    for path in src:
        with open(path, encoding="utf-8") as f:
            _write(os.path.join(dst_dir, os.path.basename(path)), f.read())
    lines = ["# Notebooks", "",
             "The classroom notebooks of `notebooks/`, shown with the outputs they were "
             "committed with (from a run on a GPU where one was made). The site does not run "
             "them: open them in Jupyter to run them yourself, on the GPU or on the emulator "
             "(`tm.set_backend(\"emu\")`), or run them all headless with "
             "`python benchmarks/run_notebooks.py`.", "",
             "```{toctree}", ":maxdepth: 1", ""]
    lines += [os.path.splitext(n)[0] for n in sorted(names)]
    lines += ["```", ""]
    _write(os.path.join(dst_dir, "index.md"), "\n".join(lines))


# ----------------------------------------------------------------------------- kernel pages

def _measured():
    """Rows of every benchmarks/results/*.csv, with the file they came from. Each row names
    the device it was measured on (`bench` writes a `device` column); a file without one is
    an error rather than a table titled from its file name."""
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "benchmarks", "results", "*.csv"))):
        rel = os.path.relpath(path, ROOT)
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                if not row.get("device"):
                    raise ValueError(f"{rel}: a row without a `device` column value; "
                                     "`python -m tiledmm bench --csv FILE` writes it")
                row["_file"] = rel
                rows.append(row)
    return rows


def _size_label(row):
    if row.get("M"):
        M, N, K = row["M"], row.get("N", row["M"]), row.get("K", row["M"])
        return f"{M}³" if M == N == K else f"{M}×{N}×{K}"
    for key in ("n", "size"):
        if row.get(key):
            n = int(float(row[key]))
            return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 and n > 1 else str(n)
    return "?"


def _fmt(v, digits=3):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return ""
    return f"{x:.{digits}g}"


def _metric(row):
    """(column, unit, (reference column, its label)) of a bench row, or None."""
    if row.get("tflops"):
        return "tflops", "TFLOP/s", ("pct_cublas", "% of cuBLAS")
    if row.get("gbps"):
        return "gbps", "GB/s", ("pct_copy", "% of a copy")
    return None


def _measured_table(name, rows):
    """Markdown: one table per device that has rows for this kernel, titled with the device
    the rows name. Two results files that measure the same cell on one device are an error:
    keep the newer file only."""
    groups = {}
    for r in rows:
        if r.get("kernel") == name and _metric(r):
            groups.setdefault((r["device"], _metric(r)), []).append(r)
    out = []
    for (device, (metric, unit, ref)), group in groups.items():
        sizes = list(dict.fromkeys(_size_label(r) for r in group))
        params = list(dict.fromkeys(r.get("params", "") for r in group))
        by = {}
        for r in group:
            key = (r.get("params", ""), _size_label(r))
            if key in by and by[key]["_file"] != r["_file"]:
                raise ValueError(f"{name} {key[0]} {key[1]} on {device} is measured in both "
                                 f"{by[key]['_file']} and {r['_file']}: keep one of them")
            by[key] = r
        files = ", ".join(f"`{f}`" for f in dict.fromkeys(r["_file"] for r in group))
        out += [f"Measured on {device} ({unit}, {ref[1]} in parentheses where measured in the "
                f"same run; from {files}, written by `python -m tiledmm bench`):", ""]
        out += ["| parameters | " + " | ".join(sizes) + " |",
                "|---|" + "---|" * len(sizes)]
        for p in params:
            cells = []
            for s in sizes:
                r = by.get((p, s))
                if r is None:
                    cells.append("")
                    continue
                text = _fmt(r[metric])
                if r.get(ref[0]):
                    text += f" ({float(r[ref[0]]):.0f})"
                cells.append(text)
            out.append(f"| {_code(p) if p else '(none)'} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def _traffic_section(spec):
    """Markdown for the global-traffic model of a matmul kernel, from tiledmm.model."""
    from tiledmm import model
    names = [p.name for p in spec.params]
    combos = [dict(zip(names, vs)) for vs in itertools.product(*(p.values for p in spec.params))]
    n = MODEL_SIZE
    rows = []
    for params in combos:
        try:
            nbytes = model.traffic_bytes(spec.name, n, n, n, itemsize=4, sm_count=MODEL_SMS,
                                         **params)
        except ValueError:
            return ["tiledmm.model has no traffic model for this kernel; a call reports the "
                    "registry's model as `res.model_bytes`.", ""]
        piece = model.block_tile(spec.name, n, n, n, sm_count=MODEL_SMS, **params)
        label = " ".join(f"{k}={v}" for k, v in params.items()) or "(none)"
        piece_text = f"{piece[0]}×{piece[1]}" if piece else "each input read once"
        rows.append(f"| {_code(label) if params else label} | {piece_text} | "
                    f"{nbytes / 1e9:.3g} | {model.flops(n) / nbytes:.3g} |")
    out = ["Global-memory traffic (`tiledmm.model.traffic_bytes`, the same model as "
           "`res.model_bytes`): a block that computes a bm×bn piece of C loads "
           "M·K·⌈N/bn⌉ + K·N·⌈M/bm⌉ elements, plus M·N stores"]
    if spec.name == "colmajor_b":
        out[0] += " and the timed transpose of B (2·K·N)"
    if spec.name in ("cublas", "cutlass"):
        out[0] = ("Global-memory traffic (`tiledmm.model.traffic_bytes`): the minimum, each "
                  "input read once and C written once")
    out[0] += f". At {n}³ in float32"
    if spec.name == "fast":
        out[0] += f", config 0 choosing as on {MODEL_SMS} multiprocessors (an H100 SXM)"
    out[0] += ":"
    out += ["", "| parameters | piece of C per block (bm×bn) | GB moved | FLOP per byte |",
            "|---|---|---|---|"] + rows + [""]
    return out


def _kernel_section(spec, measured):
    out = [f"({spec.family}-{spec.name})=", f"## `{spec.name}`", "", _cell(spec.summary), "",
           f"- **Lecture:** {_cell(spec.lecture)}",
           f"- **dtypes:** {', '.join(spec.dtypes)}",
           f"- **Call:** `tm.{_call(spec)}`", ""]
    if spec.params:
        out += ["| parameter | allowed values | default | meaning |", "|---|---|---|---|"]
        for p in spec.params:
            out.append(f"| `{p.name}` | {', '.join(map(str, p.values))} | {p.default} | "
                       f"{_cell(p.doc)} |")
        out.append("")
    else:
        out += ["No parameters.", ""]
    if spec.family == "matmul":
        out += _traffic_section(spec)
    else:
        out += ["tiledmm.model has no traffic model for this family; a call reports the "
                "registry's own byte model as `res.model_bytes`.", ""]
    table = _measured_table(spec.name, measured)
    out += table if table else ["No GPU measurement of this kernel is committed in "
                                "`benchmarks/results/`.", ""]
    return out


def _call(spec):
    func = {"matmul": "matmul(A, B", "reduce": "reduce(x",
            "elementwise": ("mat_add(A, B" if "mat" in spec.name else "vec_add(a, b")}
    head = func.get(spec.family, f"{spec.family}(...")
    args = "".join(f", {p.name}={p.default}" for p in spec.params)
    return f"{head}, kernel=\"{spec.name}\"{args})"


def write_kernel_pages():
    import tiledmm as tm
    from tiledmm import _registry
    measured = _measured()
    specs = tm.kernels()
    families = list(dict.fromkeys(list(_registry.FAMILIES) + [k.family for k in specs]))
    out_dir = os.path.join(DOCS, "kernels")
    os.makedirs(out_dir, exist_ok=True)
    written = set()
    index = ["# Kernels", "",
             "Every kernel registered in `cuda/registry.cu`, one page per family, written "
             "from the registry (`tm.kernels()`) when the site is built: a new registry row "
             "shows up here by itself.", "",
             "| family | kernels |", "|---|---|"]
    for family in families:
        rows = [k for k in specs if k.family == family]
        if not rows:
            continue
        index.append(f"| [{family}]({family}.md) | "
                     + ", ".join(f"`{k.name}`" for k in rows) + " |")
        page = [f"# {family} kernels", "", FAMILY_INTROS.get(family, ""), "",
                "| kernel | parameters | dtypes | summary |", "|---|---|---|---|"]
        for k in rows:
            params = ", ".join(f"`{p.name}`" for p in k.params) or "—"
            page.append(f"| [`{k.name}`](#{family}-{k.name}) | {params} | "
                        f"{'/'.join(k.dtypes)} | {_cell(k.summary)} |")
        page.append("")
        for k in rows:
            page += _kernel_section(k, measured)
        _write(os.path.join(out_dir, f"{family}.md"), "\n".join(page))
        written.add(f"{family}.md")
    index += ["", "```{toctree}", ":maxdepth: 1", ":hidden:", ""]
    index += [os.path.splitext(w)[0] for w in sorted(written, key=lambda w: families.index(
        os.path.splitext(w)[0]))]
    index += ["```", ""]
    _write(os.path.join(out_dir, "index.md"), "\n".join(index))
    written.add("index.md")
    for old in glob.glob(os.path.join(out_dir, "*.md")):
        if os.path.basename(old) not in written:
            os.remove(old)


# ----------------------------------------------------------------------------- user kernels

USER_KERNELS_SECTION = """## User kernels

`tm.compile` builds your own CUDA C kernel so that it runs like the registered ones, on the
GPU or on the emulator.

```{eval-rst}
.. autofunction:: tiledmm.compile
   :no-index:
```
"""


def write_user_kernels_section():
    """The guide's "User kernels" section, only when tiledmm has `compile` (else empty)."""
    import tiledmm as tm
    text = USER_KERNELS_SECTION if hasattr(tm, "compile") else ""
    _write(os.path.join(DOCS, "_generated", "guide_user_kernels.md"), text)


def write_api_extra():
    """API entries for public names of tiledmm.__all__ that api/tiledmm.md does not list by
    hand, so a new public name is documented without editing the docs."""
    import inspect
    import tiledmm as tm
    with open(os.path.join(DOCS, "api", "tiledmm.md"), encoding="utf-8") as f:
        listed = set(re.findall(r"^\.\. auto\w+:: (?:tiledmm\.)?(\w+)", f.read(), re.M))
    modules = {"model", "occupancy", "sweep", "plot", "profile", "testing", "bench"}
    lines = []
    for name in tm.__all__:
        if name in listed or name in modules:
            continue
        obj = getattr(tm, name)
        if inspect.isclass(obj):
            kind = "exception" if issubclass(obj, BaseException) else "class"
            lines += [f".. auto{kind}:: {name}", "   :members:", ""]
        elif inspect.ismodule(obj):
            # automodule moves the current module: set it back for the names after it
            lines += [f".. automodule:: tiledmm.{name}", "   :members:", "",
                      ".. currentmodule:: tiledmm", ""]
        else:
            lines += [f".. autofunction:: {name}", ""]
    text = ""
    if lines:
        text = ("## More public names\n\n```{eval-rst}\n.. currentmodule:: tiledmm\n\n"
                + "\n".join(lines) + "```\n")
    _write(os.path.join(DOCS, "_generated", "api_more.md"), text)


def generate(app=None):
    write_readme_sections()
    copy_notebooks()
    write_kernel_pages()
    write_user_kernels_section()
    write_api_extra()


def setup(app):
    app.connect("builder-inited", generate)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
