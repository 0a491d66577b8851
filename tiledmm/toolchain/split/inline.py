"""Helpers inlined into a kernel before the barrier split analyses it (split/transform.py, issue
34): a call statement of a helper of the same file, or of the registry's own header, that
synchronises (`__syncwarp`, a barrier, shuffles: reduce_steps' `last_warp_sum(partial, tid);`,
`sum = tm_block_sum(sum, warp_sums);`) is replaced by the helper's body on the call's line, so
that its synchronisation is the kernel's own. Only where that is exactly the call; anything
else leaves the text unchanged (the kernel then keeps the fibers where the helper
synchronises). Also the check that a kernel uses none of the names the transform reserves.
"""
import re

from ..diagnostics import SOURCE_NAME
from ..source import kernel_cursors
from .analysis import (BLOCK_GROUP, GRID_BARRIER, GRID_GROUP, GROUPS_NAMESPACE, SYNC_NAMES,
                       TILE_GROUP, KernelAnalysis, Fallback)

# A block group's calls, as the built-ins they are, of the types cooperative_groups.h's
# thread_block gives them (the fibers run that header's)
_BLOCK_GROUP_CALLS = {
    "sync": "__syncthreads()",
    "thread_rank": "((unsigned)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * "
                   "threadIdx.z)))",
    "size": "((unsigned)(blockDim.x * blockDim.y * blockDim.z))",
    "num_threads": "((unsigned)(blockDim.x * blockDim.y * blockDim.z))",
    "thread_index": "dim3(threadIdx)",
    "group_index": "dim3(blockIdx)",
    "dim_threads": "dim3(blockDim)",
    "group_dim": "dim3(blockDim)",
}


_BLOCK_RANK = _BLOCK_GROUP_CALLS["thread_rank"]
_BLOCK_SIZE = _BLOCK_GROUP_CALLS["size"]
_BLOCK_INDEX = ("(blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + "
                "(unsigned long long)gridDim.y * blockIdx.z))")
_GRID_BLOCKS = "((unsigned long long)gridDim.x * gridDim.y * gridDim.z)"
# The grid's calls (cooperative_groups.h's grid_group), as the built-ins they are
_GRID_GROUP_CALLS = {
    "sync": f"{GRID_BARRIER}()",
    "thread_rank": f"({_BLOCK_INDEX} * {_BLOCK_SIZE} + {_BLOCK_RANK})",
    "size": f"({_GRID_BLOCKS} * {_BLOCK_SIZE})",
    "num_threads": f"({_GRID_BLOCKS} * {_BLOCK_SIZE})",
    "block_rank": _BLOCK_INDEX,
    "num_blocks": _GRID_BLOCKS,
    "is_valid": "true",
}
# A static tile's calls (thread_block_tile<N> of a block, N a power of two up to 32), "{n}" its
# width
_TILE_CALLS = {
    "thread_rank": f"({_BLOCK_RANK} % {{n}}u)",
    "size": "{n}u",
    "num_threads": "{n}u",
    "meta_group_rank": f"({_BLOCK_RANK} / {{n}}u)",
    "meta_group_size": f"(({_BLOCK_SIZE} + {{n}}u - 1) / {{n}}u)",
}
# cg::reduce's operations the lowering writes as the shuffles' compound assignment
_REDUCE_OPS = {"plus": "+=", "bit_and": "&=", "bit_or": "|=", "bit_xor": "^="}
# Names of the lowering's own locals (cg::reduce's value and step)
_LOWERED_PREFIX = "tm_cg_"


def _in_groups(ci, decl):
    """Whether `decl` is cooperative_groups' own (the namespace, or a member of thread_block)."""
    while decl is not None and decl.kind != ci.CursorKind.TRANSLATION_UNIT:
        if decl.kind == ci.CursorKind.NAMESPACE and decl.spelling == GROUPS_NAMESPACE:
            return True
        decl = decl.semantic_parent
    return False


def _is_group(ci, t):
    """Whether type `t` is the block group (cooperative_groups::thread_block, however spelt)."""
    return _group_kind(t) == BLOCK_GROUP


def _group_kind(t):
    """BLOCK_GROUP, GRID_GROUP or TILE_GROUP for a group type of the prelude's, else None."""
    spelt = t.get_canonical().spelling.replace("const ", "").replace("&", "").strip()
    for kind in (BLOCK_GROUP, GRID_GROUP):
        if spelt.endswith(f"{GROUPS_NAMESPACE}::{kind}"):
            return kind
    if re.fullmatch(rf"{GROUPS_NAMESPACE}::{TILE_GROUP}<\d+U?>", spelt):
        return TILE_GROUP
    return None


def _tile_width(t):
    """N of thread_block_tile<N> type `t`: a power of two up to 32, else Fallback."""
    n = int(re.search(r"<(\d+)", t.get_canonical().spelling).group(1))
    if n < 1 or n > 32 or n & (n - 1):
        raise Fallback(f"a tile of {n} threads (the split lowers tiles of a power of two up "
                       "to a warp)")
    return n


