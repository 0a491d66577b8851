"""Splitting a kernel at its barriers (issue 34, design 1): a source transform that runs a whole
block of a `tm.compile` kernel as loops over its threads, instead of one fiber per CUDA thread.

The kernel's body is cut at each top-level `__syncthreads();` into barrier-free regions; each
region becomes `for z, y, x over the block: { threadIdx = (x, y, z); region }`, so a barrier is
the end of one loop and the start of the next, and the compiler sees several threads' arithmetic
side by side. Local variables that one region declares and another uses become per-thread
arrays (one element per thread of the block, on the OS thread's stack). A `for` loop that holds
barriers stays outside the thread loops when its header is block-uniform: it reads only
parameters the kernel never writes, blockIdx, blockDim, gridDim, constants, its own variable,
and locals of that kind (the tile loop); its body is split the same way. A barrier-free `for`
loop of that kind also goes outside the thread loops (interchange: `for k { for threads {
sum += As[ty][k] * Bs[k][tx]; } }`, which g++ vectorises across threads) when its body holds
no further loop, and locals computed only from threadIdx and uniform values (tx, row, col) are
recomputed in each thread loop rather than stored, so the compiler sees them as affine in the
thread index. A thread-dependent `if` around such a loop (the naive matmul's `if (row < n &&
col < n) { ... for (k...) ... }`, or `if (...) return;` before it) is first written as guarded
statements at the top level (split/guard.py), so that its loop is interchanged too, and a chunk
of threads all taking the branch runs it unguarded. An `if` holding barriers whose condition is
block-uniform (`if (STEP == 3)`)
stays at block level and its branches are split. A grid-stride loop (`for (i = tid; i < n;
i += blockDim.x)`: the thread only in its start, a bound of the data's size) runs as rounds:
every active thread's next iteration, until none is left. A thread loop calling a function
stores each thread's index where the emulator's threadIdx reads it, so helpers may read it.
Warp granularity (reduce_steps' last warp): a helper of the same file whose body calls
`__syncwarp` is inlined at its call statement (split_inline.inline_warp_helpers), and the one
`if (cond) { A; __syncwarp(); B; ... }` with full-mask `__syncwarp()`s at the top of its branch,
outside loops, whose condition reads only the thread index and uniform values, runs as: a
thread loop storing each thread's predicate, a check that the lanes of every warp agree (if
not, the block fails as on fibers: "no thread can proceed", tm_emu::split_warp_stuck), then one
loop per stretch between `__syncwarp()`s over the threads of the warps taking the branch.
Full-mask shuffles and votes (split_analysis._find_shuffles): a statement holding them ends a
thread loop that stores every thread's value (its bits, as the emulator's warp_op takes them)
in a per-call-site exchange array, and the next thread loop reads its source lane's
(tm_emu::split_shfl / split_vote, the fibers' lane rule), at the top level, in uniform loops
(tm_warp_sum's `for (offset ...)`) and in the warp `if`'s branch (tm_block_sum's
`if (warp == 0)`); a non-void helper called as `x = helper(args);` is inlined without braces
(inline_helpers), and the registry's own headers' helpers too (registry_source).

Everything else keeps the fibers (the kernel says why, `SplitPlan.reason`): barriers under an
`if` with a thread-dependent condition, a `while` or a loop with a thread-dependent header (the
fibers report divergence there as before), `__syncthreads_count/and/or`, warp operations
other than those above (partial masks, under `?:`/`&&`/`||`, after the warp `if`), `goto`, `asm`, a `return` before a barrier, `break`/`continue`
that would leave a thread loop, templates (tm.compile), helper functions that synchronise, what
the emitter's copies of the kernel's text would change (_Emitter._check_text: control flow
from a macro's expansion, `#define`/`#undef` or a type declared in the body, a name that means
two things, where a local emitted at a thread loop's top would hide the other), and any
source libclang cannot read. tm.compile and whole programs insert the split right after the
kernel, where the file's macros have the values the kernel saw.

The registry's own kernels (cuda/*.cu, templates) go through `registry_source` at build time
(setup.py, tiledmm._emu only): each split becomes a function template beside its kernel, and
`tm_with_split_<kernel>` pairs every instance with its split for tm_launch (native/common.h). A
template whose warp operations sit under compile-time conditions (`if (STEP == ...)`) splits for
the instances that never reach them; the others name the kernel itself (fibers).

The split function is compiled beside the original kernel: plain launches use it, and profile
mode's builds (with the hooks of emu/profile/split_hooks.h; for tm.compile kernels and programs
without the interchange, split_kernel(profile=True)), whose counts are the fibers' own; check
mode builds the kernel without it (its reports are the fibers'). The launcher picks it at run
time (tm_emu_launch_blocks) when the block's per-thread arrays
fit in MAX_FRAME bytes; otherwise the same launch runs on fibers. benchmarks/emu_notes.md has
the figures. split/analysis.py holds the analysis (what is uniform, live, recomputed, and the
checks that keep the fibers); this module writes the text and is the transform's public face.
"""
import os
import re
from dataclasses import dataclass

from ..diagnostics import SOURCE_NAME
from ..source import alignas_in_front, apply_edits, cindex, emu_dialect, split_top_level
from .analysis import (MAX_FRAME, PURE_CALLS, SHUFFLE_OPS, VOTE_OPS,  # noqa: F401
                             KernelAnalysis, Fallback, kernel_names)
from .guard import GUARD_PREFIX, guard_loops
from .inline import inline_helpers
from .lower import lower_block_groups


@dataclass
class SplitPlan:
    """The transform's answer for one kernel: `text` (C++ appended after the user's source:
    the split function and its frame size) or None, and `reason` (why the kernel keeps its
    fibers; "" when split). `regions`: barrier-free regions made. `frame`: bytes of per-thread
    arrays per CUDA thread."""
    text: object
    reason: str
    regions: int = 0
    frame: int = 0      # bytes of per-thread arrays per thread of the block
    end: int = -1       # offset just past the kernel's definition (registry_source inserts there)
    template_args: str = ""   # "<T, TILE, Index>" of a template kernel
    # A template's instances that keep the fibers: a compile-time condition over its parameters
    # ("" for none), and why (a warp operation on the paths those instances take).
    fiber_guard: str = ""
    fiber_guard_reason: str = ""
    # Why profile mode keeps the fibers although the split applies ("" when it need not): the
    # code between thread loops may access memory, which no CUDA thread's log would count.
    profile_reason: str = ""


def split_kernel(source, name, define_lines=(), templates=False, headers=None, profile=False):
    """SplitPlan for kernel `name` of `source` (the user's text as written; the emulator's
    dialect is applied here, as full_source does). `headers`: {name: text} of headers whose
    device helpers may be inlined (registry_source: the registry's own, never a user's).
    profile: a plan for a profile build alone (tm.compile, programs): barrier-free loops stay
    inside the thread loops (no interchange), and a kernel with a profile_reason keeps the
    fibers (reason "profile mode: ..."). The registry's text serves both builds and guards
    profile_reason itself (registry_source)."""
    ci = cindex()
    if ci is None:
        return SplitPlan(None, "libclang is not available")
    # a program's text (templates) keeps its offsets: only the same-length rewrite
    text = alignas_in_front(source) if templates else emu_dialect(source)
    try:
        lowered = lower_block_groups(ci, text, name, define_lines, templates, headers)
        inlined, sync_lines = inline_helpers(ci, lowered, name, define_lines, templates, headers)
        analysis = KernelAnalysis(ci, inlined, name, define_lines, templates, headers,
                                  interchange=not profile)
        analysis.inlined_sync_lines = sync_lines
        analysis.analyse()
        guarded = None if profile else guard_loops(analysis)
        if guarded is not None:   # (split/guard.py); where it does not split, the text as it was
            try:
                again = KernelAnalysis(ci, guarded, name, define_lines, templates, headers)
                again.inlined_sync_lines = sync_lines
                again.analyse()
                analysis, inlined = again, guarded
            except Fallback:
                pass
        plan = _Emitter(analysis).plan()
        if profile and plan.text is not None and plan.profile_reason:
            return SplitPlan(None, f"profile mode: {plan.profile_reason}")
        # the kernel's end in `text` (the inlined bodies sit inside the kernel)
        plan.end -= len(inlined.encode()) - len(text.encode())
        return plan
    except Fallback as exc:
        return SplitPlan(None, str(exc))


