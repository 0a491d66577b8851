"""Calls written as the built-ins they are, before the barrier split analyses a kernel
(split/transform.py, issues 34 and 43): cooperative groups (a block's, the grid's in a
cooperative launch, static tiles of a block up to a warp and cg::reduce over them). The
result is the kernel's text for the split alone: the fibers run the original with the
emulator's headers.
"""
import re

from ..diagnostics import SOURCE_NAME
from ..source import apply_edits, kernel_cursors
from .analysis import (BLOCK_GROUP, GRID_BARRIER, GRID_GROUP, GROUPS_NAMESPACE, TILE_GROUP,
                       KernelAnalysis, Fallback)

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
LOWERED_PREFIX = "tm_cg_"


def _in_groups(ci, decl):
    """Whether `decl` is cooperative_groups' own (the namespace, or a member of thread_block)."""
    while decl is not None and decl.kind != ci.CursorKind.TRANSLATION_UNIT:
        if decl.kind == ci.CursorKind.NAMESPACE and decl.spelling == GROUPS_NAMESPACE:
            return True
        decl = decl.semantic_parent
    return False


def is_block_group(ci, t):
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
    if re.search(rf"\b{LOWERED_PREFIX}", text):   # (_check_reserved_names lets them by)
        raise Fallback(f"a name starting with {LOWERED_PREFIX}: names starting with tm_ are "
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
    return apply_edits(text.encode(), edits).decode()


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
                                  LOWERED_PREFIX + c.spelling))
            elif kind is not None:
                edits.append(_lowered_group_decl(ci, a, c, kind))
                lowered.update(x.hash for x in a.walk(c))
                return
        if c.kind == ci.CursorKind.DECL_REF_EXPR and c.hash not in lowered and \
                c.referenced is not None and c.referenced.kind in (
                    ci.CursorKind.VAR_DECL, ci.CursorKind.PARM_DECL) and \
                _group_kind(c.referenced.type) is not None:
            if not is_block_group(ci, c.referenced.type) or not _group_argument(ci, c, parents,
                                                                           functions):
                raise Fallback(f"a cooperative group passed on or copied (line {c.location.line}): "
                           f"the split reads only a group's own calls, cg::reduce over a tile, "
                               f"and a block group's passing to a helper's group parameter")
            if c.referenced.kind == ci.CursorKind.VAR_DECL:   # (renamed above)
                edits.append((c.extent.start.offset, c.extent.end.offset,
                              LOWERED_PREFIX + c.spelling))
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
        if len(args) != 1 or not is_block_group(ci, args[0].type):
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
    v, d = f"{LOWERED_PREFIX}v{c.extent.start.offset}", f"{LOWERED_PREFIX}d{c.extent.start.offset}"
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
        return i < len(params) and is_block_group(ci, params[i].type)
    return False


def _conditional(ci, a, e):
    """Whether expression `e` evaluates an operand only under a condition (?:, &&, ||)."""
    if e.kind == ci.CursorKind.CONDITIONAL_OPERATOR:
        return True
    kids = list(e.get_children())
    if e.kind != ci.CursorKind.BINARY_OPERATOR or len(kids) != 2:
        return False
    between = a.data[kids[0].extent.end.offset:kids[1].extent.start.offset].decode()
    return between.strip() in ("&&", "||")