def lower_block_groups(ci, text, name, define_lines=(), templates=False, headers=None):
    """`text` with the calls on a block group (`cg::thread_block b = cg::this_thread_block();`
    then `b.sync()`, `cg::sync(b)`, `b.thread_rank()`, ...) in kernel `name` and in the helpers
    of its file it calls written as the built-ins they are (`__syncthreads()`, the thread's
    linear index, ...), on their lines, so that the analysis sees the barriers (inline_helpers
    then brings a helper's barriers into the kernel, or the kernel keeps the fibers because a
    helper synchronises). A group may be declared, and passed to such a helper's group
    parameter; any other use (copied, passed elsewhere, in a helper of a header or defined
    after the kernel) raises Fallback: a thread loop cannot run its barrier, and the
    emulator's thread_rank() reads the running fiber's index. Unchanged where the file names no
    group."""
    if GROUPS_NAMESPACE not in text:
        return text
    if re.search(rf"\b{_LOWERED_PREFIX}", text):   # (_check_reserved_names lets them by)
        raise Fallback(f"a name starting with {_LOWERED_PREFIX}: names starting with tm_ are "
                       "reserved by tiledmm's transform")
    a = KernelAnalysis(ci, text, name, define_lines, templates, headers)
    kernels = [c for c in kernel_cursors(ci, a.tu.cursor) if c.spelling == name
               and c.is_definition()]
    if len(kernels) != 1:
        return text
    kernel = kernels[0]
    functions, todo = {}, [kernel]
    while todo:   # the kernel, the helpers it calls, and theirs
        fn = todo.pop()
        if fn.hash in functions:
            continue
        functions[fn.hash] = fn
        todo.extend({x.referenced.get_definition() for x in a.walk(fn)
                     if x.kind == ci.CursorKind.CALL_EXPR and x.referenced is not None and
                     not _in_groups(ci, x.referenced)} - {None})
    edits = []
    for fn in functions.values():
        if not any(x.referenced is not None and _in_groups(ci, x.referenced) for x in a.walk(fn)
                   if x.kind in (ci.CursorKind.CALL_EXPR, ci.CursorKind.DECL_REF_EXPR,
                                 ci.CursorKind.TYPE_REF)):
            continue
        if fn.hash != kernel.hash and (fn.location.file is None or
                                       fn.location.file.name != SOURCE_NAME or
                                       fn.extent.end.offset > kernel.extent.end.offset):
            raise Fallback(f"helper function {fn.spelling} uses cooperative groups")
        edits += _lowered_group_calls(ci, a, fn, functions)
    data = text.encode()
    for start, end, new in sorted(edits, reverse=True):
        data = data[:start] + new.encode() + data[end:]
    return data.decode()


def _lowered_group_calls(ci, a, fn, functions):
    """lower_block_groups' edits in function `fn`: [(start, end, text)]."""
    edits, lowered = [], set()

    def visit(c, parents):
        ref = c.referenced if c.kind == ci.CursorKind.CALL_EXPR else None
        if ref is not None and _in_groups(ci, ref):
            new = _lowered_call(ci, a, c, ref, parents)
            if new is not None:
                edits.extend(new)
                lowered.update(x.hash for x in a.walk(c))
                return
        if c.kind in (ci.CursorKind.VAR_DECL, ci.CursorKind.PARM_DECL):
            kind = _group_kind(c.type)
            if kind == BLOCK_GROUP:
                # unused once its calls are gone (g++ would warn)
                edits.append((c.extent.start.offset, c.extent.start.offset, "[[maybe_unused]] "))
                if c.kind == ci.CursorKind.VAR_DECL:   # renamed: the kernel may reuse its name
                    edits.append((c.location.offset, c.location.offset + len(c.spelling),
                                  _LOWERED_PREFIX + c.spelling))
            elif kind is not None:
                edits.append(_lowered_group_decl(ci, a, c, kind))
                lowered.update(x.hash for x in a.walk(c))
                return
        if c.kind == ci.CursorKind.DECL_REF_EXPR and c.hash not in lowered and \
                c.referenced is not None and c.referenced.kind in (
                    ci.CursorKind.VAR_DECL, ci.CursorKind.PARM_DECL) and \
                _group_kind(c.referenced.type) is not None:
            if not _is_group(ci, c.referenced.type) or not _group_argument(ci, c, parents,
                                                                           functions):
                raise Fallback(f"a cooperative group passed on or copied (line {c.location.line}): "
                           f"the split reads only a group's own calls, cg::reduce over a tile, "
                               f"and a block group's passing to a helper's group parameter")
            if c.referenced.kind == ci.CursorKind.VAR_DECL:   # (renamed above)
                edits.append((c.extent.start.offset, c.extent.end.offset,
                              _LOWERED_PREFIX + c.spelling))
        parents.append(c)
        for k in c.get_children():
            visit(k, parents)
        parents.pop()
    visit(fn, [])
    return edits


