"""Read the main loop of an FFMA kernel's SASS: how ptxas scheduled the outer products.

For each kernel (optionally only those whose name contains a substring) it finds the main loop
(the backward branch whose body holds the most FFMAs) and prints:
  - instructions and FFMAs in the loop;
  - FFMAs by the number of multiplicands that carry the `.reuse` flag (0 / 1 / 2), and of the
    one-operand ones, which kind of value they reuse (one that feeds more or fewer accumulators);
  - the FFMA order as a picture: the lane's accumulators as a grid (rows: the multiplicand
    values that each feed the larger number of accumulators, columns: the others; each axis in
    register-number order, which is the order of the LDS.128 vectors) and in each cell the rank
    of that accumulator's FFMA among one k's FFMAs. Cells that count up in 2 x 2 blocks are CUTLASS's zig-zag; counting down columns
    is a column sweep;
  - the shared loads (LDS, with their width) and, for each, how many FFMAs precede it.
No GPU is needed: a .ptx file is assembled with `ptxas -arch=sm_90 -O3` (or --arch), a .cubin
disassembled with `cuobjdump -sass`; a .sass file is read as `cuobjdump -sass` prints it.
ptxas, cuobjdump: the CUDA toolkit, or the pip wheels nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm
(their nvidia/cu13/bin is searched too). See benchmarks/fast_notes.md v8.
    usage: python3 benchmarks/sass_reuse.py FILE.{ptx,cubin,sass} [--kernel SUBSTRING]
                                            [--arch sm_90] [--quiet]
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

FFMA = re.compile(r"^(?:@!?U?P\w+\s+)?FFMA\s+(R\d+),\s*(-?R\d+(?:\.reuse)?),\s*(-?R\d+(?:\.reuse)?),"
                  r"\s*(-?R\d+(?:\.reuse)?)")
LDS = re.compile(r"^(?:@!?U?P\w+\s+)?LDS(\.\w+)*\s+(R\d+)")
DEST = re.compile(r"^(?:@!?U?P\w+\s+)?[A-Z][\w.]*\s+(R\d+)")
LDS_SUFFIX = re.compile(r"LDS((?:\.\w+)*)")


def tool(name):
    """Path to a CUDA tool: PATH, CUDA_HOME, then the NVIDIA pip wheels beside this Python."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", name)]
    for entry in sys.path:
        candidates.append(os.path.join(entry, "nvidia", "cu13", "bin", name))
        candidates.append(os.path.join(entry, "nvidia", "cuda_cuobjdump", "bin", name))
    for path in candidates:
        if os.path.exists(path):
            return path
    raise SystemExit(f"{name} not found: install the CUDA toolkit, or `pip install "
                     f"nvidia-cuda-cuobjdump` (which brings cuobjdump), and put it on PATH")


def sass_text(path, arch="sm_90"):
    """cuobjdump -sass text for a .ptx (assembled here), .cubin or .sass file."""
    if path.endswith(".sass"):
        with open(path) as f:
            return f.read()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = path
        if path.endswith(".ptx"):
            cubin = os.path.join(tmp, "k.cubin")
            subprocess.run([tool("ptxas"), f"-arch={arch}", "-O3", path, "-o", cubin],
                           check=True, timeout=600)
        r = subprocess.run([tool("cuobjdump"), "-sass", cubin], capture_output=True, text=True,
                           timeout=600, check=True)
        return r.stdout