class _Emitter:
    """The split function's text, from a kernel's analysis (split_analysis.KernelAnalysis)."""

    def __init__(self, analysis):
        self.a = analysis
        self.ci, self.name, self.templates = analysis.ci, analysis.name, analysis.templates
        self.data, self.src, self.walk = analysis.data, analysis.src, analysis.walk
        self.n_regions = 0   # barrier-free regions made
        self.frame = 0       # bytes of per-thread arrays per thread (those known here)
        self.pred_arrays = []   # per-thread predicates of warp `if`s (bool per thread)
        self._warp_masks = None  # inside a warp `if`: its per-warp lane masks' array (_warp_if)
        # shuffles and votes: (kind, index) -> array declaration, per call site (_exchange)
        self.exchange_arrays = {}
        self.exchange_index = {}   # CALL_EXPR hash -> its call site's index
        self.vector_loops = 0   # thread loops g++ may vectorise (_thread_loop)
        self.signed_chunks = False   # a chunk recomputes a local over int built-ins (_signed_decl)

    def plan(self):
        a = self.a
        self._check_text(a.body)
        out = self._emit_seq(a.stmts, top=True)
        guard = " || ".join(f"({g})" for g, _ in a.fiber_guards)
        why = "; ".join(sorted({r for _, r in a.fiber_guards}))
        return SplitPlan(self._function(a.kernel, a.body, out), "", self.n_regions, self.frame,
                         a.kernel.extent.end.offset, a.template_args, guard, why,
                         self._block_level_access())

    def _block_level_access(self):
        """Why the code run once per block, outside the thread loops (the headers of hoisted
        loops, the conditions of block-uniform `if`s, uniform declarations), may access memory,
        or "": profile mode counts accesses per CUDA thread, and that code runs in no thread's
        turn. Conservative: any subscript, `*`, `->` or call other than pure math there. Also
        warp shuffles and votes: emu_profile.cpp counts those on fibers only."""
        ci, a = self.ci, self.a
        if a.shuffle_calls:
            return "warp shuffles or votes (profile mode counts them on fibers)"
        parts = []
        for c in self.walk(a.body):
            if c.kind == ci.CursorKind.FOR_STMT and a.split_loop(c):
                parts += a.for_parts(c)[0]
            elif c.kind == ci.CursorKind.IF_STMT and a.split_if(c):
                parts.append(list(c.get_children())[0])
            elif c.kind == ci.CursorKind.DECL_STMT and \
                    any(d.hash in a.uniform for d in a.var_decls(c)):
                parts.append(c)
        for part in parts:
            for c in self.walk(part):
                tokens = [t.spelling for t in c.get_tokens()][:1]
                if c.kind in (ci.CursorKind.ARRAY_SUBSCRIPT_EXPR, ci.CursorKind.CXX_NEW_EXPR,
                              ci.CursorKind.CXX_DELETE_EXPR) or \
                        (c.kind == ci.CursorKind.CALL_EXPR and c.spelling not in PURE_CALLS) or \
                        (c.kind == ci.CursorKind.UNARY_OPERATOR and tokens == ["*"]) or \
                        (c.kind == ci.CursorKind.MEMBER_REF_EXPR and
                         "->" in [t.spelling for t in c.get_tokens()]):
                    return (f"the block-level code at line {c.location.line} may access memory "
                            "outside every thread's turn")
        return ""

    def _emit_seq(self, stmts, top):
        """C++ for a statement list: shared declarations hoisted, uniform parts at the block
        level, each barrier-free run of statements as one thread loop."""
        ci = self.ci
        out, run = [], []
        scopes = 0   # scopes opened by _shared_in_register, closed at the sequence's end
        last_barrier = max((i for i, s in enumerate(map(self.a.unwrap, stmts))
                            if self.a.is_barrier_stmt(s) or self.a.is_shuffle_stmt(s) or
                            (s.kind in (ci.CursorKind.FOR_STMT, ci.CursorKind.IF_STMT) and
                             (self.a.has_barrier(s) or self.a.warp_if(s)))),
                           default=-1)   # hoisted barrier-free loops end no region for return

        def flush(final):
            if run:
                if not final and any(c.kind == ci.CursorKind.RETURN_STMT for r in run
                                     for c in self.walk(r)):
                    raise Fallback(f"return before a barrier (line {run[0].location.line})")
                out.append(self._thread_loop(run, final))
                run.clear()

        for i, s in enumerate(map(self.a.unwrap, stmts)):
            if self._warp_masks is not None and self.a.is_warp_sync_stmt(s):
                flush(False)
                out.append(_profile_warp_sync(self._warp_masks, s.location.line))
                continue
            if self.a.is_shuffle_stmt(s):
                # the run so far and the stores of the statement's values: one thread loop;
                # the statement starts the next (its results read from the stores)
                if any(c.kind == ci.CursorKind.RETURN_STMT for r in run for c in self.walk(r)):
                    raise Fallback(f"return before a warp shuffle (line {run[0].location.line})")
                stores, args, votes = self._exchange_stores(s)
                label = f"tm_next_thread_{self.n_regions + 1}_"
                text = "\n".join([self._stmt_text(r, label) for r in run] + [stores])
                out.append(self._thread_loop(run + args, False, text=text))
                run.clear()
                out.extend(votes)
                run.append(s)
                self._check_region_stmt(s, final=top and i > last_barrier)
                continue
            if self.a.is_barrier_stmt(s):
                flush(False)
                out.append(_profile_barrier(s.location.line))
                if self.a.is_grid_barrier_stmt(s):   # the block's thread waits for the grid
                    out.append(f"tm_emu_split_grid_sync(__FILE__, {s.location.line});")
                continue
            if self.a.is_shared_decl(s):
                # in place: it may use a uniform local declared above. Inside a loop or an if
                # with barriers too (NVIDIA's matrixMul declares its tiles in the tile loop): a
                # __shared__ variable is one object per block wherever it is declared (a static
                # thread_local here), and this is block-level code, run once per iteration.
                out.append(self.src(s))
                out.append(self._shared_in_register(s))
                scopes += 1
                continue
            if self.a.split_loop(s):
                flush(False)
                header, body, inner = self.a.for_parts(s)
                head = self.data[s.extent.start.offset:body.extent.start.offset].decode()
                if self._one_region(s, inner):
                    out.append(self._thread_loop(inner, False, around=head,
                                                 chunks=self.a.chunkable(s),
                                                 long_loop=self.a.runtime_trips(s),
                                                 tiles=self._k_tiles(s)))
                else:
                    out.append(head + "{\n" + self._emit_seq(inner, False) + "\n}")
                continue
            if self.a.round_loop(s):
                flush(False)   # (no return before it in this region: split_analysis)
                out.append(self._round_loop(s))
                continue
            if self.a.warp_if(s):
                flush(False)
                out.append(self._warp_if(s))
                continue
            if self.a.split_if(s):   # a block-uniform condition: every thread takes one branch
                flush(False)
                kids = list(s.get_children())
                head = self.data[s.extent.start.offset:kids[1].extent.start.offset].decode()
                text = head + "{\n" + self._emit_seq(self.a.branch_stmts(kids[1]), False) + "\n}"
                if len(kids) == 3:
                    text += " else {\n" + self._emit_seq(self.a.branch_stmts(kids[2]), False) + \
                        "\n}"
                out.append(text)
                continue
            if s.kind == ci.CursorKind.DECL_STMT and \
                    any(d.hash in self.a.recompute for d in self.a.var_decls(s)):
                continue   # emitted where used (_thread_loop)
            if s.kind == ci.CursorKind.DECL_STMT and top and \
                    any(d.hash in self.a.uniform for d in self.a.var_decls(s)):
                flush(False)
                out.append(self.src(s))
                continue
            run.append(s)
            self._check_region_stmt(s, final=top and i > last_barrier)
        flush(top)
        return "\n".join(out) + "\n}" * scopes

    def _shared_in_register(self, s):
        """After a `__shared__` declaration: its address computed once, then the same name bound
        to it in a new scope (closed by _emit_seq). A `__shared__` array is a thread_local
        static on the emulator, and in a shared object every use of its address is a
        __tls_get_addr call that g++ does not hoist out of the thread loops; hidden behind an
        empty asm (tm_split_opaque) the address is a plain pointer kept in a register. Not in
        profile builds (TM_SPLIT_FAST), whose accesses stay as the fibers' are."""
        names = [d.spelling for d in self.a.var_decls(s)]
        return ("#if TM_SPLIT_FAST\n" +
                "".join(f"auto *const tm_shp_{n}_ = tm_split_opaque(&{n});\n" for n in names) +
                "#endif\n{\n#if TM_SPLIT_FAST\n" +
                "".join(f"auto &{n} = *tm_shp_{n}_;\n" for n in names) + "#endif\n")

    def _one_region(self, s, stmts):
        """Whether the interchanged (barrier-free) loop `s` holds one thread loop's statements
        and nothing the emitter puts at block level: it then goes inside the loops over z and y
        and around the one over x (_thread_loop's `around`), so a row's set-up (its per-thread
        arrays' pointers, the recomputed `ty`) is done once per row, not once per iteration."""
        a, ci = self.a, self.ci
        if self._warp_masks is not None or a.has_barrier(s) or s.hash in a.stepping:
            return False   # (a stepping loop's header runs once per block: split_analysis._steps)
        for st in map(a.unwrap, stmts):
            if a.is_barrier_stmt(st) or a.is_shuffle_stmt(st) or a.is_shared_decl(st) or \
                    a.split_loop(st) or a.round_loop(st) or a.warp_if(st) or a.split_if(st):
                return False
            if st.kind == ci.CursorKind.DECL_STMT and any(
                    d.hash in a.recompute or d.hash in a.uniform for d in a.var_decls(st)):
                return False
        return bool(stmts)

    def _check_region_stmt(self, s, final):
        """return only after the last barrier; break/continue only inside their own loop."""
        ci = self.ci
        loops = (ci.CursorKind.FOR_STMT, ci.CursorKind.WHILE_STMT, ci.CursorKind.DO_STMT,
                 ci.CursorKind.CXX_FOR_RANGE_STMT)

        def visit(c, depth_loop, depth_switch):
            if c.kind == ci.CursorKind.RETURN_STMT and not final:
                raise Fallback(f"return before a barrier (line {c.location.line})")
            if c.kind == ci.CursorKind.CONTINUE_STMT and depth_loop == 0:
                raise Fallback(f"continue of a loop with barriers (line {c.location.line})")
            if c.kind == ci.CursorKind.BREAK_STMT and depth_loop == 0 and depth_switch == 0:
                raise Fallback(f"break of a loop with barriers (line {c.location.line})")
            for k in c.get_children():
                visit(k, depth_loop + (c.kind in loops), depth_switch +
                      (c.kind == ci.CursorKind.SWITCH_STMT))
        visit(s, 0, 0)

    def _stmt_text(self, s, label):
        """A region statement's text, with declarations of per-thread variables turned into
        assignments to this thread's element, and return into a jump to the next thread."""
        ci = self.ci
        if self.a.is_shuffle_stmt(s):
            return self._exchange_reads(s)
        if s.kind == ci.CursorKind.DECL_STMT:
            decls = self.a.var_decls(s)
            if any(d.hash in self.a.live_types for d in decls):
                return " ".join(self._decl_assign(s, d, part) for d, part in
                                zip(decls, self._declarators(s, decls)))
        return self._text_with_returns(s, label)

    def _declarators(self, s, decls):
        """The declarator texts of a declaration (`a = 1`, `*p = q`, `acc[4]`)."""
        start = decls[0].location.offset
        text = self.data[start:s.extent.end.offset].decode().rstrip().rstrip(";")
        parts = split_top_level(text)
        if len(parts) != len(decls):
            raise Fallback(f"a declaration not understood (line {s.location.line})")
        return parts

    def _decl_assign(self, s, d, part):
        """One declarator of a per-thread variable as an assignment to this thread's element."""
        eq = _top_level_eq(part)
        if eq < 0:
            if re.search(r"[({]", part):
                raise Fallback(f"an initializer form not handled (line {s.location.line})")
            return f"/* {d.spelling}: per-thread */"
        init = part[eq + 1:].strip()
        if d.type.get_canonical().spelling.startswith("cuda::pipeline<") and \
                re.fullmatch(r"(cuda::)?make_pipeline\(\s*\)", init):
            # the per-thread array's element is that new pipeline already (a pipeline is
            # neither copied nor assigned); its copies no one waited for land at the block's end
            return f"/* {d.spelling}: per-thread, made */"
        if d.type.kind in (self.ci.TypeKind.CONSTANTARRAY, self.ci.TypeKind.DEPENDENTSIZEDARRAY):
            return (f"{{ std::remove_cv_t<std::remove_reference_t<decltype({d.spelling})>>"
                    f" tm_init_ = {init}; std::memcpy(&{d.spelling}, &tm_init_, "
                    f"sizeof tm_init_); }}")
        return f"{d.spelling} = {init};"

    def _text_with_returns(self, s, label):
        ci = self.ci
        base = s.extent.start.offset
        text = self.src(s)
        edits = []
        for c in self.walk(s):
            if c.kind == ci.CursorKind.RETURN_STMT:
                self._written_here(c, "return")
                edits.append((c.extent.start.offset, c.extent.end.offset, "goto " + label))
        return apply_edits(text, edits, base)

    def _check_text(self, body):
        """Refuses what the emitter's copies of the kernel's text would change: control flow a
        macro's expansion makes (the rewrites and the block-level headers cut the text at the
        statements' extents, which are then the macro's invocation: `GUARD(i >= n)` for `if (c)
        return`), and macros defined or undefined in the body (the split sits after the
        kernel, where they have their last value)."""
        ci = self.ci
        keywords = {ci.CursorKind.RETURN_STMT: "return", ci.CursorKind.IF_STMT: "if",
                    ci.CursorKind.FOR_STMT: "for", ci.CursorKind.CXX_FOR_RANGE_STMT: "for",
                    ci.CursorKind.WHILE_STMT: "while", ci.CursorKind.DO_STMT: "do",
                    ci.CursorKind.SWITCH_STMT: "switch", ci.CursorKind.BREAK_STMT: "break",
                    ci.CursorKind.CONTINUE_STMT: "continue", ci.CursorKind.GOTO_STMT: "goto"}
        types = {getattr(ci.CursorKind, k) for k in (
            "TYPEDEF_DECL", "TYPE_ALIAS_DECL", "TYPE_ALIAS_TEMPLATE_DECL", "STRUCT_DECL",
            "CLASS_DECL", "UNION_DECL", "ENUM_DECL") if hasattr(ci.CursorKind, k)}
        for c in self.walk(body):
            if c.kind in keywords:
                self._written_here(c, keywords[c.kind])
            elif c.kind in types:
                # the thread loops scope it to one region and emit recomputed locals before it
                raise Fallback(f"a type declared inside the kernel (`{c.spelling}`, line "
                                f"{c.location.line}): declare it before the kernel")
        self._check_names(body)
        text = self.data[body.extent.start.offset:body.extent.end.offset].decode()
        m = re.search(r"^[ \t]*#[ \t]*(define|undef)\b", text, re.M)
        if m:
            line = body.extent.start.line + text.count("\n", 0, m.start())
            raise Fallback(f"#{m.group(1)} inside the kernel (line {line}): the split, after "
                            "the kernel, would see the macro's last value")

    def _check_names(self, body):
        """Refuses a name that means two things in the kernel: a use of one declaration inside
        the block of another of the same name (`int t = tid; ... for (int t = 0; ...)`, a
        local hiding a parameter). The thread loops emit the recomputed and per-thread locals
        at their top, where such a local would hide the other from the statements after it."""
        ci = self.ci
        blocks = (ci.CursorKind.COMPOUND_STMT, ci.CursorKind.FOR_STMT, ci.CursorKind.IF_STMT,
                  ci.CursorKind.WHILE_STMT, ci.CursorKind.SWITCH_STMT,
                  ci.CursorKind.CXX_FOR_RANGE_STMT, ci.CursorKind.LAMBDA_EXPR)
        whole = (body.extent.start.offset, body.extent.end.offset)
        decls = {}   # name -> [(declaration's hash, the block it is visible in, its line)]
        for p in self.a.kernel.get_children():
            if p.kind == ci.CursorKind.PARM_DECL and p.spelling:
                decls.setdefault(p.spelling, []).append((p.hash, whole, p.location.line))
        refs, inner_blocks = [], {}   # VAR_DECL hash -> its block, where a statement's own

        def visit(c, block, kind):
            if c.kind in (ci.CursorKind.VAR_DECL, ci.CursorKind.PARM_DECL) and c.spelling:
                decls.setdefault(c.spelling, []).append((c.hash, block, c.location.line))
                if kind == ci.CursorKind.COMPOUND_STMT and not self.a.has_barrier_in(block):
                    inner_blocks[c.hash] = block
            elif c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None:
                refs.append(c)
            inner = (c.extent.start.offset, c.extent.end.offset) if c.kind in blocks else block
            for k in c.get_children():
                visit(k, inner, c.kind if c.kind in blocks else kind)
        visit(body, whole, ci.CursorKind.COMPOUND_STMT)
        for r in refs:
            mine = inner_blocks.get(r.referenced.hash)
            for h, (start, end), line in decls.get(r.spelling, ()):
                if mine is not None and start <= mine[0] and mine[1] <= end and \
                        mine != (start, end):
                    # (declared in a block of statements inside the other's, with no barrier
                    # in it: a thread loop's text holds that declaration, which hides the
                    # other there as in the source: globalToShmemAsyncCopy's two `j`)
                    continue
                if h != r.referenced.hash and start <= r.extent.start.offset < end:
                    raise Fallback(f"`{r.spelling}` names two things (line {line} and the use "
                                    f"on line {r.location.line}): the thread loops' locals "
                                    "would hide one")

    def _written_here(self, c, word):
        """Refuses a statement or call the emitter rewrites (a return, a warp operation) that a
        macro's expansion makes: its extent is then the macro's whole invocation (`GUARD(i >=
        n)` for `if (c) return`), whose rewrite would lose the rest of the macro."""
        if not re.match(re.escape(word).encode() + rb"\b", self.data[c.extent.start.offset:
                                                               c.extent.end.offset]):
            raise Fallback(f"`{word}` from a macro's expansion (line {c.location.line}): the "
                            "thread loops copy and rewrite the kernel's text")

    def _warp_if(self, s):
        """`if (cond) { A; __syncwarp(); B; ... }` (split_analysis._find_warp_ifs): a thread loop
        storing each thread's predicate, a check that the live lanes of every warp agree (on
        fibers a warp whose lanes disagree waits forever at the first __syncwarp: the same
        "no thread can proceed" is reported, tm_emu::split_warp_stuck), then one thread loop per
        stretch between the __syncwarp()s running the threads of the warps whose lanes all
        take the branch (the others' lanes all skip it). The reported line is the first
        __syncwarp's, in the helper where one was inlined (as the fibers report it). Every
        warp's lanes finish a stretch before any starts the next: one schedule the fibers
        may run."""
        ci = self.ci
        pred = f"tm_wp_{len(self.pred_arrays)}_"
        self.pred_arrays.append(pred)
        masks = f"tm_wm_{len(self.pred_arrays) - 1}_"
        cond = list(s.get_children())[0]
        cond_text = self.data[cond.extent.start.offset:cond.extent.end.offset].decode()
        stmts = self.a.warp_if_stmts(s)
        # where the lanes entering the branch wait on fibers: its first warp operation
        first = min((c for st in stmts for c in self.walk(st) if c.kind == ci.CursorKind.CALL_EXPR
                     and (c.hash in self.a.warp_syncs or c.hash in self.a.shuffle_calls)),
                    key=lambda c: c.extent.start.offset)
        op = "__syncwarp()" if first.hash in self.a.warp_syncs else \
            self.a.call_name(first) + "()"
        sync_line = self.a.inlined_sync_lines.get(first.location.line, first.location.line)
        out = [self._thread_loop([cond], False,
                                 text=f"{pred}[tm_row_ + tm_x_] = ({cond_text});")]
        out.append(
            f"{{ bool tm_stuck_ = false; int tm_nstuck_ = 0;\n"
            f"for (unsigned tm_w_ = 0; tm_w_ < tm_nt_; tm_w_ += 32) {{\n"
            f"const unsigned tm_n_ = tm_nt_ - tm_w_ < 32 ? tm_nt_ - tm_w_ : 32;\n"
            f"const unsigned tm_all_ = tm_n_ == 32 ? ~0u : (1u << tm_n_) - 1u;\n"
            f"unsigned tm_on_ = 0;\n"
            f"for (unsigned tm_l_ = 0; tm_l_ < tm_n_; ++tm_l_) "
            f"tm_on_ |= (unsigned){pred}[tm_w_ + tm_l_] << tm_l_;\n"
            f"{masks}[tm_w_ / 32] = tm_on_;\n"
            f"if (tm_on_ != 0 && tm_on_ != tm_all_) {{ tm_stuck_ = true;\n"
            f"if (++tm_nstuck_ <= 4) tm_emu::split_warp_stuck(\"{SOURCE_NAME}\", {sync_line}, "
            f"(int)(tm_w_ / 32), tm_on_, tm_all_ & ~tm_on_"
            + ("" if op == "__syncwarp()" else f", \"{op}\"") + "); }\n}\n"
            "if (tm_stuck_) return; }")
        # the branch, split as any statement list (shuffles, loops holding them, the
        # __syncwarp()s end thread loops), each thread loop over the warps taking it
        self._warp_masks = masks
        out.append(self._emit_seq(stmts, False))
        self._warp_masks = None
        return "\n".join(out)

    def _site(self, c):
        """The index of a warp operation's call site (its exchange arrays' names)."""
        return self.exchange_index.setdefault(c.hash, len(self.exchange_index))

    def _exchange_stores(self, s):
        """For a shuffle statement (split_analysis._find_shuffles): the text storing each of its
        warp operations' per-thread arguments (the value's bits, as warp_op takes them; the
        lane argument and width where they are not block-uniform), the argument cursors, and
        the per-warp ballot loops of its votes, run between the two thread loops."""
        lin = "tm_row_ + tm_x_"
        stores, args, votes = [], [], []
        for c, name in self.a.shuffle_calls_of(s):
            self._written_here(c, self.a.call_name(c))
            k = self._site(c)
            kids = list(c.get_children())
            args += kids[2:]
            value = self._text(kids[2])
            if name in VOTE_OPS:
                self.exchange_arrays[("v", k)] = (f"unsigned char tm_xv_{k}_[tm_nt_]; "
                                                  f"unsigned tm_vb_{k}_[(tm_nt_ + 31) / 32];", 2)
                stores.append(f"tm_xv_{k}_[{lin}] = (int)({value}) != 0;")
                votes.append(
                    f"for (unsigned tm_w_ = 0; tm_w_ < tm_nt_; tm_w_ += 32) {{\n"
                    f"const unsigned tm_n_ = tm_nt_ - tm_w_ < 32 ? tm_nt_ - tm_w_ : 32;\n"
                    f"unsigned tm_b_ = 0;\n"
                    f"for (unsigned tm_l_ = 0; tm_l_ < tm_n_; ++tm_l_) "
                    f"tm_b_ |= (unsigned)tm_xv_{k}_[tm_w_ + tm_l_] << tm_l_;\n"
                    f"tm_vb_{k}_[tm_w_ / 32] = tm_b_;\n}}")
                continue
            self.exchange_arrays[("v", k)] = (f"unsigned long long tm_xv_{k}_[tm_nt_];", 8)
            stores.append(f"tm_xv_{k}_[{lin}] = tm_emu::to_bits({value});")
            for j, kind in ((3, "a"), (4, "w")):
                if _given(kids, j) and not self.a._uniform_expr(kids[j]):
                    self.exchange_arrays[(kind, k)] = (f"int tm_x{kind}_{k}_[tm_nt_];", 4)
                    stores.append(f"tm_x{kind}_{k}_[{lin}] = {self._int_arg(name, j, kids[j])};")
        return "\n".join(stores), args, votes

    def _int_arg(self, name, j, arg):
        """A shuffle's lane argument (j = 3) or width (4) as warp_op receives it: an int (the
        delta of __shfl_up/down_sync passes through its unsigned parameter first)."""
        if j == 3 and name in ("__shfl_up_sync", "__shfl_down_sync"):
            return f"(int)(unsigned)({self._text(arg)})"
        return f"(int)({self._text(arg)})"

    def _exchange_reads(self, s):
        """A shuffle statement's text with each warp operation replaced by its result, read
        from the stores of the thread loop before (tm_emu::split_shfl / split_vote)."""
        ci = self.ci
        lin = "(unsigned)(tm_row_ + tm_x_)"
        base = s.extent.start.offset
        edits = []
        for c, name in self.a.shuffle_calls_of(s):
            k = self._site(c)
            kids = list(c.get_children())
            if name in VOTE_OPS:
                cast = "unsigned" if name == "__ballot_sync" else "int"
                new = (f"(({cast})tm_emu::split_vote(tm_emu::{VOTE_OPS[name]}, tm_vb_{k}_, "
                       f"{lin}, tm_nt_))")
            else:
                parts = []
                for j, kind in ((3, "a"), (4, "w")):
                    if not _given(kids, j):
                        parts.append("32")
                    elif (kind, k) in self.exchange_arrays:
                        parts.append(f"tm_x{kind}_{k}_[{lin}]")
                    else:
                        parts.append(self._int_arg(name, j, kids[j]))
                new = (f"tm_emu::from_bits<std::decay_t<decltype({self._text(kids[2])})>>("
                       f"tm_emu::split_shfl(tm_emu::{SHUFFLE_OPS[name]}, tm_xv_{k}_, {lin}, "
                       f"tm_nt_, {parts[0]}, {parts[1]}))")
            edits.append((c.extent.start.offset - base, c.extent.end.offset - base, new))
        if s.kind == ci.CursorKind.DECL_STMT and any(
                d.hash in self.a.live_types for d in self.a.var_decls(s)):
            d = self.a.var_decls(s)[0]
            init = [x for x in d.get_children() if x.kind.is_expression()]
            if not init:
                raise Fallback(f"a declaration not understood (line {s.location.line})")
            base = init[-1].extent.start.offset
            text = apply_edits(self._text(init[-1]), edits, base - s.extent.start.offset)
            return f"{d.spelling} = {text};"
        return apply_edits(self.src(s), edits)

    def _text(self, c):
        return self.data[c.extent.start.offset:c.extent.end.offset].decode()

    def _round_loop(self, s):
        """`for (init; cond; inc) body` as rounds over the threads: one thread loop sets each
        thread's variable (a per-thread array), then rounds of thread loops run one iteration
        of every thread still active, until none is (split_analysis._is_round_loop)."""
        init, cond, inc, body = s.get_children()

        def text(c):
            return self.data[c.extent.start.offset:c.extent.end.offset].decode()
        # a round runs up to ROUND_ITERATIONS of a thread's iterations in a row (its variables
        # stay in registers; the neighbours that follow find the same cache lines still there)
        step = (f"for (int tm_k_ = 0; tm_k_ < {ROUND_ITERATIONS}; ++tm_k_) {{\n"
                f"if (!({text(cond)})) break;\n{self.src(body)}\n{text(inc)};\n}}\n"
                f"if ({text(cond)}) tm_more_ = true;")
        return (self._thread_loop([init], False) + "\n"
                "for (bool tm_more_ = true; tm_more_;) {\ntm_more_ = false;\n" +
                self._thread_loop([cond, inc, body], False, text=step) + "\n}")

    def _k_tiles(self, s):
        """(type, variable, first, end) of a counted loop `for (T v = first; v < end; ++v)`
        (T a signed integer type, v not written in the body), else None: _thread_loop runs
        such a loop as long as the data in tiles of K_TILE iterations."""
        ci, K = self.ci, self.ci.CursorKind
        header, body, _ = self.a.for_parts(s)
        if len(header) != 3 or header[0].kind != K.DECL_STMT:
            return None
        decls = self.a.var_decls(header[0])
        if len(decls) != 1:
            return None
        v = decls[0]
        inits = [c for c in v.get_children() if c.kind.is_expression()]
        if v.type.get_canonical().kind not in (ci.TypeKind.INT, ci.TypeKind.LONG,
                                               ci.TypeKind.LONGLONG) or len(inits) != 1 or \
                v.hash in self.a.writes_in(body):
            return None
        cond = [t for t in header[1].get_tokens()]
        step = [t.spelling for t in header[2].get_tokens()]
        if len(cond) < 3 or cond[0].spelling != v.spelling or cond[1].spelling != "<" or \
                step not in (["++", v.spelling], [v.spelling, "++"], [v.spelling, "+=", "1"]):
            return None
        end = self.data[cond[2].extent.start.offset:header[1].extent.end.offset].decode()
        return v.type.spelling, v.spelling, self.src(inits[0]).rstrip(";"), end

    def _thread_loop(self, stmts, final, text=None, warps=None, around=None, chunks=False,
                     long_loop=False, tiles=None):
        """One thread loop running `stmts` (or `text`, written from them) for every thread, or,
        with `warps` (the name of a per-warp array of lane masks, _warp_if), for the threads of
        the warps whose mask is not zero, in linear order. `around`: the header of a
        block-uniform loop (`for (int k = 0; k < TILE; ++k)`) put around the loop over x, inside
        those over z and y: each thread still runs its iterations in order. `chunks` (the loop
        writes only per-thread state: split_analysis.chunkable): where the loop vectorises and a
        row holds two chunks or more of STRIP_THREADS, a chunk's threads run all their iterations
        before the next chunk's; rows of one chunk too where the loop is `long_loop`, and a
        counted one (`tiles`, _k_tiles) in tiles of K_TILE iterations, each tile over every
        row of the block before the next, so the rows reuse the tile's data from the caches."""
        self.n_regions += 1
        if warps is None:
            warps = self._warp_masks
        used = set()
        for s in stmts:
            for c in self.walk(s):
                if c.kind == self.ci.CursorKind.DECL_REF_EXPR and \
                        c.referenced is not None and c.referenced.hash in self.a.live_types:
                    used.add(c.referenced.hash)
            if s.kind == self.ci.CursorKind.DECL_STMT:
                used |= {d.hash for d in self.a.var_decls(s) if d.hash in self.a.live_types}
        refs = "".join(f"auto &{self.a.live_types[h].spelling} = tm_r_{self._pt_name(h)}[tm_x_]; "
                       for h in sorted(used, key=lambda h: self._pt_name(h)))
        need = {c.referenced.hash for s in stmts for c in self.walk(s)
                if c.kind == self.ci.CursorKind.DECL_REF_EXPR and c.referenced is not None
                and c.referenced.hash in self.a.recompute}
        decls = {}
        while need:
            h = need.pop()
            d = self.a.recompute[h]
            if d.hash not in decls:
                decls[d.hash] = d
                need |= self.a.recompute_deps[d.hash]
        ordered = sorted(decls.values(), key=lambda d: d.extent.start.offset)
        signed = [self._signed_decl(d) for d in ordered]
        chunk_refs = refs + "\n" + "\n".join(t or self.src(d) for d, t in zip(ordered, signed))
        signed = any(signed)
        refs += "\n" + "\n".join(self.src(d) for d in ordered)
        label = f"tm_next_thread_{self.n_regions}_"
        body = text if text is not None else "\n".join(self._stmt_text(s, label) for s in stmts)
        has_return = any(c.kind == self.ci.CursorKind.RETURN_STMT for s in stmts
                         for c in self.walk(s))
        label = label if has_return else None
        rows = "".join(f"auto *__restrict tm_r_{self._pt_name(h)} = tm_pt_{self._pt_name(h)} + "
                       f"tm_row_; " for h in sorted(used, key=lambda h: self._pt_name(h)))
        line = stmts[0].location.line
        # The fault report's thread (tiledmm_fault.h): where the region may fault (it reads a
        # pointer or calls a function), each thread's index is stored as it runs (volatile:
        # the compiler would sink a plain store out of the loop); elsewhere (shared memory
        # and locals only, the loops that vectorise) the report names the block alone.
        # A region calling a function stores the index too: a helper reads threadIdx from there
        # (tm_emu_tls.thread_idx, through the emulator's macro; split_analysis._check_helper).
        precise = self._may_fault(stmts) or self._calls_function(stmts)
        note_row = "TM_SPLIT_NOTE(tm_tv_[1], tm_y_) TM_SPLIT_NOTE(tm_tv_[2], tm_z_)\n" if precise else ""
        note = "TM_SPLIT_NOTE(tm_tv_[0], tm_x_)\n" if precise else ""
        # SIMD across threads: a loop touching only shared memory and locals, with no jump to
        # its end, has an int index, so `threadIdx.x` and the kernel's `int tx = threadIdx.x`
        # are affine in it (a size_t index truncated to unsigned or int is not: g++ loaded each
        # lane on its own). g++ then vectorises it where its cost model says it pays and no
        # dependence between threads forbids it (the split function's
        # `vect-cost-model=dynamic`: -O2's own model vectorises no loop whose trip count is
        # known only at run time), so results are the scalar loop's, racy kernels included.
        # `#pragma omp simd` (tried) forced it everywhere: strided shared-memory trees ran
        # 0.6-0.8x as fast, and it would reorder racing threads.
        vector = not precise and not label and warps is None
        self.vector_loops += vector
        index = "int" if vector else "size_t"
        if warps is not None:
            # the warps taking the branch: the index of a warp's first thread from its linear
            # index once, then stepped (no division per thread)
            return (f"tm_emu_tls.linear_tid = {0 if precise else -1};\n"
                    f"for (unsigned tm_w_ = 0; tm_w_ * 32 < tm_nt_; ++tm_w_) {{\n"
                    f"if (!{warps}[tm_w_]) continue;\n"
                    f"const size_t tm_row_ = 0;\n{rows}\n"
                    f"const size_t tm_end_ = tm_w_ * 32 + 32 < tm_nt_ ? tm_w_ * 32 + 32 : tm_nt_;\n"
                    f"unsigned tm_xx_ = (tm_w_ * 32) % tm_bd_.x, "
                    f"tm_y_ = (tm_w_ * 32 / tm_bd_.x) % tm_bd_.y, "
                    f"tm_z_ = tm_w_ * 32 / (tm_bd_.x * tm_bd_.y);\n"
                    f"for (size_t tm_x_ = tm_w_ * 32; tm_x_ < tm_end_; ++tm_x_) {{\n"
                    f"const uint3 tm_threadIdx_ = {{tm_xx_, tm_y_, tm_z_}};\n"
                    + ("TM_SPLIT_NOTE(tm_tv_[0], tm_xx_) TM_SPLIT_NOTE(tm_tv_[1], tm_y_) "
                       "TM_SPLIT_NOTE(tm_tv_[2], tm_z_)\n" if precise
                       else "") + _PROFILE_TURN +
                    f"{refs}\n{{\n#line {line} \"{SOURCE_NAME}\"\n{body}\n}}\n" + _PROFILE_TURN_END +
                    "if (++tm_xx_ == tm_bd_.x) { tm_xx_ = 0; "
                    "if (++tm_y_ == tm_bd_.y) { tm_y_ = 0; ++tm_z_; } }\n"
                    "}}")
        def row_loops(inner):
            """The loops over z and y around `inner`, each row's per-thread array pointers set."""
            return ("for (unsigned tm_z_ = 0; tm_z_ < tm_bd_.z; ++tm_z_)\n"
                    "for (unsigned tm_y_ = 0; tm_y_ < tm_bd_.y; ++tm_y_) {\n"
                    "const size_t tm_row_ = (size_t)tm_bd_.x * (tm_y_ + (size_t)tm_bd_.y * "
                    f"tm_z_);\n{rows}\n{inner}}}")

        # size_t indices and restrict row pointers: what the vectoriser needs to see the
        # per-thread arrays as affine and unaliased along the innermost (x) loop
        def x_loop(start, end, chunk=False, index=index, note=note, shadow="", refs=refs):
            head = (f"for ({index} tm_i_ = 0; tm_i_ < {end}; ++tm_i_) {{\n"
                    f"const {index} tm_x_ = {start} + tm_i_;\n" if chunk else
                    f"for ({index} tm_x_ = {start}; tm_x_ < {end}; ++tm_x_) {{\n")
            if chunk and signed:   # the thread's index as ints, for _signed_decl's initializers
                head += ("const tm_split_int3_ tm_stid_ = "
                         "{(int)tm_x_, (int)tm_y_, (int)tm_z_};\n")
            return (head + f"const uint3 tm_threadIdx_ = {{(unsigned)tm_x_, tm_y_, tm_z_}};\n{note}"
                    + _PROFILE_TURN + f"{refs}\n{{\n{shadow}#line {line} \"{SOURCE_NAME}\"\n"
                    f"{body}\n}}\n" + (f"{label}: ;\n" if label else "") + "}\n")
        # A chunk's per-thread values stay in vector registers across the loop's iterations
        # (g++ keeps a chunk's loads out of the loop when the chunk's own loop has a constant
        # trip count and is not unrolled before it is vectorised); thread by thread, each
        # iteration reloaded what the one before had just stored (tiled 32's k loop: 1.3x
        # slower). Rows narrower than two chunks keep the thread-by-thread loop: one or two
        # chains of dependent adds per row ran slower than it (tiled 8 and 16: 0.84x, 0.92x),
        # except in a loop as long as the data (the naive matmul's k < n, in 16 x 16 blocks).
        # Not in profile builds, whose order is the fibers'. A chunk that reads global memory
        # notes no thread (a volatile store per thread kept the naive matmul's k loop scalar):
        # a fault there names the block, as in the loops that vectorise.
        chunked = ""
        if around and chunks and not label and warps is None and not self._calls_function(stmts):
            self.vector_loops += not vector
            head = around
            if tiles is not None and long_loop:
                head = f"for ({tiles[0]} {tiles[1]} = tm_k0_; {tiles[1]} < tm_k1_; ++{tiles[1]}) "

            def chunk(shadow=""):
                return (f"{head}{{\n#pragma GCC unroll 1\n" +
                        x_loop("tm_x0_", STRIP_THREADS, chunk=True, index="int", note="",
                               shadow=shadow, refs=chunk_refs) + "}\n")
            guards = sorted({c.referenced.spelling for st in stmts for c in self.walk(st)
                             if c.kind == self.ci.CursorKind.DECL_REF_EXPR and
                             c.referenced is not None and
                             c.referenced.spelling.startswith(GUARD_PREFIX)})
            inner = chunk()
            if guards:
                # split/guard.py's guards: where every thread of the chunk is active, the
                # chunk's loop runs with them known true (no branch in the vectorised loop)
                inner = ("bool tm_all_ = true;\n"
                         f"for (int tm_i_ = 0; tm_i_ < {STRIP_THREADS}; ++tm_i_) {{\n"
                         "const int tm_x_ = tm_x0_ + tm_i_;\n"
                         "const uint3 tm_threadIdx_ = {(unsigned)tm_x_, tm_y_, tm_z_};\n"
                         f"{refs}\ntm_all_ = tm_all_ && " + " && ".join(guards) + ";\n}\n"
                         "if (tm_all_) " +
                         chunk("".join(f"const bool {g} = true;\n" for g in guards)) +
                         "else " + inner)
            self.signed_chunks |= signed
            widest = STRIP_THREADS if long_loop else 2 * STRIP_THREADS
            test = (f"#if TM_SPLIT_FAST\nif (tm_bd_.x >= {widest} && tm_bd_.x % {STRIP_THREADS} "
                    f"== 0{' && tm_int_ok_' if signed else ''}) {{\n"
                    + ("tm_emu_tls.linear_tid = -1;\n" if precise else ""))
            chunks_of_row = (f"for (int tm_x0_ = 0; tm_x0_ < (int)tm_bd_.x; "
                             f"tm_x0_ += {STRIP_THREADS}) {{\n{inner}}}\n")
            if head is not around:   # the tiles around the rows (see above)
                T = tiles[0]
                chunked = (test + f"const {T} tm_kend_ = ({tiles[3]});\n"
                           f"for ({T} tm_k0_ = ({tiles[2]}), tm_k1_; tm_k0_ < tm_kend_; "
                           "tm_k0_ = tm_k1_) {\n"
                           f"tm_k1_ = tm_kend_ - tm_k0_ > {K_TILE} ? tm_k0_ + {K_TILE} : tm_kend_;\n"
                           + row_loops(chunks_of_row) + "\n}\n}\nelse\n#endif\n")
                return (f"tm_emu_tls.linear_tid = {0 if precise else -1};\n{chunked}{{\n"
                        + row_loops(f"{note_row}{{\n{around}{{\n" + x_loop("0", f"({index})tm_bd_.x")
                                    + _PROFILE_TURN_LAST + "}\n}\n") + "\n}")
            chunked = test + chunks_of_row + "}\nelse\n#endif\n"
        return (f"tm_emu_tls.linear_tid = {0 if precise else -1};\n"
                + row_loops(f"{note_row}{chunked}{{\n" + (f"{around}{{\n" if around else "")
                            + x_loop("0", f"({index})tm_bd_.x") + _PROFILE_TURN_LAST
                            + ("}\n" if around else "") + "}\n"))

    def _signed_decl(self, d):
        """A recomputed declaration's text for a chunk (_thread_loop), its initializers taken
        over the built-ins as int (tm_split_int3_), or None where that could change a value.
        `int col = blockIdx.x * blockDim.x + threadIdx.x` is unsigned arithmetic converted to
        int, which g++ cannot prove free of wrapping, so a chunk's `B[k * n + col]` was 16
        scalar loads (the naive matmul); over ints it is one contiguous vector load. The same
        value wherever the declared type is a 32-bit integer and the initializer only adds,
        subtracts and multiplies names and integer literals (both are arithmetic modulo 2^32)
        and no int overflows: the caller runs chunks only where every grid extent times the
        block's is below 2^31 (tm_int_ok_)."""
        ci = self.ci
        edits = []
        if not {t.spelling for t in d.get_tokens()} & {"+", "-", "*"}:
            return None   # `int tx = threadIdx.x`: g++ sees that one as affine already
        for v in self.a.var_decls(d):
            if v.type.get_canonical().kind not in (ci.TypeKind.INT, ci.TypeKind.UINT):
                return None
            inits = [c for c in v.get_children() if c.kind.is_expression()]
            if len(inits) != 1 or any(c.kind == ci.CursorKind.CALL_EXPR
                                      for c in self.walk(inits[0])):
                return None
            for t in inits[0].get_tokens():
                if t.kind == ci.TokenKind.PUNCTUATION and t.spelling not in "+-*().":
                    return None
                if t.kind == ci.TokenKind.LITERAL and not t.spelling.rstrip("uUlL").isdigit():
                    return None
                if t.kind == ci.TokenKind.KEYWORD:
                    return None
            e = inits[0].extent
            edits.append((e.start.offset, e.end.offset,
                          "({ const tm_split_int3_ &tm_blockIdx_ = tm_sbi_, &tm_bd_ = tm_sbd_, "
                          "&tm_gridDim_ = tm_sgd_, &tm_threadIdx_ = tm_stid_; ("
                          + self.data[e.start.offset:e.end.offset].decode() + "); })"))
        if not edits:
            return None
        return apply_edits(self.src(d).encode(), edits, d.extent.start.offset).decode()

    def _calls_function(self, stmts):
        return any(c.kind == self.ci.CursorKind.CALL_EXPR and c.spelling not in PURE_CALLS and
                   c.hash not in self.a.shuffle_calls for st in stmts for c in self.walk(st))

    def _may_fault(self, stmts):
        """Whether a region reads through a pointer, calls a function that is not pure math,
        throws, or divides (an integer division by zero is SIGFPE). The pointer to the block's
        dynamic shared memory (TM_DYNAMIC_SHARED) counts as shared memory, as `__shared__`
        arrays do."""
        ci = self.ci
        for st in stmts:
            if any(t.spelling in ("/", "%", "/=", "%=", "throw") for t in st.get_tokens()):
                return True
            for c in self.walk(st):
                if c.kind == ci.CursorKind.CALL_EXPR and c.spelling not in PURE_CALLS and \
                        c.hash not in self.a.shuffle_calls:
                    return True
                if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None and \
                        c.referenced.type.get_canonical().kind == ci.TypeKind.POINTER and \
                        not any(a.kind == ci.CursorKind.ANNOTATE_ATTR and a.spelling == "tm_shared"
                                for a in c.referenced.get_children()):
                    return True
        return False

    def _pt_name(self, h):
        d = self.a.live_types[h]
        return f"{d.spelling}_{d.location.line}_{d.location.column}"

    def _function(self, k, body, inner):
        ci = self.ci
        head = self.data[k.extent.start.offset:body.extent.start.offset].decode()
        # the signature with the kernel's name replaced
        m = re.search(r"\b" + re.escape(self.name) + r"\s*\(", head)
        if m is None:
            raise Fallback("the kernel's name was not found in its signature")
        params = head[m.end():]
        params = params[:params.rfind(")")]
        arrays, sizes = [], []
        for h, d in sorted(self.a.live_types.items(), key=lambda kv: self._pt_name(kv[0])):
            t = d.type
            dims = ""
            while t.kind == ci.TypeKind.CONSTANTARRAY:
                dims += f"[{t.get_array_size()}]"
                t = t.get_array_element_type()
            element = t   # under bounds that are template parameters (T acc[TM][TN]): T
            while self.templates and element.kind == ci.TypeKind.DEPENDENTSIZEDARRAY:
                element = element.get_array_element_type()
            if element.kind in (ci.TypeKind.LVALUEREFERENCE, ci.TypeKind.RVALUEREFERENCE):
                raise Fallback(f"{d.spelling}: a reference live across a barrier")
            # a class that is not plain data (however spelt: `cuda::aligned_size_t<4>` is an
            # elaborated type) may lack the default constructor and assignment the array needs;
            # a thread-scope pipeline made by make_pipeline() is default-made (_decl_assign)
            canonical = element.get_canonical()
            record = canonical.kind == ci.TypeKind.RECORD and not canonical.is_pod() and \
                not canonical.spelling.startswith("cuda::pipeline<")
            if (record or element.kind in (ci.TypeKind.INCOMPLETEARRAY, ci.TypeKind.VARIABLEARRAY,
                                           ci.TypeKind.DEPENDENTSIZEDARRAY, ci.TypeKind.RECORD,
                                           ci.TypeKind.INVALID)) and \
                    element.spelling not in _VECTOR_TYPES:
                raise Fallback(f"{d.spelling}: a per-thread variable of type {d.type.spelling}")
            # clang's spelling of the type; a dependent array's (`T[TM][TN]`) names only the
            # template's parameters, which the split template declares too. remove_cv_t of it
            # is the type itself, as one name, so `tm_pt_acc[tm_nt_]` is tm_nt_ of them.
            tname = f"std::remove_cv_t<{t.spelling}>"
            arrays.append(f"{tname} tm_pt_{self._pt_name(h)}[tm_nt_]{dims};")
            size = d.type.get_size()
            if size <= 0 and self.templates:
                size = f"sizeof({tname}{dims})"   # a dependent type: known per instance
            elif size <= 0:
                raise Fallback(f"{d.spelling}: the size of {d.type.spelling} is not known")
            sizes.append(size)
        for key in sorted(self.exchange_arrays):
            decl, size = self.exchange_arrays[key]
            arrays.append(decl)
            sizes.append(size)
        for i, pred in enumerate(self.pred_arrays):
            # a bool per thread, a lane mask per warp (4 bytes per 32 threads: one per thread)
            arrays.append(f"bool {pred}[tm_nt_]; unsigned tm_wm_{i}_[(tm_nt_ + 31) / 32];")
            sizes.append(2)
        fn = f"tm_split_{self.name}"
        template = ""
        if k.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            template = head[:m.start()]
            template = template[:template.rfind(">") + 1].strip()
            if not template.startswith("template"):
                raise Fallback("the kernel's template header was not understood")
        self.frame = sum(x for x in sizes if isinstance(x, int))
        frame = " + ".join(str(x) for x in sizes) or "0"
        frame_decl = (f"{template} constexpr size_t tm_split_frame_{self.name} = {frame};"
                      if template else
                      f"static const size_t tm_split_frame_{self.name} = {frame};")
        # The prelude (once per file): TM_SPLIT_FAST (_shared_in_register), off in profile
        # builds, as the cost model is; TM_SPLIT_TARGETS, for a split with loops made to
        # vectorise: two copies of the function, AVX2 and x86-64's baseline, the one the
        # machine running it has picked when the object loads (an ifunc): 8 lanes halve a
        # 32-thread row's iterations. AVX2 without FMA (g++ contracts a * b + c only under
        # -mfma): every lane's arithmetic is the baseline's, bit for bit, and with no -march
        # the object (and the kernel cache's copy) runs on any x86-64. GCC on ELF only.
        targets = "TM_SPLIT_TARGETS " if self.vector_loops else ""
        # the built-ins as ints (_signed_decl), where no grid extent overflows an int
        ints = """
    const tm_split_int3_ tm_sbi_ = {(int)tm_blockIdx_.x, (int)tm_blockIdx_.y, (int)tm_blockIdx_.z},
        tm_sbd_ = {(int)tm_bd_.x, (int)tm_bd_.y, (int)tm_bd_.z},
        tm_sgd_ = {(int)tm_gridDim_.x, (int)tm_gridDim_.y, (int)tm_gridDim_.z};
    const bool tm_int_ok_ = (unsigned long long)tm_gridDim_.x * tm_bd_.x < (1ull << 31) &&
        (unsigned long long)tm_gridDim_.y * tm_bd_.y < (1ull << 31) &&
        (unsigned long long)tm_gridDim_.z * tm_bd_.z < (1ull << 31);
    (void)tm_sbi_; (void)tm_sbd_; (void)tm_sgd_; (void)tm_int_ok_;""" if self.signed_chunks else ""
        return f"""
#line 1 "tiledmm-split"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-label"
#pragma GCC diagnostic ignored "-Wvla"
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wunknown-warning-option"
#pragma clang diagnostic ignored "-Wvla-extension"
#pragma clang diagnostic ignored "-Wvla-cxx-extension"
#else
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize")
#if !defined(TM_PROFILE_SPLIT)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif
#endif
#ifndef TM_SPLIT_FAST
struct tm_split_int3_ {{
    int x, y, z;
}};
template <typename tm_T_> static inline tm_T_ *tm_split_opaque(tm_T_ *tm_p_)
{{
    __asm__("" : "+r"(tm_p_));
    return tm_p_;
}}
#if !defined(TM_PROFILE_SPLIT)
#define TM_SPLIT_FAST 1
#else
#define TM_SPLIT_FAST 0
#endif
#if TM_SPLIT_FAST && defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define TM_SPLIT_TARGETS __attribute__((target_clones("avx2", "default")))
#else
#define TM_SPLIT_TARGETS
#endif
#endif
#pragma push_macro("threadIdx")
#pragma push_macro("blockIdx")
#pragma push_macro("blockDim")
#pragma push_macro("gridDim")
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx tm_threadIdx_
#define blockIdx tm_blockIdx_
#define blockDim tm_bd_
#define gridDim tm_gridDim_
{frame_decl}
{template} {targets}static void {fn}({params})
{{
    const uint3 tm_blockIdx_ = tm_emu_tls.block_idx;
    const dim3 tm_bd_ = tm_emu_tls.block_dim, tm_gridDim_ = tm_emu_tls.grid_dim;
    const unsigned tm_nt_ = tm_bd_.x * tm_bd_.y * tm_bd_.z;
    // opaque: g++ would compute a TLS address again at each use, a __tls_get_addr call per
    // thread in a thread loop that notes the thread (15% of tiled 32's instructions)
    volatile unsigned *const tm_tv_ = tm_split_opaque(&tm_emu_tls.thread_idx.x);
    (void)tm_blockIdx_; (void)tm_gridDim_; (void)tm_nt_; (void)tm_tv_;{ints}
    TM_SPLIT_STATE
    {' '.join(arrays)}
{inner}
}}
#pragma pop_macro("threadIdx")
#pragma pop_macro("blockIdx")
#pragma pop_macro("blockDim")
#pragma pop_macro("gridDim")
#if !defined(__clang__)
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop
"""