def _lowered_call(ci, a, c, ref, parents):
    """The edits writing call `c` of cooperative_groups' `ref` as the built-ins it is, or None
    where it is not a group's call the split knows (the caller then looks inside it)."""
    whole = [(c.extent.start.offset, c.extent.end.offset)]
    owner = ref.semantic_parent.spelling if ref.semantic_parent is not None else ""
    params = [x for x in ref.get_children() if x.kind == ci.CursorKind.PARM_DECL]
    of = _group_kind(params[0].type) if params else None   # a free function's group
    if ref.spelling == "reduce" and of == TILE_GROUP:
        return _lowered_reduce(ci, a, c, parents)
    if owner == BLOCK_GROUP and ref.spelling in _BLOCK_GROUP_CALLS or \
            ref.spelling == "sync" and of == BLOCK_GROUP:
        return [whole[0] + (_BLOCK_GROUP_CALLS[ref.spelling],)]
    if owner == GRID_GROUP and ref.spelling in _GRID_GROUP_CALLS or \
            ref.spelling == "sync" and of == GRID_GROUP:
        return [whole[0] + (_GRID_GROUP_CALLS[ref.spelling],)]
    if owner == TILE_GROUP and ref.spelling in _TILE_CALLS:
        member = next(c.get_children())
        n = _tile_width(next(member.get_children()).type)
        return [whole[0] + (_TILE_CALLS[ref.spelling].format(n=n),)]
    return None


def _lowered_group_decl(ci, a, d, kind):
    """The edit for the declaration `d` of a grid (`cg::grid_group g = cg::this_grid();`) or of
    a static tile of the block (`cg::thread_block_tile<32> t = cg::tiled_partition<32>(b);`):
    every use of it is lowered, so it becomes an unused int (its name still declared)."""
    init = [x for x in a.walk(d) if x.kind == ci.CursorKind.CALL_EXPR]
    want = "this_grid" if kind == GRID_GROUP else "tiled_partition"
    if d.kind != ci.CursorKind.VAR_DECL or not init or init[0].spelling != want or \
            not _in_groups(ci, init[0].referenced):
        raise Fallback(f"a cooperative group {d.spelling} (line {d.location.line}) that is not "
                       f"made by cg::{want}()" + (" of the block" if kind == TILE_GROUP else ""))
    if kind == TILE_GROUP:
        _tile_width(d.type)
        args = list(init[0].get_children())[1:]
        if len(args) != 1 or not _is_group(ci, args[0].type):
            raise Fallback(f"tile {d.spelling} (line {d.location.line}): the split lowers static "
                           "tiles of the block (cg::tiled_partition<N>(block))")
    return (d.extent.start.offset, d.extent.end.offset,
            f"[[maybe_unused]] const int {d.spelling} = 0")


def _lowered_reduce(ci, a, c, parents):
    """`cg::reduce(tile, v, cg::plus<T>())` in a statement directly in a block: the statement
    preceded by the xor shuffles the emulator's cg::reduce makes (the thread loops exchange
    them), `T tm_cg_vN = (v); for (unsigned tm_cg_dN = n / 2; ...) { tm_cg_vN += __shfl_xor_sync(
    FULL, tm_cg_vN, tm_cg_dN, n); }`, and the call replaced by tm_cg_vN."""
    kids = list(c.get_children())[1:]
    line = c.location.line
    if len(kids) != 3:
        raise Fallback(f"cg::reduce at line {line}: three arguments (tile, value, operation)")
    tile, value, op = kids
    op_name = re.sub(r"<.*", "", op.type.get_canonical().spelling).split("::")[-1]
    if op_name not in _REDUCE_OPS:
        raise Fallback(f"cg::reduce at line {line} with {op.type.spelling}: the split lowers "
                       f"cg::{', cg::'.join(_REDUCE_OPS)}")
    if any(x.kind == ci.CursorKind.CALL_EXPR and x.referenced is not None and
           _in_groups(ci, x.referenced) for x in a.walk(value)):
        raise Fallback(f"cg::reduce at line {line}: a group's call inside its value")
    stmt = next((p for p, outer in zip(reversed(parents), reversed([None] + parents[:-1]))
                 if outer is not None and outer.kind == ci.CursorKind.COMPOUND_STMT), None)
    chain = parents[parents.index(stmt) + 1:] if stmt is not None else []
    if stmt is None or any(p.kind.is_statement() for p in chain):
        raise Fallback(f"cg::reduce at line {line}: not in a statement of a block")
    if any(_conditional(ci, a, p) for p in chain):   # every lane must reach it
        raise Fallback(f"cg::reduce at line {line}: under ?:, && or ||")
    n = _tile_width(tile.type)
    v, d = f"{_LOWERED_PREFIX}v{c.extent.start.offset}", f"{_LOWERED_PREFIX}d{c.extent.start.offset}"
    value_text = a.data[value.extent.start.offset:value.extent.end.offset].decode()
    before = (f"{c.type.spelling} {v} = ({value_text}); "
              f"for (unsigned {d} = {n}u / 2; {d} > 0; {d} /= 2) {{ "
              f"{v} {_REDUCE_OPS[op_name]} __shfl_xor_sync(0xffffffffu, {v}, {d}, {n}); }} ")
    return [(stmt.extent.start.offset, stmt.extent.start.offset, before),
            (c.extent.start.offset, c.extent.end.offset, v)]


