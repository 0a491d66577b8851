"""The PTX hybrids of benchmarks/fast_notes.md v8, reproducible without a GPU: each command
writes a PTX file and prints its main loop's counts (benchmarks/sass_reuse.py: FFMAs reusing
0/1/2 multiplicands, how many update their accumulator in place).

    python3 benchmarks/ptx_hybrids.py count FILE.ptx[.gz]
    python3 benchmarks/ptx_hybrids.py rename FILE.ptx[.gz] OLD NEW       # the kernel's name
    python3 benchmarks/ptx_hybrids.py transplant FRAME.ptx[.gz] DONOR.ptx[.gz]
        # DONOR's main loop in FRAME's kernel (live-ins mapped: accumulators by (m, n), carried
        # fragments by load and element, the rest to distinct registers of the frame)

The two kernels of the bisection are in benchmarks/ptx/: CUTLASS's 128x256x8 SIMT SGEMM and the
v7 kernel, one entry each, as nvcc 13.0 wrote them for sm_90 (gzip). E.g. the finding:
    python3 benchmarks/ptx_hybrids.py rename benchmarks/ptx/fast_v7_simt_sm90.ptx.gz \
        matmul_fast_simt_kernel matmul_fast_cutlass_kernel      # 93 -> 493 reusing both
Written for these two PTX files (their loops: 6 ld.shared.v4 and 128 fma.rn.f32 per k, 8 k):
other kernels may need the patterns below adapted. The header swap of v8's table was made on
copies whose prologue had been deleted line by line (they no longer name their parameters)."""
import gzip
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_reuse  # noqa: E402


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return f.read()


def count(ptx_text, keep=None):
    """(loop instructions, FFMAs, reusing 0, 1, 2, in place) of the one kernel in ptx_text."""
    with tempfile.TemporaryDirectory() as tmp:
        path = keep or os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx_text)
        (name, a), = sass_reuse.count(path)
        text = sass_reuse.sass_text(path)
    in_place = 0
    for _, code in sass_reuse.functions(text):
        for ins in sass_reuse.main_loop(code) or []:
            m = sass_reuse.FFMA.match(ins)
            in_place += bool(m) and m.group(1) == sass_reuse.reg(m.group(4))
    return a["instructions"], a["ffma"], a["reuse"][0], a["reuse"][1], a["reuse"][2], in_place


def extract(text, part):
    lines = text.split('\n')
    starts = [i for i, l in enumerate(lines) if re.match(r'^(\.visible\s+|\.weak\s+)?\.entry\s', l)]
    for j, s in enumerate(starts):
        if part in lines[s]:
            end = starts[j + 1] if j + 1 < len(starts) else len(lines)
            e = max(i for i in range(s, end) if lines[i] == '}')
            return '\n'.join(lines[:starts[0]] + lines[s:e + 1]) + '\n'
    raise SystemExit('no entry ' + part)


def loop_range(lines):
    # the backward branch with most fma between label and branch
    labels = {l.rstrip(':'): i for i, l in enumerate(lines) if re.match(r'^\$L\w+:', l)}
    best = None
    for i, l in enumerate(lines):
        m = re.search(r'bra(?:\.uni)?\s+(\$L\w+);', l)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            n = sum('fma.rn' in x for x in lines[labels[m.group(1)]:i])
            if best is None or n > best[0]: best = (n, labels[m.group(1)], i)
    return best[1], best[2]
def drop(text, pattern, inloop=True, asm_blocks=False):
    lines = text.split('\n')
    a, b = loop_range(lines) if inloop else (0, len(lines))
    out = []
    i = 0
    while i < len(lines):
        l = lines[i]
        if a <= i <= b and asm_blocks and l.strip() == '{' and re.search(pattern, '\n'.join(lines[i:i+5])):
            j = i
            while lines[j] != '}': j += 1
            i = j + 1; continue
        if a <= i <= b and not asm_blocks and re.search(pattern, l):
            i += 1; continue
        out.append(l); i += 1
    return '\n'.join(out)


LD = re.compile(r'ld\.shared\.v4\.\w+\s+\{(%r\d+), (%r\d+), (%r\d+), (%r\d+)\}')
MOV = re.compile(r'mov\.b32\s+(%f\d+), (%r\d+);')
FMA = re.compile(r'fma\.rn\.f32\s+(%f\d+), (%f\d+), (%f\d+), (%f\d+);')
REG = re.compile(r'%(rd|rs|r|f|p)(\d+)\b')
def roles(lines, a, b):
    """(acc (m,n) -> loop-carried register, frag (i,e) -> carried register)"""
    body = lines[a:b + 1]
    lds = [(i, LD.search(l).groups()) for i, l in enumerate(body) if LD.search(l)]
    src = {}
    for n, (i, regs) in enumerate(lds):
        g = n % 6
        for e, r in enumerate(regs):
            src.setdefault(r, ('A', 4 * g + e) if g < 4 else ('B', 4 * (g - 4) + e))
    frag = {}
    for n, (i, regs) in enumerate(lds[-6:]):
        for e, r in enumerate(regs):
            frag[(n, e)] = r
    f2r = {}
    for l in body:
        m = MOV.search(l)
        if m: f2r[m.group(1)] = m.group(2)
    acc = {}
    first_block = None
    nf = 0
    for l in body:
        m = FMA.search(l)
        if not m: continue
        nf += 1
        if nf > 128: break
        x, y = src.get(f2r.get(m.group(2))), src.get(f2r.get(m.group(3)))
        d = dict([x, y])
        acc[(d['A'], d['B'])] = m.group(4)
    return acc, frag