def functions(text):
    """(name, [(address, instruction text)]) per kernel in cuobjdump -sass output."""
    for func in re.split(r"\n\s*Function : ", text)[1:]:
        name = func.split("\n", 1)[0].strip()
        code = [(int(m.group(1), 16), m.group(2).strip()) for m in
                re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", func)]
        yield name, code


def main_loop(code):
    """The body of the backward branch that holds the most FFMAs, or None."""
    best = None
    for addr, ins in code:
        target = re.search(r"BRA\s.*?0x([0-9a-f]+)", ins)
        if target and int(target.group(1), 16) < addr:
            start = int(target.group(1), 16)
            body = [i for a, i in code if start <= a <= addr]
            n = sum(1 for i in body if FFMA.match(i))
            if best is None or n > best[0]:
                best = (n, body)
    return best[1] if best else None


def reg(operand):
    return operand.lstrip("-").split(".")[0]


def order_picture(ffmas):
    """One k's FFMA order as a grid of ranks. The FFMAs of one k of the source are a connected
    group (its row values times its column values, each value read only there); the first
    complete group in the loop is drawn. Rows: the values that feed the most accumulators in
    it, columns: the others, each in register-number order."""
    parent = {}

    def find(v):
        while parent.setdefault(v, v) != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for _, x, y, _, _ in ffmas:
        parent[find(x)] = find(y)
    groups = collections.defaultdict(list)
    for i, f in enumerate(ffmas):
        groups[find(f[1])].append(i)
    largest = max(len(g) for g in groups.values())
    chosen = min((g for g in groups.values() if len(g) == largest), key=lambda g: g[0])
    feeds = collections.Counter()
    for i in chosen:
        feeds[ffmas[i][1]] += 1
        feeds[ffmas[i][2]] += 1
    big = max(feeds.values())
    cell = {}
    for rank, i in enumerate(chosen):
        _, x, y = ffmas[i][:3]
        row, col = (x, y) if feeds[x] == big and feeds[y] != big else (y, x)
        cell[(row, col)] = rank
    by_reg = lambda v: (int(v[0][1:]), v[1])  # noqa: E731
    rows = sorted({rc[0] for rc in cell}, key=by_reg)
    cols = sorted({rc[1] for rc in cell}, key=by_reg)
    return [[cell.get((r, c)) for c in cols] for r in rows]


def analyse(body):
    """Counts and the order picture of one loop body (a list of instruction texts)."""
    version = collections.Counter()  # register -> times written so far (a value's identity)
    ffmas, lds = [], []
    for ins in body:
        m = FFMA.match(ins)
        if m:
            acc, x, y = m.group(1), m.group(2), m.group(3)
            ffmas.append((acc, (reg(x), version[reg(x)]), (reg(y), version[reg(y)]),
                          x.endswith(".reuse"), y.endswith(".reuse")))
            version[acc] += 1
            continue
        m = LDS.match(ins)
        if m:
            suffix = LDS_SUFFIX.match(re.sub(r"^@!?U?P\w+\s+", "", ins)).group(1)
            width = 4 if ".128" in suffix else 2 if ".64" in suffix else 1
            lds.append((len(ffmas), width))
            base = int(m.group(2)[1:])
            for r in range(base, base + width):
                version[f"R{r}"] += 1
            continue
        m = DEST.match(ins)
        if m:
            version[m.group(1)] += 1
    # Which accumulators each multiplicand value feeds: a row value feeds a row of the lane's
    # tile, a column value a column. The two kinds differ in how many accumulators they feed.
    feeds = collections.defaultdict(set)
    for acc, x, y, _, _ in ffmas:
        feeds[x].add(acc)
        feeds[y].add(acc)
    sizes = sorted({len(s) for s in feeds.values()}, reverse=True)
    big, small = (sizes[0], sizes[-1]) if sizes else (0, 0)
    reuse, one_side = collections.Counter(), collections.Counter()
    for acc, x, y, rx, ry in ffmas:
        reuse[rx + ry] += 1
        if rx + ry == 1:  # which kind of value the one reused operand is
            one_side[len(feeds[x] if rx else feeds[y])] += 1
    picture = order_picture(ffmas) if ffmas else None
    return dict(instructions=len(body), ffma=len(ffmas), reuse=reuse, one_side=one_side,
                feeds=(big, small), picture=picture, lds=lds)


def report(name, a, quiet=False):
    big, small = a["feeds"]
    out = [name[:100],
           f"  loop: {a['instructions']} instructions, {a['ffma']} FFMA; multiplicands reused "
           f"0/1/2: {a['reuse'][0]}/{a['reuse'][1]}/{a['reuse'][2]} (of the one-operand ones: "
           f"{a['one_side'][big]} reuse a value that feeds {big} accumulators, "
           f"{a['one_side'][small]} one that feeds {small})"]
    widths = collections.Counter(w for _, w in a["lds"])
    out.append("  LDS: " + ", ".join(f"{n} x {32 * w}-bit" for w, n in sorted(widths.items())) +
               "; FFMAs before each: " + " ".join(str(p) for p, _ in a["lds"]))
    if a["picture"] and not quiet:
        out.append(f"  one k's FFMA order (rank of each accumulator's FFMA); rows: the values "
                   f"that feed {big} accumulators, columns: those that feed {small}:")
        for row in a["picture"]:
            out.append("   " + "".join("   ." if c is None else f"{c:4d}" for c in row))
    return "\n".join(out)


def count(path, kernel="", arch="sm_90"):
    """[(kernel name, analysis)] for every kernel of `path` with a loop of FFMAs."""
    rows = []
    for name, code in functions(sass_text(path, arch)):
        if kernel not in name:
            continue
        body = main_loop(code)
        if body:
            rows.append((name, analyse(body)))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--kernel", default="", help="only kernels whose name contains this")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--quiet", action="store_true", help="no order picture")
    args = ap.parse_args()
    for name, a in count(args.file, args.kernel, args.arch):
        print(report(name, a, args.quiet))