def _group_argument(ci, ref, parents, functions):
    """Whether DECL_REF_EXPR `ref` (`parents`: its ancestors, innermost last) is an argument
    of a call to one of `functions` whose parameter there is a block group."""
    arg = ref
    for p in reversed(parents):
        if p.kind == ci.CursorKind.UNEXPOSED_EXPR or (   # a conversion, the group's copy
                p.kind == ci.CursorKind.CALL_EXPR and p.referenced is not None and
                p.referenced.kind == ci.CursorKind.CONSTRUCTOR and _in_groups(ci, p.referenced)):
            arg = p
            continue
        if p.kind != ci.CursorKind.CALL_EXPR or p.referenced is None:
            return False
        fn = p.referenced.get_definition()
        args = [x.hash for x in list(p.get_children())[1:]]
        if fn is None or fn.hash not in functions or arg.hash not in args:
            return False
        params = [x for x in fn.get_children() if x.kind == ci.CursorKind.PARM_DECL]
        i = args.index(arg.hash)
        return i < len(params) and _is_group(ci, params[i].type)
    return False


def inline_helpers(ci, text, name, define_lines=(), templates=False, headers=None):
    """inline_warp_helpers until nothing more is inlined (a helper's body may call another:
    tm_block_sum calls tm_warp_sum; scan's scan4Exclusive four deep), at most 8 rounds. Returns
    (text, sync lines)."""
    lines = {}
    for round_ in range(8):
        new, more = inline_warp_helpers(ci, text, name, define_lines, templates, headers,
                                        site=100 * round_, check_reserved=round_ == 0)
        lines.update(more)
        if new == text:
            break
        text = new
    return text, lines


def inline_warp_helpers(ci, text, name, define_lines=(), templates=False, headers=None, site=0,
                        check_reserved=False):
    """`text` with each call statement of kernel `name` to a helper of the same file that
    synchronises with `__syncwarp` (reduce_steps' `last_warp_sum(partial, tid);`) replaced by
    the helper's body, so that the warp `if` around it can split at warp granularity
    (_find_warp_ifs). The body is written on the call's line (later lines keep their numbers)
    as `{ P1 tm_wl_p1 = (a1); ...; body }`, the parameters renamed, a declaration per
    argument evaluated in order (one order a call may take). Only where that is the same as
    the call: a void helper without return, goto or preprocessor lines in its body, parameters
    of plain types, no name in its body the kernel redeclares, and, for a template helper,
    its template parameters are the kernel's and every argument is a variable of exactly the
    parameter's type (so deduction gives the kernel's own parameters). Anything else: the
    text unchanged (the kernel keeps the fibers where the helper synchronises).
    A statement `x = helper(args);` directly in a block, x a local variable, of a non-void
    helper (of the same file or of `headers`, the registry's own) that synchronises (its body
    names a barrier or warp operation), whose body's one `return` is its last statement, is
    replaced by the body itself, without braces, so that its barriers are the block's
    (`R tm_wlK_p = (a); ...; x = static_cast<R>(returned);`, K a number per call): only where
    the body's own top-level names appear nowhere in the kernel.
    `check_reserved` (the first round, on the user's text): raise Fallback where the kernel
    uses names the transform reserves (_check_reserved_names).
    Returns (text, {line of an inlined call: line of the helper's first __syncwarp})."""
    a = KernelAnalysis(ci, text, name, define_lines, templates, headers)
    kernels = [c for c in kernel_cursors(ci, a.tu.cursor) if c.spelling == name
               and c.is_definition()]
    if len(kernels) != 1:
        return text, {}
    k = kernels[0]
    if check_reserved:
        _check_reserved_names(ci, a, k, text)
    body = [c for c in k.get_children() if c.kind == ci.CursorKind.COMPOUND_STMT]
    if len(body) != 1:
        return text, {}
    kernel_names_ = {c.spelling for c in a.walk(k)
                     if c.kind in (ci.CursorKind.VAR_DECL, ci.CursorKind.PARM_DECL)}
    kernel_tparams = {c.spelling for c in k.get_children()
                      if c.kind in (ci.CursorKind.TEMPLATE_TYPE_PARAMETER,
                                    ci.CursorKind.TEMPLATE_NON_TYPE_PARAMETER)}
    edits = []

    def visit(c, parent, index):
        if c.kind in (ci.CursorKind.BINARY_OPERATOR, ci.CursorKind.DECL_STMT) and \
                parent is not None and parent.kind == ci.CursorKind.COMPOUND_STMT:
            new = _inline_assigned_call(ci, a, c, kernel_names_, kernel_tparams,
                                        site + len(edits))
            if new is not None:
                edits.append(new)
                return
        if c.kind == ci.CursorKind.CALL_EXPR and parent is not None and (
                parent.kind == ci.CursorKind.COMPOUND_STMT or
                (parent.kind == ci.CursorKind.IF_STMT and index > 0)):
            new = _inline_call(ci, a, c, kernel_names_, kernel_tparams)
            if new is None and parent.kind == ci.CursorKind.COMPOUND_STMT:
                new = _inline_void_call(ci, a, c, kernel_names_, kernel_tparams,
                                        site + len(edits))
            if new is not None:
                edits.append(new)
            return
        for i, kid in enumerate(c.get_children()):
            visit(kid, c, i)
    visit(body[0], None, 0)
    if not edits:
        return text, {}
    data = text.encode()
    for start, end, new, _ in sorted(edits, reverse=True):
        data = data[:start] + new.encode() + data[end:]
    return data.decode(), {line: sync for _, _, _, (line, sync) in edits if sync is not None}


