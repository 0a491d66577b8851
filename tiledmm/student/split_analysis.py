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
sum += As[ty][k] * Bs[k][tx]; } }`, which g++ vectorises across threads), and locals computed
only from threadIdx and uniform values (tx, row, col) are recomputed in each thread loop rather
than stored, so the compiler sees them as affine in the thread index.

Everything else keeps the fibers (the kernel says why, `SplitPlan.reason`): barriers under an
`if`, a `while` or a loop with a thread-dependent header (the fibers report divergence there as
before), `__syncthreads_count/and/or`, warp operations (shuffles, votes, __syncwarp), `goto`,
`asm`, a `return` before a barrier, `break`/`continue` that would leave a thread loop, templates
(tm.compile), helper functions that read threadIdx or synchronise, and any source libclang
cannot read.

The registry's own kernels (cuda/*.cu, templates) go through `registry_source` at build time
(setup.py, tiledmm._emu only): each split becomes a function template beside its kernel, and
`tm_with_split_<kernel>` pairs every instance with its split for tm_launch (cuda/common.h).

The split function is compiled beside the original kernel: only plain launches use it (check
mode and profile mode build the kernel without it, so their reports and counts are the fibers'
own). The launcher picks it at run time (tm_emu_launch_blocks) when the block's per-thread arrays
fit in MAX_FRAME bytes; otherwise the same launch runs on fibers. benchmarks/emu_notes.md has
the figures.
"""
import re
from dataclasses import dataclass

from .kernel_diagnostics import SOURCE_NAME
from .kernel_source import (_INCLUDE_RE, _PARSE_PRELUDE, _VECTORS, _cindex, _kernel_cursors,
                             emu_dialect, split_top_level)

# What the body parse needs beyond the signature parse's prelude: CUDA's built-ins, declared
# (libclang must see them to keep the calls in its tree). A body with any parse error is left to
# the fibers, so a missing declaration costs speed, never correctness.
_BODY_PRELUDE = _PARSE_PRELUDE + r"""
#undef __shared__
#define __shared__ __attribute__((annotate("tm_shared")))
#undef TM_DYNAMIC_SHARED
#define TM_DYNAMIC_SHARED(type, name) __attribute__((annotate("tm_shared"))) type *name = 0
extern const uint3 threadIdx, blockIdx; extern const dim3 blockDim, gridDim;
static const int warpSize = 32;
void __syncthreads(); int __syncthreads_count(int); int __syncthreads_and(int);
int __syncthreads_or(int); void __syncwarp(unsigned = 0xffffffffu); unsigned __activemask();
template <class T> T __shfl_sync(unsigned, T, int, int = 32);
template <class T> T __shfl_up_sync(unsigned, T, unsigned, int = 32);
template <class T> T __shfl_down_sync(unsigned, T, unsigned, int = 32);
template <class T> T __shfl_xor_sync(unsigned, T, int, int = 32);
unsigned __ballot_sync(unsigned, int); int __all_sync(unsigned, int); int __any_sync(unsigned, int);
void __threadfence(); void __threadfence_block(); void __threadfence_system();
long long clock64(); int printf(const char *, ...);
template <class A, class B> A min(A, B); template <class A, class B> A max(A, B);
template <class T> T __ldg(const T *);
""" + "".join(f"template <class T> T {a}(T *, T);\n" for a in (
    "atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax", "atomicAnd", "atomicOr",
    "atomicXor")) + "template <class T> T atomicCAS(T *, T, T);\n" + (
    "unsigned atomicInc(unsigned *, unsigned); unsigned atomicDec(unsigned *, unsigned);\n") + "".join(
    f"{v} make_{v}({', '.join(f'{c} {a}' for a in 'xyzw'[:k])});\n"
    for v, (c, k) in _VECTORS.items()) + "".join(
    f"float {f}f(float); double {f}(double);\n" for f in (
        "sqrt", "rsqrt", "exp", "exp2", "log", "log2", "log10", "sin", "cos", "tan", "tanh",
        "fabs", "floor", "ceil", "round", "trunc", "erf", "cbrt")) + r"""
float powf(float, float); double pow(double, double); float fmaxf(float, float);
float fminf(float, float); double fmax(double, double); double fmin(double, double);
float fmaf(float, float, float); double fma(double, double, double);
float __expf(float); float __logf(float); float __fdividef(float, float);
int abs(int); float fabsf(float);
"""

# Calls a uniform or recomputed expression may make: pure functions of their arguments.
PURE_CALLS = {f"{f}{s}" for f in ("sqrt", "rsqrt", "exp", "exp2", "log", "log2", "log10", "sin",
                                  "cos", "tan", "tanh", "fabs", "floor", "ceil", "round", "trunc",
                                  "erf", "cbrt", "pow", "fmax", "fmin", "fma") for s in ("", "f")}
PURE_CALLS |= {"min", "max", "abs", "__fdividef", "__expf", "__logf"}
WARP_OPS = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
            "__ballot_sync", "__all_sync", "__any_sync", "__activemask", "__match_any_sync",
            "__match_all_sync", "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync"}
BARRIER_OPS = {"__syncthreads_count", "__syncthreads_and", "__syncthreads_or"}
SYNC_NAMES = WARP_OPS | BARRIER_OPS | {"__syncthreads"}
# Functions the body parse's prelude declares: a call to one needs no further check.
KNOWN_CALLS = PURE_CALLS | SYNC_NAMES | {
    "atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax", "atomicAnd", "atomicOr",
    "atomicXor", "atomicCAS", "atomicInc", "atomicDec", "__ldg", "printf", "clock64",
    "__threadfence", "__threadfence_block", "__threadfence_system", "fabsf", "powf", "fmaxf",
    "fminf", "fmaf"}
UNIFORM_BUILTINS = {"blockIdx", "blockDim", "gridDim", "warpSize"}
_WRITE_AFTER = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--"}
_WRITE_BEFORE = {"++", "--", "&"}
# The largest per-thread frame (bytes of per-thread arrays times threads) run as thread loops:
# they live on the OS thread's stack; larger blocks run on fibers (the launcher decides).
MAX_FRAME = 512 * 1024
# Kernels with larger locals keep the fibers: a CUDA thread's stack there is small
# (TILEDMM_EMU_STACK_KB), and overflowing it is reported as such; the thread loops run on the
# OS thread's stack, where the same kernel would run, or fail with a plain fault.
MAX_LOCALS = 4096


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


class _Fallback(Exception):
    """The kernel keeps its fibers; the message says why."""


def split_kernel(source, name, define_lines=(), templates=False):
    """SplitPlan for kernel `name` of `source` (the user's text as written; the emulator's
    dialect is applied here, as full_source does)."""
    ci = _cindex()
    if ci is None:
        return SplitPlan(None, "libclang is not available")
    text = source if templates else emu_dialect(source)
    try:
        return _Splitter(ci, text, name, define_lines, templates).plan()
    except _Fallback as exc:
        return SplitPlan(None, str(exc))


class _Splitter:
    def __init__(self, ci, text, name, define_lines, templates=False):
        self.ci, self.name, self.templates = ci, name, templates
        blanked = _INCLUDE_RE.sub(lambda m: " " * len(m.group(0)), text)
        prelude = _BODY_PRELUDE + "\n".join(define_lines) + "\n"
        self.data = blanked.encode()
        index = ci.Index.create()
        self.tu = index.parse(SOURCE_NAME, args=["-x", "c++", "-std=c++17", "-nostdinc",
                                                 "-nostdinc++", "-include", "/tiledmm-split/p.h"],
                              unsaved_files=[(SOURCE_NAME, blanked),
                                             ("/tiledmm-split/p.h", prelude)],
                              options=ci.TranslationUnit.PARSE_INCOMPLETE)
        self.n_regions = 0
        self.live_types = {}     # VAR_DECL hash -> (cursor) of per-thread arrays
        self.uniform = set()     # VAR_DECL hashes of block-uniform scalars
        self.written = set()     # VAR_DECL hashes written anywhere in the body
        self.hoisted = set()     # FOR_STMT hashes the thread loops go inside of
        self.recompute = {}      # VAR_DECL hash -> its DECL_STMT, recomputed per thread loop
        self.recompute_deps = {} # DECL_STMT hash -> VAR_DECL hashes of recomputed it reads

    # ---- small helpers ----
    def src(self, cursor):
        """The cursor's text; a statement's with its `;` (libclang's extent of `x = 1;` or of
        `if (c) x = 1;` ends before it)."""
        e = cursor.extent
        end = e.end.offset
        m = re.compile(rb"\s*;").match(self.data, end)
        if m and (cursor.kind.is_statement() or cursor.kind.is_expression()):
            end = m.end()
        return self.data[e.start.offset:end].decode()

    def walk(self, cursor):
        yield cursor
        for c in cursor.get_children():
            yield from self.walk(c)

    def plan(self):
        ci = self.ci
        if not _ARRAY_KINDS:
            _ARRAY_KINDS.update(getattr(ci.TypeKind, k) for k in (
                "CONSTANTARRAY", "DEPENDENTSIZEDARRAY", "VARIABLEARRAY", "INCOMPLETEARRAY"))
        if not _SCALAR_KINDS:
            _SCALAR_KINDS.update(getattr(ci.TypeKind, k) for k in (
                "BOOL", "CHAR_U", "UCHAR", "USHORT", "UINT", "ULONG", "ULONGLONG", "CHAR_S",
                "SCHAR", "SHORT", "INT", "LONG", "LONGLONG", "FLOAT", "DOUBLE", "POINTER",
                "ELABORATED", "TYPEDEF", "AUTO"))
        kernels = [c for c in _kernel_cursors(ci, self.tu.cursor) if c.spelling == self.name
                   and c.is_definition()]
        if len(kernels) != 1:
            raise _Fallback("the kernel's definition was not found by the body parse")
        k = kernels[0]
        if k.kind != ci.CursorKind.FUNCTION_DECL and not self.templates:
            raise _Fallback("a template kernel")
        for d in self.tu.diagnostics:
            loc = d.location
            if d.severity >= 3 and loc.file is not None and loc.file.name == SOURCE_NAME and \
                    (not self.templates or k.extent.start.offset <= loc.offset <= k.extent.end.offset):
                raise _Fallback(f"libclang could not read the source ({d.spelling})")
        body = [c for c in k.get_children() if c.kind == ci.CursorKind.COMPOUND_STMT]
        if len(body) != 1:
            raise _Fallback("no body")
        body = body[0]
        self.params = {p.hash for p in k.get_children() if p.kind == ci.CursorKind.PARM_DECL}
        self._check_body(body)
        self._find_writes(body)
        stmts = list(body.get_children())
        self._classify_decls(stmts)   # a kernel without barriers: one region (and its loops)
        out = self._emit_seq(stmts, top=True)
        args = ""
        if k.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            names = []
            for c in k.get_children():
                if c.kind in (ci.CursorKind.TEMPLATE_TYPE_PARAMETER,
                              ci.CursorKind.TEMPLATE_NON_TYPE_PARAMETER):
                    if "..." in "".join(t.spelling for t in c.get_tokens()):
                        raise _Fallback("a template parameter pack")
                    names.append(c.spelling)
                elif c.kind == ci.CursorKind.TEMPLATE_TEMPLATE_PARAMETER:
                    raise _Fallback("a template template parameter")
            args = "<" + ", ".join(names) + ">"
        return SplitPlan(self._function(k, body, out), "", self.n_regions, self.frame,
                         k.extent.end.offset, args)

    def _check_body(self, body):
        ci = self.ci
        seen_funcs = set()
        local_bytes = 0
        for c in self.walk(body):
            kind = c.kind
            if kind == ci.CursorKind.VAR_DECL and not any(
                    a.kind == ci.CursorKind.ANNOTATE_ATTR for a in c.get_children()):
                local_bytes += max(c.type.get_size(), 0)
                if local_bytes > MAX_LOCALS:
                    raise _Fallback(f"more than {MAX_LOCALS} bytes of local variables per thread "
                                    "(the fibers' stacks report an overflow)")
            if kind in (ci.CursorKind.GOTO_STMT, ci.CursorKind.INDIRECT_GOTO_STMT,
                        ci.CursorKind.LABEL_STMT):
                raise _Fallback("goto or a label")
            if kind in (ci.CursorKind.ASM_STMT, ci.CursorKind.MS_ASM_STMT):
                raise _Fallback("inline asm")
            if kind == ci.CursorKind.LAMBDA_EXPR:
                raise _Fallback("a lambda")
            if kind == ci.CursorKind.CALL_EXPR:
                self._check_call(c, seen_funcs)
            if kind in (ci.CursorKind.DECL_REF_EXPR, ci.CursorKind.OVERLOADED_DECL_REF) and \
                    c.spelling in SYNC_NAMES and \
                    c.spelling != "__syncthreads":
                raise _Fallback(f"{c.spelling}")

    def _check_call(self, c, seen, helper=None):
        """A call in the kernel or in `helper`, a function it calls: warp operations and
        barriers with a value keep the fibers; a call libclang leaves unresolved (templates) is
        checked by name; a function the kernel's file defines is checked as a helper, once
        (`seen`: hashes of the functions checked so far). In a helper, the name it refers to
        is checked by _check_helper (which says the helper's name)."""
        if helper is None and c.spelling in WARP_OPS:
            raise _Fallback(f"warp operation {c.spelling} (32-lane semantics: fibers)")
        if helper is None and c.spelling in BARRIER_OPS:
            raise _Fallback(f"{c.spelling} (a barrier with a value: fibers)")
        ref = c.referenced
        if ref is None and self.templates:
            self._check_dependent_call(c, seen)
        if ref is not None and ref.location.file is not None and \
                ref.location.file.name == SOURCE_NAME and ref.hash not in seen:
            seen.add(ref.hash)
            self._check_helper(ref, seen)

    def _check_dependent_call(self, c, seen):
        """A call in a template that libclang leaves unresolved until instantiation: `T(0)` (a
        cast), or a call of a name whose candidates the kernel's file must define (then they
        are checked as helpers); a helper from a header the parse does not read might use
        threadIdx or synchronise, so the kernel keeps its fibers."""
        ci = self.ci
        kids = list(c.get_children())
        if not kids or kids[0].kind == ci.CursorKind.TYPE_REF:
            return   # T(0): a functional cast
        refs = [x for x in self.walk(kids[0]) if x.kind == ci.CursorKind.OVERLOADED_DECL_REF]
        name = refs[0].spelling if refs else (c.spelling or kids[0].spelling or "?")
        if name in WARP_OPS or name in BARRIER_OPS:
            raise _Fallback(f"{name} (warp operations and barriers with a value: fibers)")
        if name in KNOWN_CALLS:
            return
        decls = [d for d in self.tu.cursor.get_children() if d.spelling == name and d.kind in (
            ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE)] if refs else []
        if not decls or any(d.location.file is None or d.location.file.name != SOURCE_NAME
                            for d in decls):
            raise _Fallback(f"a call of {name} that libclang cannot resolve (line "
                            f"{c.location.line}; a helper from a header)")
        for d in decls:
            if d.hash not in seen:
                seen.add(d.hash)
                self._check_helper(d, seen)

    def _check_helper(self, fn, seen):
        """A helper function the kernel calls may not read threadIdx or synchronise (the
        thread loops give threadIdx only to the kernel's own text)."""
        d = fn.get_definition()
        if d is None:
            return
        for c in self.walk(d):
            if c.kind in (self.ci.CursorKind.DECL_REF_EXPR,
                          self.ci.CursorKind.OVERLOADED_DECL_REF) and \
                    (c.spelling == "threadIdx" or c.spelling in SYNC_NAMES):
                raise _Fallback(f"helper function {fn.spelling} uses {c.spelling}")
            if c.kind == self.ci.CursorKind.CALL_EXPR:
                self._check_call(c, seen, helper=fn)

    def _find_writes(self, body):
        """Variables assigned, incremented or whose address is taken anywhere in the body."""
        toks = list(body.get_tokens())
        pos = {t.extent.start.offset: i for i, t in enumerate(toks)}
        for c in self.walk(body):
            if c.kind != self.ci.CursorKind.DECL_REF_EXPR or c.referenced is None:
                continue
            i = pos.get(c.extent.start.offset)
            if i is None:
                self.written.add(c.referenced.hash)   # a macro's expansion: assume written
                continue
            j = i + 1
            while j + 1 < len(toks) and toks[j].spelling == "." :
                j += 2
            after = toks[j].spelling if j < len(toks) else ""
            before = toks[i - 1].spelling if i > 0 else ""
            if after in _WRITE_AFTER or before in _WRITE_BEFORE:
                self.written.add(c.referenced.hash)

    # ---- structure ----
    def _is_barrier_stmt(self, s):
        ci = self.ci
        c = s
        while c.kind in (ci.CursorKind.UNEXPOSED_EXPR, ci.CursorKind.PAREN_EXPR) and \
                len(list(c.get_children())) == 1:
            c = next(c.get_children())
        return c.kind == ci.CursorKind.CALL_EXPR and c.spelling == "__syncthreads"

    def _has_barrier(self, s):
        return any(c.kind == self.ci.CursorKind.CALL_EXPR and c.spelling == "__syncthreads"
                   for c in self.walk(s))

    def _is_shared_decl(self, s):
        if s.kind != self.ci.CursorKind.DECL_STMT:
            return False
        return any(a.kind == self.ci.CursorKind.ANNOTATE_ATTR and a.spelling == "tm_shared"
                   for d in self._var_decls(s) for a in d.get_children())

    def _var_decls(self, s):
        return [c for c in s.get_children() if c.kind == self.ci.CursorKind.VAR_DECL]

    def _classify_decls(self, stmts):
        # A declaration with one per-thread variable makes all of its variables per-thread.
        """Per-thread arrays: locals declared at the top level of a region and used in another
        region. Uniform scalars: top-level locals whose initializer is block-uniform and that
        are never written afterwards (they may stay outside the thread loops)."""
        self.region_of = {}   # VAR_DECL hash -> region id where declared
        self.uses = {}        # VAR_DECL hash -> set of region ids using it
        self._assign_regions(stmts, [0], top=True)
        for h, regions in self.uses.items():
            if h in self.region_of and regions - {self.region_of[h]} and h not in self.uniform:
                for other in self.same_stmt[h]:
                    self.live_types[other.hash] = other

    def _assign_regions(self, stmts, counter, top):
        ci = self.ci
        if not hasattr(self, "same_stmt"):
            self.same_stmt = {}
        region = counter[0]
        seen_return = False
        for s in map(self._unwrap, stmts):
            if self._is_barrier_stmt(s):
                counter[0] += 1
                region = counter[0]
                continue
            if self._is_shared_decl(s):
                continue
            barrier_loop = s.kind == ci.CursorKind.FOR_STMT and self._has_barrier(s)
            if barrier_loop:
                self._check_uniform_for(s)
            if barrier_loop or (not seen_return and not self._has_barrier(s) and
                                self._hoistable(s)):
                self.hoisted.add(s.hash)
                counter[0] += 1
                header, body, inner = self._for_parts(s)
                for h in header:
                    for c in self.walk(h):
                        if c.kind == ci.CursorKind.VAR_DECL:
                            self.uniform.add(c.hash)
                self._assign_regions(inner, counter, top=False)
                counter[0] += 1
                region = counter[0]
                continue
            seen_return = seen_return or any(c.kind == ci.CursorKind.RETURN_STMT
                                             for c in self.walk(s))
            if self._has_barrier(s):
                raise _Fallback(f"a barrier under thread-dependent or unsupported control flow "
                                f"(line {s.location.line})")
            if s.kind == ci.CursorKind.DECL_STMT:
                decls = self._var_decls(s)
                if any(d.storage_class == ci.StorageClass.STATIC for d in decls):
                    raise _Fallback(f"a static local variable (line {s.location.line}): one "
                                    "for all threads")
                if len(decls) == 1 and top and self._uniform_decl(decls[0]):
                    self.uniform.add(decls[0].hash)   # emitted between two thread loops
                    counter[0] += 1
                    region = counter[0]
                    continue
                if self._recomputable(s, decls):
                    self.recompute.update({d.hash: s for d in decls})
                    self.recompute_deps[s.hash] = {
                        c.referenced.hash for c in self.walk(s)
                        if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None
                        and c.referenced.hash in self.recompute}
                    continue
                for d in decls:
                    self.region_of[d.hash] = region
                    self.same_stmt[d.hash] = decls
            for c in self.walk(s):
                if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None:
                    self.uses.setdefault(c.referenced.hash, set()).add(region)

    def _unwrap(self, s):
        """The for loop under `#pragma unroll` (libclang: an attributed statement holding it);
        the pragma is a hint the emulator's compiler does not need."""
        ci = self.ci
        kids = list(s.get_children()) if s.kind == ci.CursorKind.UNEXPOSED_STMT else []
        if len(kids) == 1 and kids[0].kind == ci.CursorKind.FOR_STMT:
            return kids[0]
        return s

    def _for_parts(self, s):
        """(header cursors, body cursor, body statements) of a for loop."""
        kids = list(s.get_children())
        body = kids[-1]
        stmts = list(body.get_children()) if body.kind == self.ci.CursorKind.COMPOUND_STMT \
            else [body]
        return kids[:-1], body, stmts

    def _split_loop(self, s):
        """Whether `s` is a loop the thread loops go inside of: one with barriers, or (design
        1's interchange) a barrier-free loop with a block-uniform header and no exit from its
        body, so that `for k { for threads { body } }` runs each thread's iterations in order
        and the compiler can vectorise across threads (decided once per loop, in order)."""
        return s.hash in self.hoisted

    def _hoistable(self, s):
        ci = self.ci
        if s.kind != ci.CursorKind.FOR_STMT:
            return False
        header, body, stmts = self._for_parts(s)
        if len(header) != 3 or self._uniform_for_problem(s) is not None:
            return False
        loops = (ci.CursorKind.FOR_STMT, ci.CursorKind.WHILE_STMT, ci.CursorKind.DO_STMT,
                 ci.CursorKind.CXX_FOR_RANGE_STMT)

        def exits(c, depth_loop, depth_switch):
            """Whether `c` leaves the loop body (or declares shared memory, which must stay at
            the block level)."""
            if c.kind == ci.CursorKind.RETURN_STMT or (c.kind == ci.CursorKind.DECL_STMT and
                                                      self._is_shared_decl(c)):
                return True
            if c.kind == ci.CursorKind.CONTINUE_STMT and depth_loop == 0:
                return True
            if c.kind == ci.CursorKind.BREAK_STMT and depth_loop == 0 and depth_switch == 0:
                return True
            return any(exits(k, depth_loop + (c.kind in loops), depth_switch +
                             (c.kind == ci.CursorKind.SWITCH_STMT)) for k in c.get_children())
        return not any(exits(b, 0, 0) for b in stmts)

    def _uniform_expr(self, cursor, allowed=()):
        ci = self.ci
        for c in self.walk(cursor):
            if c.kind == ci.CursorKind.CALL_EXPR and c.spelling not in PURE_CALLS:
                return False   # a helper or clock64() could return anything
            if c.kind != ci.CursorKind.DECL_REF_EXPR:
                continue
            r = c.referenced
            if r is None:
                return False
            if c.spelling in UNIFORM_BUILTINS:
                continue
            if r.location.file is None or r.location.file.name != SOURCE_NAME:
                if r.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE) \
                        and c.spelling in PURE_CALLS:
                    continue
                return False   # threadIdx, and anything else the prelude declares
            if r.kind in (ci.CursorKind.ENUM_CONSTANT_DECL, ci.CursorKind.FUNCTION_DECL,
                          ci.CursorKind.FUNCTION_TEMPLATE,
                          ci.CursorKind.TEMPLATE_NON_TYPE_PARAMETER):
                continue
            if r.hash in allowed or r.hash in self.uniform:
                continue
            if r.kind == ci.CursorKind.PARM_DECL and r.hash in self.params and \
                    r.hash not in self.written:
                continue
            if r.kind == ci.CursorKind.VAR_DECL and r.semantic_parent is not None and \
                    r.semantic_parent.kind in (ci.CursorKind.TRANSLATION_UNIT,
                                               ci.CursorKind.NAMESPACE) and \
                    r.type.is_const_qualified():
                continue
            return False
        return True

    def _recomputable(self, s, decls):
        """A declaration of scalars never written again whose initializers read only threadIdx,
        block-uniform values and other such variables (tx, row, col): recomputed at the top of
        every thread loop that uses it, so the compiler sees it as affine in the thread index
        (a per-thread array would hide that)."""
        ci = self.ci
        allowed = set(self.recompute) | {-1}
        for d in decls:
            if d.hash in self.written or (d.type.kind not in _SCALAR_KINDS and not (
                    self.templates and d.type.kind == ci.TypeKind.UNEXPOSED)):
                return False
            inits = [c for c in d.get_children() if c.kind.is_expression()]
            if not inits:
                return False
            for c in self.walk(inits[-1]):
                if c.kind == ci.CursorKind.DECL_REF_EXPR and c.spelling == "threadIdx":
                    continue
                if c.kind == ci.CursorKind.MEMBER_REF_EXPR:
                    continue
                if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None and \
                        c.referenced.hash in allowed:
                    continue
                if c.kind in (ci.CursorKind.DECL_REF_EXPR, ci.CursorKind.CALL_EXPR) and \
                        not self._uniform_expr(c):
                    return False
        return True

    def _uniform_decl(self, d):
        if d.hash in self.written or d.type.kind in _ARRAY_KINDS:
            return False   # (a dependent array's size expression is no initializer)
        inits = [c for c in d.get_children() if c.kind.is_expression()]
        return bool(inits) and self._uniform_expr(inits[-1])

    def _uniform_for_problem(self, s):
        """Why the loop's trip count may differ between threads, or None."""
        header, body, _ = self._for_parts(s)
        loop_vars = {c.hash for h in header for c in self.walk(h)
                     if c.kind == self.ci.CursorKind.VAR_DECL}
        for h in header:
            if not self._uniform_expr(h, loop_vars):
                return (f"a barrier inside a loop whose trip count may differ between "
                        f"threads (line {s.location.line})")
        if loop_vars & self._body_writes(body):
            return f"the loop at line {s.location.line} changes its variable inside its body"
        return None

    def _check_uniform_for(self, s):
        problem = self._uniform_for_problem(s)
        if problem is not None:
            raise _Fallback(problem)

    def _body_writes(self, body):
        saved = self.written
        self.written = set()
        self._find_writes(body)
        w, self.written = self.written, saved
        return w

    # ---- emitting ----
    def _emit_seq(self, stmts, top):
        """C++ for a statement list: shared declarations hoisted, uniform parts at the block
        level, each barrier-free run of statements as one thread loop."""
        ci = self.ci
        out, run = [], []
        last_barrier = max((i for i, s in enumerate(map(self._unwrap, stmts)) if self._is_barrier_stmt(s) or
                            (s.kind == ci.CursorKind.FOR_STMT and self._has_barrier(s))),
                           default=-1)   # hoisted barrier-free loops end no region for return

        def flush(final):
            if run:
                if not final and any(c.kind == ci.CursorKind.RETURN_STMT for r in run
                                     for c in self.walk(r)):
                    raise _Fallback(f"return before a barrier (line {run[0].location.line})")
                out.append(self._thread_loop(run, final))
                run.clear()

        for i, s in enumerate(map(self._unwrap, stmts)):
            if self._is_barrier_stmt(s):
                flush(False)
                out.append(f"/* __syncthreads() line {s.location.line} */")
                continue
            if self._is_shared_decl(s):
                if not top:
                    raise _Fallback("a __shared__ declaration inside a loop with barriers")
                out.append(self.src(s))   # in place: it may use a uniform local declared above
                continue
            if self._split_loop(s):
                flush(False)
                header, body, inner = self._for_parts(s)
                head = self.data[s.extent.start.offset:body.extent.start.offset].decode()
                out.append(head + "{\n" + self._emit_seq(inner, False) + "\n}")
                continue
            if s.kind == ci.CursorKind.DECL_STMT and \
                    any(d.hash in self.recompute for d in self._var_decls(s)):
                continue   # emitted where used (_thread_loop)
            if s.kind == ci.CursorKind.DECL_STMT and top and \
                    any(d.hash in self.uniform for d in self._var_decls(s)):
                flush(False)
                out.append(self.src(s))
                continue
            run.append(s)
            self._check_region_stmt(s, final=top and i > last_barrier)
        flush(top)
        return "\n".join(out)

    def _check_region_stmt(self, s, final):
        """return only after the last barrier; break/continue only inside their own loop."""
        ci = self.ci
        loops = (ci.CursorKind.FOR_STMT, ci.CursorKind.WHILE_STMT, ci.CursorKind.DO_STMT,
                 ci.CursorKind.CXX_FOR_RANGE_STMT)

        def visit(c, depth_loop, depth_switch):
            if c.kind == ci.CursorKind.RETURN_STMT and not final:
                raise _Fallback(f"return before a barrier (line {c.location.line})")
            if c.kind == ci.CursorKind.CONTINUE_STMT and depth_loop == 0:
                raise _Fallback(f"continue of a loop with barriers (line {c.location.line})")
            if c.kind == ci.CursorKind.BREAK_STMT and depth_loop == 0 and depth_switch == 0:
                raise _Fallback(f"break of a loop with barriers (line {c.location.line})")
            for k in c.get_children():
                visit(k, depth_loop + (c.kind in loops), depth_switch +
                      (c.kind == ci.CursorKind.SWITCH_STMT))
        visit(s, 0, 0)

    def _stmt_text(self, s, label):
        """A region statement's text, with declarations of per-thread variables turned into
        assignments to this thread's element, and return into a jump to the next thread."""
        ci = self.ci
        if s.kind == ci.CursorKind.DECL_STMT:
            decls = self._var_decls(s)
            if any(d.hash in self.live_types for d in decls):
                return " ".join(self._decl_assign(s, d, part) for d, part in
                                zip(decls, self._declarators(s, decls)))
        return self._text_with_returns(s, label)

    def _declarators(self, s, decls):
        """The declarator texts of a declaration (`a = 1`, `*p = q`, `acc[4]`)."""
        start = decls[0].location.offset
        text = self.data[start:s.extent.end.offset].decode().rstrip().rstrip(";")
        parts = split_top_level(text)
        if len(parts) != len(decls):
            raise _Fallback(f"a declaration not understood (line {s.location.line})")
        return parts

    def _decl_assign(self, s, d, part):
        """One declarator of a per-thread variable as an assignment to this thread's element."""
        eq = _top_level_eq(part)
        if eq < 0:
            if re.search(r"[({]", part):
                raise _Fallback(f"an initializer form not handled (line {s.location.line})")
            return f"/* {d.spelling}: per-thread */"
        init = part[eq + 1:].strip()
        if d.type.kind == self.ci.TypeKind.CONSTANTARRAY:
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
                edits.append((c.extent.start.offset - base, c.extent.end.offset - base))
        for a, b in sorted(edits, reverse=True):
            text = text[:a] + "goto " + label + text[b:]
        return text

    def _thread_loop(self, stmts, final):
        self.n_regions += 1
        used = set()
        for s in stmts:
            for c in self.walk(s):
                if c.kind == self.ci.CursorKind.DECL_REF_EXPR and \
                        c.referenced is not None and c.referenced.hash in self.live_types:
                    used.add(c.referenced.hash)
            if s.kind == self.ci.CursorKind.DECL_STMT:
                used |= {d.hash for d in self._var_decls(s) if d.hash in self.live_types}
        refs = "".join(f"auto &{self.live_types[h].spelling} = tm_r_{self._pt_name(h)}[tm_x_]; "
                       for h in sorted(used, key=lambda h: self._pt_name(h)))
        need = {c.referenced.hash for s in stmts for c in self.walk(s)
                if c.kind == self.ci.CursorKind.DECL_REF_EXPR and c.referenced is not None
                and c.referenced.hash in self.recompute}
        decls = {}
        while need:
            h = need.pop()
            d = self.recompute[h]
            if d.hash not in decls:
                decls[d.hash] = d
                need |= self.recompute_deps[d.hash]
        refs += "\n" + "\n".join(self.src(d) for d in sorted(
            decls.values(), key=lambda d: d.extent.start.offset))
        label = f"tm_next_thread_{self.n_regions}_"
        body = "\n".join(self._stmt_text(s, label) for s in stmts)
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
        precise = self._may_fault(stmts)
        note_row = "tm_tv_[1] = tm_y_; tm_tv_[2] = tm_z_;\n" if precise else ""
        note = "tm_tv_[0] = (unsigned)tm_x_;\n" if precise else ""
        # size_t indices and restrict row pointers: what the vectoriser needs to see the
        # per-thread arrays as affine and unaliased along the innermost (x) loop
        return (f"tm_emu_tls.linear_tid = {0 if precise else -1};\n"
                f"for (unsigned tm_z_ = 0; tm_z_ < tm_bd_.z; ++tm_z_)\n"
                f"for (unsigned tm_y_ = 0; tm_y_ < tm_bd_.y; ++tm_y_) {{\n"
                f"const size_t tm_row_ = (size_t)tm_bd_.x * (tm_y_ + (size_t)tm_bd_.y * tm_z_);\n"
                f"{rows}\n{note_row}"
                f"for (size_t tm_x_ = 0; tm_x_ < tm_bd_.x; ++tm_x_) {{\n"
                f"const uint3 tm_threadIdx_ = {{(unsigned)tm_x_, tm_y_, tm_z_}};\n{note}"
                f"{refs}\n{{\n#line {line} \"{SOURCE_NAME}\"\n{body}\n}}\n"
                + (f"{label}: ;\n" if label else "") + "}}")

    def _may_fault(self, stmts):
        """Whether a region reads through a pointer, calls a function that is not pure math,
        throws, or divides (an integer division by zero is SIGFPE)."""
        ci = self.ci
        for st in stmts:
            if any(t.spelling in ("/", "%", "/=", "%=", "throw") for t in st.get_tokens()):
                return True
            for c in self.walk(st):
                if c.kind == ci.CursorKind.CALL_EXPR and c.spelling not in PURE_CALLS:
                    return True
                if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None and \
                        c.referenced.type.get_canonical().kind == ci.TypeKind.POINTER:
                    return True
        return False

    def _pt_name(self, h):
        d = self.live_types[h]
        return f"{d.spelling}_{d.location.line}_{d.location.column}"

    def _function(self, k, body, inner):
        ci = self.ci
        head = self.data[k.extent.start.offset:body.extent.start.offset].decode()
        # the signature with the kernel's name replaced
        m = re.search(r"\b" + re.escape(self.name) + r"\s*\(", head)
        if m is None:
            raise _Fallback("the kernel's name was not found in its signature")
        params = head[m.end():]
        params = params[:params.rfind(")")]
        arrays, sizes = [], []
        for h, d in sorted(self.live_types.items(), key=lambda kv: self._pt_name(kv[0])):
            t = d.type
            dims = ""
            while t.kind == ci.TypeKind.CONSTANTARRAY:
                dims += f"[{t.get_array_size()}]"
                t = t.get_array_element_type()
            if t.kind in (ci.TypeKind.LVALUEREFERENCE, ci.TypeKind.RVALUEREFERENCE):
                raise _Fallback(f"{d.spelling}: a reference live across a barrier")
            if t.kind in (ci.TypeKind.INCOMPLETEARRAY, ci.TypeKind.VARIABLEARRAY,
                          ci.TypeKind.DEPENDENTSIZEDARRAY, ci.TypeKind.RECORD) and \
                    t.spelling not in _VECTOR_TYPES:
                raise _Fallback(f"{d.spelling}: a per-thread variable of type {d.type.spelling}")
            tname = t.spelling
            arrays.append(f"std::remove_cv_t<{tname}> tm_pt_{self._pt_name(h)}[tm_nt_]{dims};")
            size = d.type.get_size()
            if size <= 0 and self.templates:
                size = f"sizeof({tname}{dims})"   # a dependent type: known per instance
            elif size <= 0:
                raise _Fallback(f"{d.spelling}: the size of {d.type.spelling} is not known")
            sizes.append(size)
        fn = f"tm_split_{self.name}"
        template = ""
        if k.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            template = head[:m.start()]
            template = template[:template.rfind(">") + 1].strip()
            if not template.startswith("template"):
                raise _Fallback("the kernel's template header was not understood")
        self.frame = sum(x for x in sizes if isinstance(x, int))
        frame = " + ".join(str(x) for x in sizes) or "0"
        frame_decl = (f"{template} constexpr size_t tm_split_frame_{self.name} = {frame};"
                      if template else
                      f"static const size_t tm_split_frame_{self.name} = {frame};")
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
{template} static void {fn}({params})
{{
    const uint3 tm_blockIdx_ = tm_emu_tls.block_idx;
    const dim3 tm_bd_ = tm_emu_tls.block_dim, tm_gridDim_ = tm_emu_tls.grid_dim;
    const unsigned tm_nt_ = tm_bd_.x * tm_bd_.y * tm_bd_.z;
    volatile unsigned *const tm_tv_ = &tm_emu_tls.thread_idx.x;
    (void)tm_blockIdx_; (void)tm_gridDim_; (void)tm_nt_; (void)tm_tv_;
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


def registry_source(source, path):
    """The emulator's text of a registry kernel file (cuda/*.cu, setup.py at build time): the
    file as written, with each template kernel the transform applies to followed by its split
    function template and `tm_with_split_<kernel>`, a variable template pairing each instance
    with its split (emu/cuda_emu.h's tm_emu_split_kernel), which a macro then names as the
    kernel for the rest of the file, so the launcher's tm_launch (cuda/common.h) takes the
    thread loops. (text, {kernel: reason or ""}); kernels the transform refuses keep fibers."""
    ci = _cindex()
    if ci is None:
        return source, {}
    index = ci.Index.create()
    tu = index.parse(SOURCE_NAME, args=["-x", "c++", "-std=c++17", "-nostdinc", "-nostdinc++",
                                        "-include", "/tiledmm-split/p.h"],
                     unsaved_files=[(SOURCE_NAME, _INCLUDE_RE.sub(
                         lambda m: " " * len(m.group(0)), source)),
                         ("/tiledmm-split/p.h", _BODY_PRELUDE)],
                     options=ci.TranslationUnit.PARSE_INCOMPLETE)
    names = sorted({c.spelling for c in _kernel_cursors(ci, tu.cursor) if c.is_definition()})
    inserts, reasons = [], {}
    for name in names:
        plan = split_kernel(source, name, templates=True)
        reasons[name] = plan.reason
        if plan.text is None or not plan.template_args:
            reasons[name] = plan.reason or "not a template (the registry's kernels are)"
            continue
        a = plan.template_args
        header = plan.text[plan.text.index(" static void tm_split_"):]   # after the template
        template = plan.text[plan.text.rindex("\ntemplate", 0, plan.text.index(header)) + 1:
                             plan.text.index(header)].strip()
        pair = (f"\n{template} inline const tm_emu_split_kernel<decltype(&{name}{a})> "
                f"tm_with_split_{name} = {{&{name}{a}, &tm_split_{name}{a}, "
                f"tm_split_frame_{name}{a}}};\n#define {name} tm_with_split_{name}\n")
        line = source.count("\n", 0, plan.end) + 1
        text = plan.text.replace(f'"{SOURCE_NAME}"', f'"{path}"')
        inserts.append((plan.end, text + pair + f'#line {line} "{path}"\n'))
    out = source
    for end, text in sorted(inserts, reverse=True):
        out = out[:end] + "\n" + text + out[end:]
    return f'#line 1 "{path}"\n' + out, reasons


_ARRAY_KINDS = set()    # filled from clang.cindex's TypeKind, when it loads
_SCALAR_KINDS = set()   # filled below from clang.cindex's TypeKind, when it loads
_VECTOR_TYPES = {"float2", "float3", "float4", "double2", "int2", "int3", "int4", "uint3",
                 "dim3"}


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