# Profile mode's hooks (issue 34): macros that tiledmm/native/kernel_dialect.h defines empty
# (plain builds: the text compiles as without them) and the profile build's split kernels define
# as calls into emu/profile/emu_profile.cpp (emu/profile/split_hooks.h): the split function's
# hook state (TM_SPLIT_STATE), each CUDA thread's turn in a thread loop, each former barrier and
# __syncwarp(). A turn starts at TM_SPLIT_TURN (the thread's linear index), which also ends the
# turn before it in a loop over a row of threads, as TM_SPLIT_TURN_LAST after the loop ends the
# row's last: one call a turn, not two (the hooks take the loop's own block, which holds the
# call, out of the turn that ends). The warp loops, whose thread index steps after the body, end
# each turn with TM_SPLIT_TURN_END.
# Threads a chunk of _thread_loop's strip: two AVX2 vectors of floats (four SSE2 ones), two
# independent sums in flight per iteration.
STRIP_THREADS = 16
# Iterations of a counted loop as long as the data run per tile (_thread_loop's tiles): the
# block's rows read a 32-thread row's tile of the naive matmul's B (32 lines, 4 KiB) again from
# L1 and L2. At n = 8192 the tile's lines are 32 KiB apart, so they share a handful of L2 sets:
# 128 lines a tile ran 8192^3 in 236 s on two cores, 32 lines in 76 s.
K_TILE = 32
_PROFILE_TURN = "TM_SPLIT_TURN(tm_row_ + tm_x_)\n"
_PROFILE_TURN_END = "TM_SPLIT_TURN_END()\n"
_PROFILE_TURN_LAST = "TM_SPLIT_TURN_LAST()\n"