def _check_reserved_names(ci, a, k, text):
    """Names starting with tm_ are the transform's own (tm_threadIdx_, tm_x_, tm_wl_<param>,
    ...; issue 34): a kernel declaring one, a helper of the user's file it calls declaring one,
    or a name of the user's file (function, variable, macro) starting with tm_ that the kernel
    uses, keeps the fibers."""
    macros = set(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(tm_\w*)", text, re.M))
    funcs, seen = [k], set()
    while funcs:
        f = funcs.pop()
        if f.hash in seen:
            continue
        seen.add(f.hash)
        for c in a.walk(f):
            named = c.spelling or ""
            if c.kind in (ci.CursorKind.VAR_DECL, ci.CursorKind.PARM_DECL) and \
                    named.startswith("tm_") and not named.startswith(_LOWERED_PREFIX):
                raise Fallback(f"the name {named} (line {c.location.line}): names starting "
                                "with tm_ are reserved by tiledmm's transform")
            refs = [c.referenced] if c.kind in (ci.CursorKind.DECL_REF_EXPR,
                                                ci.CursorKind.TYPE_REF) else []
            if c.kind == ci.CursorKind.CALL_EXPR:
                refs = a.callees(c)
            for ref in refs:
                if ref is None or ref.kind == ci.CursorKind.OVERLOADED_DECL_REF or \
                        ref.location.file is None or ref.location.file.name != SOURCE_NAME:
                    continue   # (an unresolved call's name: its candidates are the callees)
                if ref.spelling.startswith("tm_") and not ref.spelling.startswith(
                        _LOWERED_PREFIX):
                    raise Fallback(f"the name {ref.spelling} (line {c.location.line}): names "
                                    "starting with tm_ are reserved by tiledmm's transform")
                d = ref.get_definition() or ref
                if d.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE):
                    funcs.append(d)
        for t in f.get_tokens():
            if t.spelling in macros:
                raise Fallback(f"the macro {t.spelling}: names starting with tm_ are reserved "
                                "by tiledmm's transform")


def _helper_of(ci, a, c):
    """The definition of the function call `c` calls, if the kernel's file or one of the
    registry's headers given to the analysis defines it; else None."""
    kids = list(c.get_children())
    fn = c.referenced
    if fn is None and kids:
        refs = [x for x in a.walk(kids[0]) if x.kind == ci.CursorKind.OVERLOADED_DECL_REF]
        if refs:
            if "<" in "".join(t.spelling for t in kids[0].get_tokens()):
                return None   # explicit template arguments
            decls = [d for d in a.tu.cursor.get_children() if d.spelling == refs[0].spelling and
                     d.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE)
                     and d.is_definition()]
            fn = decls[0] if len(decls) == 1 else None
    if fn is None or fn.location.file is None or (
            fn.location.file.name != SOURCE_NAME and fn.location.file.name not in a.header_data):
        return None
    return fn.get_definition() or fn


# Tokens a statement around an inlined call may hold besides it: no side effect, so the call's
# result may be computed first (names, literals, arithmetic, casts; never =, ++, --)
_PURE_TOKEN = re.compile(r"[A-Za-z_]\w*|[0-9][\w.]*|[-+*/%&|^~!<>?:().,\[\]]|<<|>>|<=|>=|==|!="
                         r"|&&|\|\|")


