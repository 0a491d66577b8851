"""Guarded loops, before the barrier split analyses a kernel (split/transform.py, issue 46).

The naive matmul's `if (row < n && col < n) { float sum = 0; for (k...) sum += ...; C[..] = sum; }`
and its early-exit form `if (row >= n || col >= n) return; ...` keep their k loop inside each
thread: the `if` depends on the thread, so the loop cannot go outside the thread loops, and each
thread walks a column of B alone (0.53 GFLOP/s on two cores, session 17). Written as guarded
statements at the kernel's top level,

    const bool tm_guard_1_ = (row < n && col < n);
    float sum = 0;
    for (int k = 0; k < n; ++k) if (tm_guard_1_) sum += A[row * n + k] * B[k * n + col];
    if (tm_guard_1_) C[row * n + col] = sum;

the loop's header is block-uniform again and the split interchanges it like any other (`for k
{ for threads { if (guard) ... } }`); the guard is recomputed per thread loop like `row` and
`col`, and where every thread of a chunk is active the emitter drops it (_thread_loop).

The same thing: a thread whose guard is false runs none of the branch's statements, and one
whose guard is true runs them in order. What changes is only that inactive threads evaluate
the loops' headers, so each header must be safe anywhere (no memory, no call, no division), as
must any initializer left unguarded; a declaration whose initializer is not is written
`T x = tm_guard_1_ ? (init) : 0` (arithmetic and pointer types only). Only bounds checks
are guards (_bounds_check), since every thread steps through the loop to find its guard.
Flattening a branch's scope needs names the rest of the kernel does not use. Only where the
branch (or the rest of the kernel, for the early exit) holds a loop the interchange takes and
nothing that synchronises or jumps; anything else leaves the text as it was. Every edit stays
on its line, so the kernel's line numbers do not move. Not for profile builds (no interchange there).
"""
from ..diagnostics import SOURCE_NAME
from ..source import apply_edits
from .analysis import PURE_CALLS, SYNC_NAMES

GUARD_PREFIX = "tm_guard_"
_JUMPS = {"return", "break", "continue", "goto", "case", "default", "co_return", "throw"}


def guard_loops(analysis):
    """The kernel's text (analysis.data, analysed) with each top-level `if` of the two shapes
    above written as guarded statements, or None where there is none."""
    edits, n = [], 0
    stmts = [analysis.unwrap(s) for s in analysis.stmts]
    for i, s in enumerate(stmts):
        shape = _shape(analysis, s, stmts[i + 1:])
        if shape is None:
            continue
        name = f"{GUARD_PREFIX}{n + 1}_"
        cond, branch, negate = shape
        guarded = _branch_edits(analysis, branch, name)
        if guarded is None:
            continue
        n += 1
        if negate:   # `if (c) return;` (libclang's extent ends before the `;`)
            head_end = analysis.data.index(b";", s.extent.end.offset) + 1
        else:        # `if (c) {`
            head_end = list(s.get_children())[1].extent.start.offset + 1
        cond_text = analysis.src(cond)
        head = f"const bool {name} = {'!' if negate else ''}({cond_text});"
        edits.append((s.extent.start.offset, head_end, _same_lines(analysis, s.extent.start.offset,
                                                                  head_end, head)))
        if not negate:
            close = list(s.get_children())[1].extent.end.offset - 1
            edits.append((close, close + 1, " "))
        edits += guarded
    if not edits:
        return None
    return apply_edits(analysis.data, edits).decode()


def _shape(a, s, rest):
    """(condition, statements to guard, negated) of a top-level `if` of either shape, else None."""
    ci = a.ci
    if s.kind != ci.CursorKind.IF_STMT or not _spelled_here(a, s):
        return None
    kids = list(s.get_children())
    if len(kids) != 2 or not kids[0].kind.is_expression() or a.has_barrier(s):
        return None
    cond, branch = kids
    if not _bounds_check(cond):
        return None
    if branch.kind == ci.CursorKind.RETURN_STMT and not list(branch.get_children()):
        return cond, rest, True   # `if (c) return;`: the rest of the kernel runs under !c
    if branch.kind != ci.CursorKind.COMPOUND_STMT or \
            a.data[branch.extent.start.offset:branch.extent.start.offset + 1] != b"{" or \
            a.data[branch.extent.end.offset - 1:branch.extent.end.offset] != b"}":
        return None
    inner = list(branch.get_children())
    if not _names_free(a, inner):
        return None
    return cond, inner, False


# A guard's condition: bounds checks alone (`row < n && col < n`, `i >= n || j >= m`), which
# leave nearly every thread active. `if (tid == 0) { for (i < n) ... }` (one thread's serial
# loop) guarded would have every thread of the block step through the loop to find its guard
# false: n x blockDim checks where the fibers ran n iterations.
_BOUNDS_WORDS = {"<", "<=", ">", ">=", "&&", "||", "(", ")", "+", "-", "*", "."}
_RELATIONS = {"<", "<=", ">", ">="}