def live_ins(body):
    defined, ins = set(), []
    for l in body:
        s = l.split('//')[0]
        regs = REG.findall(s)
        if not regs: continue
        toks = [f'%{k}{n}' for k, n in regs]
        op = s.strip().split()[0] if s.strip() else ''
        # destinations: first operand of most instructions; ld/mov/fma/add... ; braces for vector ld
        m = re.match(r'\s*(?:@!?%p\d+\s+)?[a-z][\w.]*\s+(\{[^}]*\}|%\w+)', s)
        dests = set(REG.sub(lambda g: g.group(0), m.group(1)).replace('{', '').replace('}', '').replace(' ', '').split(',')) if m and not re.match(r'\s*(?:@!?%p\d+\s+)?(st|bra|bar|cp|setp\.ne\.b32 p)', s) else set()
        for t in toks:
            if t not in dests and t not in defined and t not in ins: ins.append(t)
        defined |= dests
    return ins
def transplant(frame_text, donor_text):
    F = frame_text.split('\n'); D = donor_text.split('\n')
    fa, fb = loop_range(F); da, db = loop_range(D)
    facc, ffrag = roles(F, fa, fb); dacc, dfrag = roles(D, da, db)
    assert len(facc) == 128 and len(dacc) == 128, (len(facc), len(dacc))
    OFF = 100000
    ren = lambda s: REG.sub(lambda g: f'%{g.group(1)}{int(g.group(2)) + OFF}', s)
    body = [ren(l) for l in D[da:db + 1]]
    label = D[da].rstrip(':')
    body = [l.replace(label, '$L__T_loop') for l in body]
    ins = live_ins(D[da:db + 1])
    dacc_inv = {v: k for k, v in dacc.items()}; dfrag_inv = {v: k for k, v in dfrag.items()}
    # the frame's trip count register: from its loop test `setp.xx %p, %rA, %rB;` right before the branch
    test = [l for l in F[fb - 6:fb] if 'setp' in l][-1]
    trip = [f'%{k}{n}' for k, n in REG.findall(test.split(',', 1)[1])][0]
    anyr = [f'%r{n}' for k, n in REG.findall(' '.join(F[fa:fb])) if k == 'r' and f'%r{n}' in ' '.join(F[:fa])][0]
    anyrd = [f'%rd{n}' for k, n in REG.findall(' '.join(F[:fa])) if k == 'rd'][0]
    pre = []
    # donor constants set right before its loop (stage counters, offsets)
    consts = {}
    for l in D[max(0, da - 400):da]:
        m = re.match(r'\s*mov\.u32\s+(%r\d+), (-?\d+);', l)
        if m: consts[m.group(1)] = m.group(2)
    # distinct opaque values for the other live-ins: registers the frame defines before its loop
    fdefs = []
    for l in F[:fa]:
        m = re.match(r'\s*(?:add|mul|mad|shl|shr|and|or|cvt|ld\.param|mov)[\w.]*\s+(%r\d+),', l)
        if m and m.group(1) not in fdefs: fdefs.append(m.group(1))
    fdefs64 = []
    for l in F[:fa]:
        m = re.match(r'\s*(?:add|mul|mad|shl|cvt|ld\.param|mov|cvta)[\w.]*\s+(%rd\d+),', l)
        if m and m.group(1) not in fdefs64: fdefs64.append(m.group(1))
    pick = iter(fdefs[::-1]); pick64 = iter(fdefs64[::-1])
    for r in ins:
        new = ren(r)
        if r in dacc_inv: pre.append(f'\tmov.f32 \t{new}, {facc[dacc_inv[r]]};')
        elif r in dfrag_inv: pre.append(f'\tmov.b32 \t{new}, {ffrag[dfrag_inv[r]]};')
        elif r.startswith('%rd'): pre.append(f'\tmov.u64 \t{new}, {next(pick64)};')
        elif r.startswith('%r') and r in consts: pre.append(f'\tmov.u32 \t{new}, {consts[r]};')
        elif r.startswith('%r'): pre.append(f'\tmov.u32 \t{new}, {next(pick)};')
        elif r.startswith('%f'): pre.append(f'\tmov.f32 \t{new}, 0f00000000;')
        elif r.startswith('%p'): pre.append(f'\tsetp.ne.s32 \t{new}, {next(pick)}, 0;')
    post = [f'\tmov.f32 \t{facc[mn]}, {ren(dacc[mn])};' for mn in facc]
    out = F[:fa] + pre + body + post + F[fb + 1:]
    text = '\n'.join(out)
    text = re.sub(r'\.reg \.(pred|f32|b32|b64|b16) \t%(p|f|r|rd|rs)<(\d+)>;', lambda m: f'.reg .{m.group(1)} \t%{m.group(2)}<{OFF * 2}>;', text)
    return text, ins


def main(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "count":
        text = read(args[0])
    elif cmd == "rename":
        text = read(args[0]).replace(args[1], args[2])
    elif cmd == "transplant":
        text, _ = transplant(read(args[0]), read(args[1]))
    else:
        raise SystemExit(__doc__)
    out = f"hybrid_{cmd}.ptx"
    print("loop instructions, FFMAs, reusing 0 / 1 / 2, in place:", count(text, keep=out),
          f"(PTX in {out})")


if __name__ == "__main__":
    main(sys.argv[1:])