def _assigned_call(ci, a, stmt):
    """(the assigned variable's name, the declaration's type text or None, the right-hand
    side, the one call in it) of `x = rhs;` or `T x = rhs;` (x a local variable, rhs holding
    one call and otherwise free of side effects), or None."""
    kids = list(stmt.get_children())
    if stmt.kind == ci.CursorKind.DECL_STMT:
        if len(kids) != 1 or kids[0].kind != ci.CursorKind.VAR_DECL:
            return None
        var = kids[0]
        inits = [x for x in var.get_children() if x.kind.is_expression()]
        if len(inits) != 1 or "const" in var.type.spelling.split() or \
                var.type.kind == ci.TypeKind.AUTO or _is_group(ci, var.type):
            return None
        rhs = inits[0]
        head = a.data[var.extent.start.offset:rhs.extent.start.offset].decode()
        m = re.fullmatch(r"\s*([\w:]+(?:\s*\*)*)\s*" + re.escape(var.spelling) + r"\s*=\s*", head)
        if m is None:
            return None
        name, decl = var.spelling, m.group(1)
    else:
        toks = [t.spelling for t in stmt.get_tokens()]
        if len(kids) != 2 or len(toks) < 3 or toks[1] != "=":
            return None
        lhs, rhs = kids
        if lhs.kind != ci.CursorKind.DECL_REF_EXPR or lhs.referenced is None or \
                lhs.referenced.kind != ci.CursorKind.VAR_DECL:
            return None
        name, decl = lhs.spelling, None
    calls = [x for x in a.walk(rhs) if x.kind == ci.CursorKind.CALL_EXPR and (
        x.referenced is None or x.referenced.kind != ci.CursorKind.CONSTRUCTOR)]
    if len(calls) != 1:
        return None
    call = calls[0]
    outside = [t.spelling for t in rhs.get_tokens()
               if not call.extent.start.offset <= t.extent.start.offset < call.extent.end.offset]
    if not all(_PURE_TOKEN.fullmatch(t) for t in outside):
        return None
    return name, decl, rhs, call


def _synchronises(ci, a, fn, seen):
    """Whether helper `fn`'s body names a barrier or warp operation, or calls a helper of the
    analysis's sources that does (scan's scan4Exclusive through scan4Inclusive...)."""
    seen.add(fn.hash)
    if {t.spelling for t in fn.get_tokens()} & SYNC_NAMES:
        return True
    for x in a.walk(fn):
        if x.kind == ci.CursorKind.CALL_EXPR:
            g = _helper_of(ci, a, x)
            if g is not None and g.hash not in seen and _synchronises(ci, a, g, seen):
                return True
    return False


def _inline_assigned_call(ci, a, stmt, kernel_names_, kernel_tparams, site):
    """(start, end, replacement, (line, None)) for `x = helper(args);` or `T x = ... helper(args)
    ...;` (see inline_warp_helpers), or None."""
    found = _assigned_call(ci, a, stmt)
    if found is None:
        return None
    var, decl, rhs, call = found
    fn = _helper_of(ci, a, call)
    if fn is None:
        return None
    data = a.data if fn.location.file.name == SOURCE_NAME else a.header_data[fn.location.file.name]
    fbody = [x for x in fn.get_children() if x.kind == ci.CursorKind.COMPOUND_STMT]
    if len(fbody) != 1:
        return None
    fbody = fbody[0]
    body_toks = [t.spelling for t in fbody.get_tokens()]
    if not _synchronises(ci, a, fn, set()) or body_toks.count("return") != 1 or \
            any(t in ("goto", "#") for t in body_toks):
        return None
    stmts = list(fbody.get_children())
    if not stmts or stmts[-1].kind != ci.CursorKind.RETURN_STMT:
        return None
    head = data[fn.extent.start.offset:fbody.extent.start.offset].decode()
    m = re.search(r"(?:^|>)\s*(?:(?:__device__|__forceinline__|static|inline|__host__)\s+)*"
                  r"(\w+)\s+" + re.escape(fn.spelling) + r"\s*\(", head)
    if m is None or m.group(1) == "void":
        return None
    rtype = m.group(1)
    params = [x for x in fn.get_children() if x.kind == ci.CursorKind.PARM_DECL]
    tparams = {x.spelling for x in fn.get_children()
               if x.kind in (ci.CursorKind.TEMPLATE_TYPE_PARAMETER,
                             ci.CursorKind.TEMPLATE_NON_TYPE_PARAMETER)}
    args = list(call.get_children())[1:]
    if len(args) != len(params) or not tparams <= kernel_tparams:
        return None
    if rtype not in tparams and not re.fullmatch(r"[A-Za-z_]\w*", rtype):
        return None
    prefix = f"tm_wl{site}_"
    decls = _parameter_decls(ci, a, params, args, tparams, prefix)
    if decls is None:
        return None
    # the body's own names get the prefix too: they become the kernel's
    renames = _renamed_parameters(ci, a, fn, fbody, params, prefix, kernel_names_, own=True)
    if renames is None:
        return None

    def text_of(cursor):
        return " ".join(renames.get(t.extent.start.offset, t.spelling)
                        for t in cursor.get_tokens())
    ret = [x for x in stmts[-1].get_children() if x.kind.is_expression()]
    if len(ret) != 1:
        return None
    body = " ".join(text_of(st) + (";" if not text_of(st).rstrip().endswith(("}", ";")) else "")
                    for st in stmts[:-1])
    end = stmt.extent.end.offset   # a declaration's extent holds its `;`, an expression's not
    m = re.compile(rb"\s*;").match(a.data, end - (stmt.kind == ci.CursorKind.DECL_STMT))
    if m is None:
        return None
    # where a lane waits on fibers: the helper's first warp operation, where the helper is the
    # kernel's file's (a header's line is in another file: the call's line is reported)
    first = min((x for x in a.walk(fbody) if x.kind == ci.CursorKind.CALL_EXPR and
                 a.call_name(x) in SYNC_NAMES), key=lambda x: x.extent.start.offset, default=None)
    sync = first.location.line if first is not None and \
        fn.location.file.name == SOURCE_NAME else None
    result = f"static_cast<{rtype}>({text_of(ret[0])})"
    if (call.extent.start.offset, call.extent.end.offset) != (
            rhs.extent.start.offset, rhs.extent.end.offset):   # the call inside an expression
        value = f"{prefix}value"
        before = a.data[rhs.extent.start.offset:call.extent.start.offset].decode()
        after = a.data[call.extent.end.offset:rhs.extent.end.offset].decode()
        body += f" {rtype} {value} = {result};"
        result = f"{before}{value}{after}"
    declared = f"{decl} {var};" if decl is not None else ""
    return (stmt.extent.start.offset, m.end(),
            declared + " " + " ".join(decls) + " " + body + f" {var} = {result};",
            (stmt.location.line, sync))