def _bounds_check(cond):
    words = {t.spelling for t in cond.get_tokens() if t.kind.name == "PUNCTUATION"}
    return bool(words & _RELATIONS) and words <= _BOUNDS_WORDS


def _spelled_here(a, c):
    return c.extent.start.file is not None and c.extent.start.file.name == SOURCE_NAME and \
        c.extent.end.file is not None and c.extent.end.file.name == SOURCE_NAME


def _branch_edits(a, stmts, name):
    """The edits guarding `stmts` under `name`, or None where they cannot be guarded or hold no
    loop the interchange takes whose trip count is the data's (k < n)."""
    ci = a.ci
    if not stmts:
        return None
    words = {t.spelling for s in stmts for t in s.get_tokens()}
    if words & (SYNC_NAMES | _JUMPS) or words & {"__shared__", "static", "asm", "__asm__"}:
        return None
    edits, loops = [], 0
    for s in map(a.unwrap, stmts):
        if not _spelled_here(a, s):
            return None
        if s.kind == ci.CursorKind.DECL_STMT:
            for d in a.var_decls(s):
                inits = [c for c in d.get_children() if c.kind.is_expression()]
                if not inits or _safe(a, inits[-1]):
                    continue
                if d.type.get_canonical().kind not in _arithmetic_or_pointer(ci) or \
                        _token_before(a, inits[-1]) != "=":
                    return None
                e = inits[-1].extent
                edits.append((e.start.offset, e.end.offset,
                              f"{name} ? ({a.src(inits[-1]).rstrip(';').rstrip()}) : 0"))
            continue
        if s.kind == ci.CursorKind.FOR_STMT:
            header, body, _inner = a.for_parts(s)
            if not all(_safe(a, h, a.loop_vars(s)) for h in header) or not a.hoistable(s):
                return None
            loops += a.runtime_trips(s)
            edits.append((body.extent.start.offset, body.extent.start.offset, f"if ({name}) "))
            continue
        if s.kind == ci.CursorKind.NULL_STMT:
            continue
        edits.append((s.extent.start.offset, s.extent.start.offset, f"if ({name}) "))
    # only where a loop runs as long as the data: a short constant one (coarse's `#pragma
    # unroll` over COARSEN) ran 0.7x guarded and interchanged
    return edits if loops else None


def _arithmetic_or_pointer(ci):
    T = ci.TypeKind
    return {T.BOOL, T.CHAR_U, T.UCHAR, T.USHORT, T.UINT, T.ULONG, T.ULONGLONG, T.CHAR_S,
            T.SCHAR, T.SHORT, T.INT, T.LONG, T.LONGLONG, T.FLOAT, T.DOUBLE, T.POINTER}


def _token_before(a, c):
    """The token just before cursor `c` in the kernel's text (`=` of an initializer)."""
    i = c.extent.start.offset - 1
    while i >= 0 and a.data[i:i + 1].isspace():
        i -= 1
    return a.data[i:i + 1].decode(errors="replace")


def _safe(a, expr, own=frozenset()):
    """Whether `expr` may be evaluated by a thread whose guard is false: no memory read
    (subscript, `*`, `->`), no call but pure math, no division, no write but to a variable
    declared in `own` (a loop's own counters)."""
    K = a.ci.CursorKind
    if {t.spelling for t in expr.get_tokens()} & {"/", "%", "/=", "%=", "->", "new", "delete"}:
        return False
    for c in a.walk(expr):
        first = [t.spelling for t in c.get_tokens()][:1]
        if c.kind == K.ARRAY_SUBSCRIPT_EXPR or \
                (c.kind == K.CALL_EXPR and c.spelling not in PURE_CALLS) or \
                (c.kind == K.UNARY_OPERATOR and first == ["*"]):
            return False
    return not a.writes_in(expr) - own


def _names_free(a, stmts):
    """Whether the variables `stmts` declare at their top level name nothing else the kernel
    declares or refers to outside them (flattening their scope must not shadow or clash)."""
    ci = a.ci
    mine = {d.spelling for s in stmts if s.kind == ci.CursorKind.DECL_STMT
            for d in a.var_decls(s)}
    if not mine:
        return True
    inside = {c.hash for s in stmts for c in a.walk(s)}
    for c in a.walk(a.kernel):
        if c.hash in inside:
            continue
        if c.kind in (ci.CursorKind.VAR_DECL, ci.CursorKind.PARM_DECL,
                      ci.CursorKind.DECL_REF_EXPR) and c.spelling in mine:
            return False
    return True


def _same_lines(a, start, end, text):
    """`text` padded with the newlines of data[start:end] it lacks, so later lines keep their
    numbers."""
    missing = a.data[start:end].count(b"\n") - text.count("\n")
    return text + "\n" * max(missing, 0)
