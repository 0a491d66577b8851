"""Helpers inlined into a kernel before the barrier split analyses it (split/transform.py, issue
34): a call statement of a helper of the same file, or of the registry's own header, that
synchronises (`__syncwarp`, a barrier, shuffles: reduce_steps' `last_warp_sum(partial, tid);`,
`sum = tm_block_sum(sum, warp_sums);`, reductionMultiBlockCG's `reduceBlock(sdata, block);`) is
replaced by the helper's body on the call's line, so that its synchronisation is the kernel's
own. Only where that is exactly the call; anything else leaves the text unchanged (the kernel
then keeps the fibers where the helper synchronises). Also the check that a kernel uses none
of the names the transform reserves.
"""
import re

from ..diagnostics import SOURCE_NAME
from ..source import apply_edits, kernel_cursors
from .analysis import SYNC_NAMES, KernelAnalysis, Fallback
from .lower import LOWERED_PREFIX, is_block_group

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
    syncs = {line: sync for _, _, _, (line, sync) in edits if sync is not None}
    return apply_edits(text.encode(), edits).decode(), syncs


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
                    named.startswith("tm_") and not named.startswith(LOWERED_PREFIX):
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
                        LOWERED_PREFIX):
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
                var.type.kind == ci.TypeKind.AUTO or is_block_group(ci, var.type):
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


def _parameter_decls(ci, a, params, args, tparams, prefix):
    """One declaration per argument, `P <prefix><name> = (arg);`, evaluated in order (one
    order a call may take), or None where that is not the call: a parameter of an array,
    reference or function type, or, for a template helper (tparams), an argument that is not a
    variable of exactly the parameter's type (deduction must give the kernel's own parameters;
    an array decays to a pointer to its elements)."""
    decls = []
    for p, arg in zip(params, args):
        ptype = p.type.spelling
        if not p.spelling or re.search(r"[\[\](&]", ptype) and not is_block_group(ci, p.type):
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
        unused = "[[maybe_unused]] " if is_block_group(ci, p.type) else ""   # its calls lowered
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