def _inline_call(ci, a, c, kernel_names_, kernel_tparams):
    """(start, end, replacement) for call statement `c` (see inline_warp_helpers), or None."""
    kids = list(c.get_children())
    fn = c.referenced
    if fn is None and kids:
        refs = [x for x in a.walk(kids[0]) if x.kind == ci.CursorKind.OVERLOADED_DECL_REF]
        if refs:
            decls = [d for d in a.tu.cursor.get_children() if d.spelling == refs[0].spelling and
                     d.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE)
                     and d.is_definition()]
            fn = decls[0] if len(decls) == 1 else None
        if refs and "<" in "".join(t.spelling for t in kids[0].get_tokens()):
            return None   # explicit template arguments
    if fn is None or fn.location.file is None or fn.location.file.name != SOURCE_NAME:
        return None
    fn = fn.get_definition() or fn
    fbody = [x for x in fn.get_children() if x.kind == ci.CursorKind.COMPOUND_STMT]
    if len(fbody) != 1 or not any(x.kind == ci.CursorKind.CALL_EXPR and x.spelling == "__syncwarp"
                                  for x in a.walk(fbody[0])):
        return None
    fbody = fbody[0]
    if fn.result_type.spelling != "void" and fn.kind == ci.CursorKind.FUNCTION_DECL:
        return None
    if fn.kind == ci.CursorKind.FUNCTION_TEMPLATE and not fn.spelling or \
            any(t.spelling in ("return", "goto", "#") for t in fbody.get_tokens()):
        return None
    if fn.kind == ci.CursorKind.FUNCTION_TEMPLATE:
        head = a.data[fn.extent.start.offset:fbody.extent.start.offset].decode()
        if not re.search(r">\s*(__device__\s+|__forceinline__\s+|static\s+|inline\s+)*void\b",
                         head):
            return None
    params = [x for x in fn.get_children() if x.kind == ci.CursorKind.PARM_DECL]
    tparams = {x.spelling for x in fn.get_children()
               if x.kind in (ci.CursorKind.TEMPLATE_TYPE_PARAMETER,
                             ci.CursorKind.TEMPLATE_NON_TYPE_PARAMETER)}
    args = [x for x in kids[1:]]
    if len(args) != len(params) or not tparams <= kernel_tparams:
        return None
    decls = _parameter_decls(ci, a, params, args, tparams, "tm_wl_")
    renames = None if decls is None else \
        _renamed_parameters(ci, a, fn, fbody, params, "tm_wl_", kernel_names_)
    if renames is None:
        return None
    toks = list(fbody.get_tokens())[1:-1]   # without the braces
    text = " ".join(renames.get(t.extent.start.offset, t.spelling) for t in toks)
    end = c.extent.end.offset
    m = re.compile(rb"\s*;").match(a.data, end)
    if m is None:
        return None
    sync = next(x.location.line for x in a.walk(fbody)
                if x.kind == ci.CursorKind.CALL_EXPR and x.spelling == "__syncwarp")
    return (c.extent.start.offset, m.end(), "{ " + " ".join(decls) + " " + text + " }",
            (c.location.line, sync))