def _profile_barrier(line):
    return f"TM_SPLIT_BARRIER({line}) /* __syncthreads() line {line} */"


def _profile_warp_sync(masks, line):
    """`masks`: the warp `if`'s per-warp lane masks (the lanes that reach the __syncwarp)."""
    return f"TM_SPLIT_WARP_SYNC({masks}, {line}) /* __syncwarp() line {line} */"


def _kernel_is_split(name, profile_reason):
    """The kernel's name as its pair with the split, for the rest of the file; in the profile
    build (TM_PROFILE_SPLIT) not where the block-level code may access memory (fibers)."""
    if profile_reason:
        return (f"#ifndef TM_PROFILE_SPLIT /* {profile_reason} */\n"
                f"#define {name} tm_with_split_{name}\n#endif\n")
    return f"#define {name} tm_with_split_{name}\n"


def registry_source(source, path):
    """The emulator's text of a registry kernel file (cuda/*.cu, setup.py at build time): the
    file as written, with each template kernel the transform applies to followed by its split
    function template and `tm_with_split_<kernel>`, a variable template pairing each instance
    with its split (emu/cuda_emu.h's tm_emu_split_kernel), which a macro then names as the
    kernel for the rest of the file, so the launcher's tm_launch (native/common.h) takes the
    thread loops. (text, {kernel: reason or ""}); kernels the transform refuses keep fibers."""
    ci = cindex()
    if ci is None:
        return source, {}
    names = kernel_names(source)
    # the file's own headers beside it (cuda/reduce_common.h): for a kernel calling a helper
    # from one (tm_block_sum), the headers are parsed too and their device helpers inlined
    # where a call is exactly their body (the other kernels are analysed as before)
    headers = {}
    for inc in re.findall(r'^\s*#\s*include\s*"([\w.]+)"', source, re.M):
        try:
            with open(os.path.join(os.path.dirname(path), inc)) as f:
                headers[inc] = f.read()
        except OSError:
            continue
    inserts, reasons = [], {}
    for name in names:
        plan = split_kernel(source, name, templates=True)
        if plan.text is None and "a helper from a header" in plan.reason and headers:
            plan = split_kernel(source, name, templates=True, headers=headers)
        reasons[name] = plan.reason
        if plan.text is None or not plan.template_args:
            reasons[name] = plan.reason or "not a template (the registry's kernels are)"
            continue
        reasons[name] = guarded_reason(plan)
        pair = template_pair(plan, name)
        pair += _kernel_is_split(name, plan.profile_reason)
        line = source.count("\n", 0, plan.end) + 1
        text = plan.text.replace(f'"{SOURCE_NAME}"', f'"{path}"')
        inserts.append((plan.end, plan.end, "\n" + text + pair + f'#line {line} "{path}"\n'))
    return f'#line 1 "{path}"\n' + apply_edits(source, inserts), reasons