def _inline_void_call(ci, a, c, kernel_names_, kernel_tparams, site):
    """(start, end, replacement, (line, None)) for a statement `helper(args);` of a void helper
    of the kernel's file that synchronises (a barrier: reductionMultiBlockCG's
    `reduceBlock(sdata, block);`) and has no `return`: its body without braces, so that its
    barriers are the block's, its parameters and own locals renamed (tm_wl<site>_), or None."""
    fn = _helper_of(ci, a, c)
    if fn is None or fn.location.file.name != SOURCE_NAME or fn.kind != ci.CursorKind.FUNCTION_DECL \
            or fn.result_type.spelling != "void":
        return None
    fbody = [x for x in fn.get_children() if x.kind == ci.CursorKind.COMPOUND_STMT]
    if len(fbody) != 1 or not _synchronises(ci, a, fn, set()) or \
            any(t.spelling in ("return", "goto", "#") for t in fbody[0].get_tokens()):
        return None
    fbody = fbody[0]
    params = [x for x in fn.get_children() if x.kind == ci.CursorKind.PARM_DECL]
    args = list(c.get_children())[1:]
    if len(args) != len(params):
        return None
    prefix = f"tm_wl{site}_"
    decls = _parameter_decls(ci, a, params, args, set(), prefix)
    renames = None if decls is None else \
        _renamed_parameters(ci, a, fn, fbody, params, prefix, kernel_names_, own=True)
    m = re.compile(rb"\s*;").match(a.data, c.extent.end.offset)
    if renames is None or m is None:
        return None
    body = " ".join(renames.get(t.extent.start.offset, t.spelling)
                    for t in list(fbody.get_tokens())[1:-1])   # without the braces
    return (c.extent.start.offset, m.end(), " ".join(decls) + " " + body,
            (c.location.line, None))


def _conditional(ci, a, e):
    """Whether expression `e` evaluates an operand only under a condition (?:, &&, ||)."""
    if e.kind == ci.CursorKind.CONDITIONAL_OPERATOR:
        return True
    kids = list(e.get_children())
    if e.kind != ci.CursorKind.BINARY_OPERATOR or len(kids) != 2:
        return False
    between = a.data[kids[0].extent.end.offset:kids[1].extent.start.offset].decode()
    return between.strip() in ("&&", "||")


def _parameter_decls(ci, a, params, args, tparams, prefix):
    """One declaration per argument, `P <prefix><name> = (arg);`, evaluated in order (one
    order a call may take), or None where that is not the call: a parameter of an array,
    reference or function type, or, for a template helper (tparams), an argument that is not a
    variable of exactly the parameter's type (deduction must give the kernel's own parameters;
    an array decays to a pointer to its elements)."""
    decls = []
    for p, arg in zip(params, args):
        ptype = p.type.spelling
        if not p.spelling or re.search(r"[\[\](&]", ptype) and not _is_group(ci, p.type):
            return None   # (a block group by reference: its calls are lowered)
        if tparams:
            inner = arg
            while inner.kind == ci.CursorKind.UNEXPOSED_EXPR and \
                    len(list(inner.get_children())) == 1:
                inner = next(inner.get_children())
            if inner.kind != ci.CursorKind.DECL_REF_EXPR or inner.referenced is None:
                return None
            t = inner.referenced.type
            have = re.sub(r"^const\s+", "", t.spelling.strip())
            if t.kind in (ci.TypeKind.CONSTANTARRAY, ci.TypeKind.DEPENDENTSIZEDARRAY):
                have = t.get_array_element_type().spelling + " *"   # decays to a pointer
            if have.replace(" ", "") != re.sub(r"^const\s+", "", ptype).replace(" ", ""):
                return None
        atext = a.data[arg.extent.start.offset:arg.extent.end.offset].decode()
        unused = "[[maybe_unused]] " if _is_group(ci, p.type) else ""   # its calls lowered
        decls.append(f"{unused}{ptype} {prefix}{p.spelling} = ({atext});")
    return decls


def _renamed_parameters(ci, a, fn, fbody, params, prefix, kernel_names_, own=False):
    """{offset of a use of a parameter in the helper's body: its new name}, or None where a
    name the body refers to outside itself is one the kernel declares too (it would mean the
    kernel's there). own: the body's own variables renamed as well (declarations and uses)."""
    inside = {x.hash for x in a.walk(fn) if x.kind in (ci.CursorKind.VAR_DECL,
                                                       ci.CursorKind.PARM_DECL)}
    renames = {}
    names = {p.hash: p.spelling for p in params}
    if own:
        for x in a.walk(fbody):
            if x.kind == ci.CursorKind.VAR_DECL and x.spelling:
                names[x.hash] = x.spelling
                renames[x.location.offset] = prefix + x.spelling
    for x in a.walk(fbody):
        if x.kind != ci.CursorKind.DECL_REF_EXPR or x.referenced is None:
            continue
        if x.referenced.hash in names:
            renames[x.extent.start.offset] = prefix + names[x.referenced.hash]
        elif x.referenced.hash not in inside and x.spelling in kernel_names_:
            return None
    return renames