def guarded_reason(plan):
    """Why some instances of a split template keep the fibers ("" where none does)."""
    if not plan.fiber_guard:
        return ""
    return (f"thread loops, except instances where {plan.fiber_guard}: fibers "
            f"({plan.fiber_guard_reason})")


def template_pair(plan, name):
    """The definition of `tm_with_split_<name>` after a template kernel's split (plan.text): a
    variable template pairing each instance with its split (emu/cuda_emu.h's
    tm_emu_split_kernel), or, for the instances where plan.fiber_guard holds (a warp operation
    the thread loops do not run), the kernel itself: its launches keep the fibers. Used by
    registry_source and whole programs (program_build) alike."""
    a = plan.template_args
    header = plan.text[plan.text.index(" static void tm_split_"):]   # after the template
    template = plan.text[plan.text.rindex("\ntemplate", 0, plan.text.index(header)) + 1:
                         plan.text.index(header)].strip()
    split = (f"tm_emu_split_kernel<decltype(&{name}{a})>{{&{name}{a}, &tm_split_{name}{a}, "
             f"tm_split_frame_{name}{a}}}")
    if not plan.fiber_guard:
        return f"\n{template} inline const auto tm_with_split_{name} = {split};\n"
    # instances where the guard holds name the kernel itself: their launches take the fibers
    return (f"\n{template} constexpr auto tm_pick_split_{name}()\n{{\n"
            f"    if constexpr ({plan.fiber_guard}) return &{name}{a};\n"
            f"    else return {split};\n}}\n"
            f"{template} inline const auto tm_with_split_{name} = "
            f"tm_pick_split_{name}{a}();\n")


# Iterations of one thread a grid-stride loop's round runs in a row (_round_loop): 1 walks every
# thread's per-thread variables once per iteration; more keep them in registers while the
# lines the thread reads stay in L1 for its neighbours. One thread's lines are a stride apart
# (atomic: 8 KiB, the same L1 set): more than the cache's ways evict each other
# (benchmarks/emu_notes.md has the figures of 1, 8, 16 and of groups of threads).
ROUND_ITERATIONS = 8

_VECTOR_TYPES = {"float2", "float3", "float4", "double2", "int2", "int3", "int4", "uint3",
                 "dim3"}


def _given(kids, j):
    """Whether a call's argument j (kids[0] is the callee) is written (libclang lists a default
    argument as a child without tokens)."""
    return j < len(kids) and bool(list(kids[j].get_tokens()))


def _top_level_eq(text):
    """Offset of the declaration's `=` (not inside brackets or parentheses), or -1."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{<":
            depth += ch != "<"
        elif ch in ")]}":
            depth -= 1
        elif ch == "=" and depth == 0 and text[i + 1:i + 2] != "=" and \
                text[i - 1:i] not in ("=", "!", "<", ">"):
            return i
    return -1
