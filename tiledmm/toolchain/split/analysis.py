"""What the barrier split (split/transform.py, issue 34 design 1) knows about a kernel before it
writes any text: libclang's parse of the body, the checks that keep the fibers (raising
Fallback with the reason), which variables are block-uniform, written, recomputed per thread
or live across a barrier (per-thread arrays), and which loops the thread loops go inside of.
split/transform.py turns this analysis into the split function's text.
"""
import re

from ..diagnostics import SOURCE_NAME
from ..source import INCLUDE_RE, PARSE_PRELUDE, VECTORS, cindex, kernel_cursors

# What the body parse needs beyond the signature parse's prelude: CUDA's built-ins, declared
# (libclang must see them to keep the calls in its tree). A body with any parse error is left to
# the fibers, so a missing declaration costs speed, never correctness.
_BODY_PRELUDE = PARSE_PRELUDE + r"""
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
    for v, (c, k) in VECTORS.items()) + "".join(
    f"float {f}f(float); double {f}(double);\n" for f in (
        "sqrt", "rsqrt", "exp", "exp2", "log", "log2", "log10", "sin", "cos", "tan", "tanh",
        "fabs", "floor", "ceil", "round", "trunc", "erf", "cbrt")) + r"""
float powf(float, float); double pow(double, double); float fmaxf(float, float);
float fminf(float, float); double fmax(double, double); double fmin(double, double);
float fmaf(float, float, float); double fma(double, double, double);
float __expf(float); float __logf(float); float __fdividef(float, float);
int abs(int); float fabsf(float);
namespace cooperative_groups {
struct thread_block {
    void sync() const; unsigned thread_rank() const; unsigned size() const;
    unsigned num_threads() const; dim3 thread_index() const; dim3 group_index() const;
    dim3 dim_threads() const; dim3 group_dim() const;
};
thread_block this_thread_block(); void sync(const thread_block &);
struct grid_group {
    void sync() const; unsigned long long thread_rank() const; unsigned long long size() const;
    unsigned long long num_threads() const; unsigned long long block_rank() const;
    unsigned long long num_blocks() const; bool is_valid() const;
};
grid_group this_grid(); void sync(const grid_group &);
template <unsigned N> struct thread_block_tile {
    unsigned thread_rank() const; unsigned size() const; unsigned num_threads() const;
    unsigned meta_group_rank() const; unsigned meta_group_size() const;
};
template <unsigned N> thread_block_tile<N> tiled_partition(const thread_block &);
template <class T = void> struct plus { T operator()(const T &, const T &) const; };
template <class T = void> struct bit_and { T operator()(const T &, const T &) const; };
template <class T = void> struct bit_or { T operator()(const T &, const T &) const; };
template <class T = void> struct bit_xor { T operator()(const T &, const T &) const; };
template <unsigned N, class T, class Op> T reduce(const thread_block_tile<N> &, T, Op);
}
void tm_split_grid_sync();
namespace cuda {
enum thread_scope { thread_scope_system, thread_scope_device, thread_scope_block,
                    thread_scope_thread };
template <unsigned long A> struct aligned_size_t {
    explicit aligned_size_t(unsigned long); operator unsigned long() const;
};
template <thread_scope S> struct pipeline {
    void producer_acquire(); void producer_commit(); void consumer_wait(); void consumer_release();
    bool quit(); template <class D> bool consumer_wait_for(const D &);
    template <class D> bool consumer_wait_until(const D &);
};
pipeline<thread_scope_thread> make_pipeline();
template <class T, class Size, thread_scope S> void memcpy_async(T *, const T *, Size, pipeline<S> &);
template <class Size, thread_scope S> void memcpy_async(void *, const void *, Size, pipeline<S> &);
template <unsigned char Prior, thread_scope S> void pipeline_consumer_wait_prior(pipeline<S> &);
}
"""
# The prelude's cuda:: is libcu++'s thread-scope pipeline (<cuda/pipeline>), so that a kernel
# using one parses: a pipeline made by make_pipeline() is a per-thread object of the thread
# loops (transform._decl_assign), copying as late as on fibers.
# What the body parse's prelude declares of cooperative groups: the block, the grid (in a
# cooperative launch), static tiles of a block up to a warp and cg::reduce over them with plus
# and the bitwise operations. split/lower.lower_block_groups rewrites their calls in the kernel
# to the built-ins (a grid's sync() to tm_split_grid_sync(), GRID_BARRIER; a tile's reduce to
# the xor shuffles the fibers' cg::reduce makes); any other use of a group (a helper's, a group
# passed on) keeps the fibers.
GROUPS_NAMESPACE, BLOCK_GROUP = "cooperative_groups", "thread_block"
GRID_GROUP, TILE_GROUP = "grid_group", "thread_block_tile"
# grid.sync() as the split sees it: a barrier (a region boundary) after which the block's thread
# waits for the grid's other blocks (transform._emit_seq; tm_emu_split_grid_sync)
GRID_BARRIER = "tm_split_grid_sync"
BLOCK_BARRIERS = {"__syncthreads", GRID_BARRIER}

# Calls a uniform or recomputed expression may make: pure functions of their arguments.
PURE_CALLS = {f"{f}{s}" for f in ("sqrt", "rsqrt", "exp", "exp2", "log", "log2", "log10", "sin",
                                  "cos", "tan", "tanh", "fabs", "floor", "ceil", "round", "trunc",
                                  "erf", "cbrt", "pow", "fmax", "fmin", "fma") for s in ("", "f")}
PURE_CALLS |= {"min", "max", "abs", "__fdividef", "__expf", "__logf"}
WARP_OPS = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
            "__ballot_sync", "__all_sync", "__any_sync", "__activemask", "__match_any_sync",
            "__match_all_sync", "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync"}
# nvcuda::wmma's warp-collective loads, stores and products (native/user/mma.h), found by name
# among the kernel's tokens: the body parse does not read <mma.h>, so their calls may not be in
# its tree at all (and a kernel split around them computed wrong products, silently).
WMMA_OPS = {"load_matrix_sync", "store_matrix_sync", "mma_sync"}
# Warp operations the thread loops run (full mask, every lane of the warp at the same statement:
# _find_shuffles): the emulator's op (emu/cuda_emu.h tm_emu::WarpOp) of each.
SHUFFLE_OPS = {"__shfl_sync": "OP_SHFL", "__shfl_up_sync": "OP_SHFL_UP",
               "__shfl_down_sync": "OP_SHFL_DOWN", "__shfl_xor_sync": "OP_SHFL_XOR"}
VOTE_OPS = {"__ballot_sync": "OP_BALLOT", "__all_sync": "OP_ALL", "__any_sync": "OP_ANY"}
# A full mask as written: a literal, or a const variable initialised with one.
FULL_MASKS = {"0xffffffff", "0xffffffffu", "0xffffffffU", "0xFFFFFFFF", "0xFFFFFFFFu",
              "0xFFFFFFFFU", "~0u", "~0U", "4294967295u", "4294967295U"}
BARRIER_OPS = {"__syncthreads_count", "__syncthreads_and", "__syncthreads_or"}
SYNC_NAMES = WARP_OPS | BARRIER_OPS | BLOCK_BARRIERS
# Functions the body parse's prelude declares: a call to one needs no further check.
KNOWN_CALLS = PURE_CALLS | SYNC_NAMES | {
    "atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax", "atomicAnd", "atomicOr",
    "atomicXor", "atomicCAS", "atomicInc", "atomicDec", "__ldg", "printf", "clock64",
    "__threadfence", "__threadfence_block", "__threadfence_system", "fabsf", "powf", "fmaxf",
    "fminf", "fmaf"}
UNIFORM_BUILTINS = {"blockIdx", "blockDim", "gridDim", "warpSize"}
CUDA_BUILTINS = UNIFORM_BUILTINS | {"threadIdx"}
_WRITE_AFTER = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--"}
_READ_OPERATORS = {"+", "-", "*", "/", "%", "<", ">", "<=", ">=", "==", "!=", "&&", "||", "&",
                   "|", "^", "<<", ">>"}
# The body parse's prelude, as the parse names it: what it declares neither synchronises nor
# reads threadIdx (beyond the built-ins it declares)
PRELUDE_NAME = "/tiledmm-split/p.h"
# The largest per-thread frame (bytes of per-thread arrays times threads) run as thread loops:
# they live on the OS thread's stack; larger blocks run on fibers (the launcher decides).
MAX_FRAME = 512 * 1024
# Kernels with larger locals keep the fibers: a CUDA thread's stack there is small
# (TILEDMM_EMU_STACK_KB), and overflowing it is reported as such; the thread loops run on the
# OS thread's stack, where the same kernel would run, or fail with a plain fault.
MAX_LOCALS = 4096


class Fallback(Exception):
    """The kernel keeps its fibers; the message says why."""


class KernelAnalysis:
    """The analysis of kernel `name` of `text` (the emulator's dialect applied): analyse()
    raises Fallback with the reason where the kernel must keep its fibers."""

    def __init__(self, ci, text, name, define_lines, templates=False, headers=None,
                 interchange=True):
        self.ci, self.name, self.templates = ci, name, templates
        # interchange: barrier-free uniform loops outside the thread loops (split_loop); off for
        # profile builds, where each of a thread's turns costs hook calls and a k loop made
        # a turn per k (the tiled matmul counted 1.2x slower split than on fibers)
        self.interchange = interchange
        blanked = INCLUDE_RE.sub(lambda m: " " * len(m.group(0)), text)
        # `headers`: {name: text} of the registry's own headers (registry_source; never a
        # user's), parsed after the prelude so that their device helpers can be inlined
        # (split_inline.inline_warp_helpers); their own #include lines blanked
        self.header_data = {f"/tiledmm-split/h/{h}": INCLUDE_RE.sub(
            lambda m: " " * len(m.group(0)), t).encode() for h, t in (headers or {}).items()}
        prelude = _BODY_PRELUDE + "\n".join(define_lines) + "\n" + "".join(
            f'#include "{h}"\n' for h in self.header_data)
        self.data = blanked.encode()
        index = ci.Index.create()
        self.tu = index.parse(SOURCE_NAME, args=["-x", "c++", "-std=c++17", "-nostdinc",
                                                 "-nostdinc++", "-include", PRELUDE_NAME],
                              unsaved_files=[(SOURCE_NAME, blanked),
                                             (PRELUDE_NAME, prelude)] +
                              [(h, t.decode()) for h, t in self.header_data.items()],
                              options=ci.TranslationUnit.PARSE_INCOMPLETE)
        self.live_types = {}     # VAR_DECL hash -> (cursor) of per-thread arrays
        self.uniform = set()     # VAR_DECL hashes of block-uniform scalars
        self.written = set()     # VAR_DECL hashes written anywhere in the body
        self.hoisted = set()     # FOR_STMT hashes the thread loops go inside of
        self.stepping = set()    # FOR_STMT hashes that must be hoisted (_steps)
        self._barrier_offsets = None   # has_barrier_in's, found once
        self.split_ifs = set()   # IF_STMT hashes with barriers and a block-uniform condition
        self.round_loops = set() # FOR_STMT hashes run as rounds over the threads (round_loop)
        # Template kernels: compile-time conditions (C++ text over the template's parameters)
        # under which an instance reaches something that needs the fibers (a warp operation,
        # reduce_steps' last warp): those instances keep the fibers, the others split.
        self.fiber_guards = []   # [(condition text, reason)]
        self.recompute = {}      # VAR_DECL hash -> its DECL_STMT, recomputed per thread loop
        self.recompute_deps = {} # DECL_STMT hash -> VAR_DECL hashes of recomputed it reads
        # Warp granularity: the one `if` whose branch's top-level statements include full-mask
        # `__syncwarp();` (reduce_steps' last warp, once its helper is inlined: split_inline)
        # and whose condition reads only the thread's index and uniform values. The emitter runs
        # it as a thread loop storing each thread's predicate, a check that every warp's lanes
        # agree (else the fibers' "no thread can proceed"), then one loop per stretch between
        # the __syncwarp()s over the threads of the warps that take the branch.
        self.warp_ifs = set()    # IF_STMT hashes of that shape (_find_warp_ifs)
        self.warp_syncs = set()  # hashes of every cursor of those `__syncwarp()` statements
        self.warp_ifs_seen = set()  # the ones _assign_regions reached at block level
        self.inlined_sync_lines = {}  # line of an inlined helper call -> its first __syncwarp's
        # Shuffles and votes (_find_shuffles): statements `x op= f(__shfl_down_sync(FULL, v,
        # off));` whose warp operations every lane of a warp reaches together. Each is a stretch
        # boundary: one thread loop stores every thread's value, the next reads its source
        # lane's (barrier_split._exchange).
        self.shuffle_calls = {}  # CALL_EXPR hash -> (cursor, name) of those warp operations
        self.shuffle_stmts = set()   # hashes of the statements holding them
        self._loop_depth = 0     # loops around the statements _assign_regions walks
        self._in_warp_if = False

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

    def analyse(self):
        ci = self.ci
        if not _ARRAY_KINDS:
            _ARRAY_KINDS.update(getattr(ci.TypeKind, k) for k in (
                "CONSTANTARRAY", "DEPENDENTSIZEDARRAY", "VARIABLEARRAY", "INCOMPLETEARRAY"))
        if not _SCALAR_KINDS:
            _SCALAR_KINDS.update(getattr(ci.TypeKind, k) for k in (
                "BOOL", "CHAR_U", "UCHAR", "USHORT", "UINT", "ULONG", "ULONGLONG", "CHAR_S",
                "SCHAR", "SHORT", "INT", "LONG", "LONGLONG", "FLOAT", "DOUBLE", "POINTER",
                "ELABORATED", "TYPEDEF", "AUTO"))
        kernels = [c for c in kernel_cursors(ci, self.tu.cursor) if c.spelling == self.name
                   and c.is_definition()]
        if len(kernels) != 1:
            raise Fallback("the kernel's definition was not found by the body parse")
        k = kernels[0]
        if k.kind != ci.CursorKind.FUNCTION_DECL and not self.templates:
            raise Fallback("a template kernel")
        for d in self.tu.diagnostics:
            loc = d.location
            if d.severity >= 3 and loc.file is not None and loc.file.name == SOURCE_NAME and \
                    (not self.templates or k.extent.start.offset <= loc.offset <= k.extent.end.offset):
                raise Fallback(f"libclang could not read the source ({d.spelling})")
        body = [c for c in k.get_children() if c.kind == ci.CursorKind.COMPOUND_STMT]
        if len(body) != 1:
            raise Fallback("no body")
        body = body[0]
        self.params = {p.hash for p in k.get_children() if p.kind == ci.CursorKind.PARM_DECL}
        self._find_shuffles(body)
        self._find_warp_ifs(body)
        self._check_body(body)
        self._find_writes(body)
        for p in k.get_children():
            if p.kind == ci.CursorKind.PARM_DECL and p.hash in self.written:
                raise Fallback(f"parameter {p.spelling} is written in the kernel (the thread "
                                "loops share one copy per block)")
        self._check_names(k)
        wmma = sorted({t.spelling for t in body.get_tokens()} & WMMA_OPS)
        if wmma:
            raise Fallback(f"warp operation wmma::{wmma[0]} (32-lane semantics: fibers)")
        if any(t.spelling == "decltype" for t in body.get_tokens()):
            raise Fallback("decltype in the kernel (a variable live across a barrier is a "
                            "reference in the thread loops)")
        stmts = list(body.get_children())
        self._classify_decls(stmts)   # a kernel without barriers: one region (and its loops)
        if self.warp_ifs - self.warp_ifs_seen:
            raise Fallback("__syncwarp under a loop or thread-dependent control flow")
        self.kernel, self.body, self.stmts = k, body, stmts
        args = ""
        if k.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            names = []
            for c in k.get_children():
                if c.kind in (ci.CursorKind.TEMPLATE_TYPE_PARAMETER,
                              ci.CursorKind.TEMPLATE_NON_TYPE_PARAMETER):
                    if "..." in "".join(t.spelling for t in c.get_tokens()):
                        raise Fallback("a template parameter pack")
                    names.append(c.spelling)
                elif c.kind == ci.CursorKind.TEMPLATE_TEMPLATE_PARAMETER:
                    raise Fallback("a template template parameter")
            args = "<" + ", ".join(names) + ">"
        self.template_args = args   # "<T, TILE, Index>" of a template kernel, else ""

    def _check_body(self, body):
        ci = self.ci
        seen_funcs = set()
        local_bytes = 0

        def visit(c, guard):
            """`guard`: the compile-time conditions (texts) every path to `c` passes."""
            nonlocal local_bytes
            kind = c.kind
            if kind == ci.CursorKind.VAR_DECL and not any(
                    a.kind == ci.CursorKind.ANNOTATE_ATTR for a in c.get_children()):
                local_bytes += max(c.type.get_size(), 0)
                if local_bytes > MAX_LOCALS:
                    raise Fallback(f"more than {MAX_LOCALS} bytes of local variables per thread "
                                    "(the fibers' stacks report an overflow)")
            if kind in (ci.CursorKind.GOTO_STMT, ci.CursorKind.INDIRECT_GOTO_STMT,
                        ci.CursorKind.LABEL_STMT):
                raise Fallback("goto or a label")
            if kind in (ci.CursorKind.ASM_STMT, ci.CursorKind.MS_ASM_STMT):
                raise Fallback("inline asm")
            if kind == ci.CursorKind.LAMBDA_EXPR:
                raise Fallback("a lambda")
            if kind == ci.CursorKind.COMPOUND_STMT:
                for st in c.get_children():
                    if st.extent.start.offset >= st.extent.end.offset:
                        raise Fallback(f"a statement a macro writes that the split cannot "
                                        f"place (line {st.location.line})")
            if c.hash in self.warp_syncs:
                return   # a __syncwarp() of the warp `if` (_find_warp_ifs)
            if c.hash in self.shuffle_calls:   # (_find_shuffles); its arguments are checked
                for k in list(c.get_children())[1:]:
                    visit(k, guard)
                return
            if kind == ci.CursorKind.CALL_EXPR:
                if not guard:
                    self._check_call(c, seen_funcs)
                else:   # the instances reaching this call keep the fibers if it needs them
                    tried = set(seen_funcs)
                    try:
                        self._check_call(c, tried)
                        seen_funcs.update(tried)
                    except Fallback as exc:
                        self.fiber_guards.append((" && ".join(guard), str(exc)))
            if kind in (ci.CursorKind.DECL_REF_EXPR, ci.CursorKind.OVERLOADED_DECL_REF) and \
                    c.spelling in SYNC_NAMES and \
                    c.spelling not in BLOCK_BARRIERS:
                if not guard:
                    raise Fallback(f"{c.spelling}")
                self.fiber_guards.append((" && ".join(guard), c.spelling))
            kids = list(c.get_children())
            cond = self._constant_condition(c)
            for i, k in enumerate(kids):
                branch = [f"({cond})", f"!({cond})"][i - 1] if cond and i else None
                visit(k, guard + [branch] if branch else guard)
        visit(body, [])

    def _check_names(self, k):
        """CUDA's built-in names (threadIdx, warpSize, ...) declared in the kernel, in a function
        of the user's file it calls, or at file scope: the analysis reads those names as the
        built-ins (issue 34); keep the fibers. (A host function's `dim3 gridDim` is no matter.)"""
        ci = self.ci
        decls = (ci.CursorKind.VAR_DECL, ci.CursorKind.PARM_DECL, ci.CursorKind.FUNCTION_DECL,
                 ci.CursorKind.FUNCTION_TEMPLATE, ci.CursorKind.TYPEDEF_DECL,
                 ci.CursorKind.FIELD_DECL, ci.CursorKind.TYPE_ALIAS_DECL)
        funcs, seen = [k], set()
        tops = [t for t in self.tu.cursor.get_children() if t.location.file is not None and
                t.location.file.name == SOURCE_NAME]
        found = [t for t in tops if t.kind in decls and t.spelling in CUDA_BUILTINS]
        while funcs and not found:
            f = funcs.pop()
            if f.hash in seen:
                continue
            seen.add(f.hash)
            for c in self.walk(f):
                if c.kind in decls and c.spelling in CUDA_BUILTINS:
                    found.append(c)
                if c.kind == ci.CursorKind.CALL_EXPR:
                    funcs.extend(d.get_definition() or d for d in self.callees(c)
                                 if d.location.file is not None and
                                 d.location.file.name == SOURCE_NAME)
        if found:
            raise Fallback(f"the name {found[0].spelling} is declared in the source (line "
                            f"{found[0].location.line}): the split reads it as CUDA's built-in")

    def _constant_condition(self, s):
        """The text of an `if`'s condition when it is a compile-time constant of a template
        kernel (`if (STEP == STEP_SEQUENTIAL)`, `if constexpr (...)`: it reads only template
        parameters, enumerators and literals), else None."""
        ci = self.ci
        if not self.templates or s.kind != ci.CursorKind.IF_STMT:
            return None
        kids = list(s.get_children())
        if len(kids) not in (2, 3) or not kids[0].kind.is_expression():
            return None   # an if with an init-statement or a declared condition
        for c in self.walk(kids[0]):
            if c.kind in (ci.CursorKind.CALL_EXPR, ci.CursorKind.MEMBER_REF_EXPR):
                return None
            if c.kind == ci.CursorKind.DECL_REF_EXPR and (c.referenced is None or (
                    c.referenced.kind not in (ci.CursorKind.TEMPLATE_NON_TYPE_PARAMETER,
                                              ci.CursorKind.ENUM_CONSTANT_DECL))):
                return None
        text = self.src(kids[0]).strip()
        return text or None

    def _check_call(self, c, seen, helper=None):
        """A call in the kernel or in `helper`, a function it calls: warp operations and
        barriers with a value keep the fibers; a call libclang leaves unresolved (templates) is
        checked by name; a function the kernel's file defines is checked as a helper, once
        (`seen`: hashes of the functions checked so far). In a helper, the name it refers to
        is checked by _check_helper (which says the helper's name)."""
        if helper is None and c.spelling in WARP_OPS:
            raise Fallback(f"warp operation {c.spelling} (32-lane semantics: fibers)")
        if helper is None and c.spelling in BARRIER_OPS:
            raise Fallback(f"{c.spelling} (a barrier with a value: fibers)")
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
            raise Fallback(f"{name} (warp operations and barriers with a value: fibers)")
        if name in KNOWN_CALLS:
            return
        overloads = [d for d in self._declared(self.tu.cursor) if d.spelling == name] \
            if refs else []
        if overloads and all(o.location.file is not None and
                             o.location.file.name == PRELUDE_NAME for o in overloads):
            return   # the prelude's (cuda::memcpy_async with a template's dependent arguments)
        decls = [d for d in self.tu.cursor.get_children() if d.spelling == name and d.kind in (
            ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE)] if refs else []
        if not decls or any(d.location.file is None or d.location.file.name != SOURCE_NAME
                            for d in decls):
            raise Fallback(f"a call of {name} that libclang cannot resolve (line "
                            f"{c.location.line}; a helper from a header)")
        for d in decls:
            if d.hash not in seen:
                seen.add(d.hash)
                self._check_helper(d, seen)

    def _declared(self, scope):
        """The functions declared at file level and in namespaces under `scope`."""
        ci = self.ci
        for d in scope.get_children():
            if d.kind == ci.CursorKind.NAMESPACE:
                yield from self._declared(d)
            elif d.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE):
                yield d

    def _check_helper(self, fn, seen):
        """A helper function the kernel calls may not synchronise. It may read threadIdx: a
        thread loop that calls a function stores the thread's index where the emulator's
        threadIdx reads it (tm_emu_tls.thread_idx; barrier_split's _thread_loop)."""
        d = fn.get_definition()
        if d is None:
            return
        for c in self.walk(d):
            if c.kind in (self.ci.CursorKind.DECL_REF_EXPR,
                          self.ci.CursorKind.OVERLOADED_DECL_REF) and c.spelling in SYNC_NAMES:
                raise Fallback(f"helper function {fn.spelling} uses {c.spelling}")
            if c.kind == self.ci.CursorKind.CALL_EXPR:
                self._check_call(c, seen, helper=fn)

    def _find_writes(self, body):
        """Variables written anywhere in the body, decided from the AST (issue 34: tokens around
        a name miss `SET(idx, tid)`, `f(idx)` to an `int &`, `int &r = idx;`, `(idx) = v`): every
        use of a variable that is not surely a plain read (_plain_read) counts as a write:
        assignments, ++/--, address-of, reference bindings, arguments of functions that may take
        them by non-const reference, and anything not understood."""
        ci = self.ci

        def visit(c, parents):
            if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None and \
                    c.referenced.kind in (ci.CursorKind.VAR_DECL, ci.CursorKind.PARM_DECL) and \
                    not self._plain_read(c, parents):
                self.written.add(c.referenced.hash)
            parents.append(c)
            for k in c.get_children():
                visit(k, parents)
            parents.pop()
        visit(body, [])

    def _copied(self, p, kids):
        """Whether `p` copies its one operand (a class's constructor taking a const reference
        or a value: cuda::aligned_size_t passed by value), which reads it as its use does."""
        K = self.ci.CursorKind
        if p.kind != K.CALL_EXPR or p.referenced is None or \
                p.referenced.kind != K.CONSTRUCTOR or len(kids) != 1:
            return False
        params = [a.type for a in p.referenced.get_children() if a.kind == K.PARM_DECL] or \
            list(p.referenced.type.argument_types())   # (an implicit copy constructor's)
        return len(params) == 1 and (
            params[0].kind not in (self.ci.TypeKind.LVALUEREFERENCE,
                                   self.ci.TypeKind.RVALUEREFERENCE) or
            params[0].get_pointee().is_const_qualified())

    def _op_token(self, op, lhs):
        """The operator token of binary operator `op` (the first token after its left operand)."""
        for t in op.get_tokens():
            if t.extent.start.offset >= lhs.extent.end.offset:
                return t.spelling
        return ""

    def _plain_read(self, ref, parents):
        """Whether DECL_REF_EXPR `ref` (`parents`: its ancestors, innermost last) only reads the
        variable: under an implicit conversion (libclang's UNEXPOSED_EXPR of the same extent,
        the lvalue-to-rvalue read), an operand of a non-assigning operator, the right side of
        an assignment, an argument of a known by-value function or of a by-value parameter,
        a condition, or a value-typed cast or initializer (in a template, dependent operands
        have no implicit conversion). Parentheses, `.` member access and `?:` branches are
        looked through. Anything else is not a plain read."""
        ci = self.ci
        K = ci.CursorKind
        child, i = ref, len(parents) - 1
        while i >= 0:
            p = parents[i]
            kids = list(p.get_children())
            if p.kind == K.PAREN_EXPR or (p.kind == K.MEMBER_REF_EXPR and "->" not in [
                    t.spelling for t in p.get_tokens()]) or (
                    p.kind == K.CONDITIONAL_OPERATOR and kids and kids[0].hash != child.hash) \
                    or self._copied(p, kids):
                child, i = p, i - 1
                continue
            break
        if i < 0:
            return False
        p = parents[i]
        kids = list(p.get_children())
        first = bool(kids) and kids[0].hash == child.hash
        if p.kind == K.UNEXPOSED_EXPR:
            if len(kids) != 1 or p.extent.start.offset != child.extent.start.offset or \
                    p.extent.end.offset != child.extent.end.offset:
                return False
            outer = parents[i - 1] if i > 0 else None
            # a NoOp conversion binding a const reference: an alias, not a read
            return not (outer is not None and outer.kind == K.VAR_DECL and
                        outer.type.kind in (ci.TypeKind.LVALUEREFERENCE,
                                            ci.TypeKind.RVALUEREFERENCE))
        if p.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR) and len(kids) == 2:
            op = self._op_token(p, kids[0])
            if op in _WRITE_AFTER:
                return not first
            # (an operator token not found, as in a macro's `a = b`: not understood)
            return op in _READ_OPERATORS
        if p.kind == K.UNARY_OPERATOR:
            toks = [t.spelling for t in p.get_tokens()]
            return bool(toks) and toks[0] in ("-", "+", "!", "~", "*") and \
                "++" not in toks[:1] and "--" not in toks[:1]
        if p.kind == K.ARRAY_SUBSCRIPT_EXPR or (p.kind == K.MEMBER_REF_EXPR):
            return True   # a pointer's read (`p[i]`, `p->x`), or an index
        if p.kind == K.CONDITIONAL_OPERATOR:
            return True   # its condition
        if p.kind == K.CALL_EXPR:
            if first:
                return False
            if self.call_name(p) in KNOWN_CALLS:
                return True   # by-value parameters (atomics take `&x`: the & is the write)
            idx = next((j for j, a in enumerate(kids[1:]) if a.hash == child.hash), None)
            fns = self.callees(p)
            if idx is None or not fns:
                return False
            for fn in fns:   # every candidate takes it by value or by const reference
                params = [a.type for a in fn.get_children() if a.kind == K.PARM_DECL]
                if not params and fn.kind == K.FUNCTION_DECL:   # a template's specialisation
                    params = list(fn.type.argument_types())   # (cuda::memcpy_async<...>)
                if idx >= len(params) or (
                        params[idx].kind in (ci.TypeKind.LVALUEREFERENCE,
                                             ci.TypeKind.RVALUEREFERENCE) and
                        not params[idx].get_pointee().is_const_qualified()):
                    return False
            return True
        refs = {ci.TypeKind.LVALUEREFERENCE, ci.TypeKind.RVALUEREFERENCE}
        if p.kind == K.VAR_DECL:   # an initializer: a copy, or a reference binding
            return not {p.type.kind, p.type.get_canonical().kind} & refs
        if p.kind in (K.CSTYLE_CAST_EXPR, K.CXX_STATIC_CAST_EXPR, K.CXX_FUNCTIONAL_CAST_EXPR):
            return not {p.type.kind, p.type.get_canonical().kind} & refs
        if p.kind in (K.IF_STMT, K.WHILE_STMT, K.DO_STMT, K.FOR_STMT, K.SWITCH_STMT,
                      K.RETURN_STMT, K.CASE_STMT):
            return True
        return False

    # ---- structure ----
    def is_barrier_stmt(self, s):
        ci = self.ci
        c = s
        while c.kind in (ci.CursorKind.UNEXPOSED_EXPR, ci.CursorKind.PAREN_EXPR) and \
                len(list(c.get_children())) == 1:
            c = next(c.get_children())
        return c.kind == ci.CursorKind.CALL_EXPR and (c.spelling in BLOCK_BARRIERS or (
            self._in_warp_if and c.hash in self.warp_syncs))

    def is_grid_barrier_stmt(self, s):
        """`tm_split_grid_sync();`: a grid.sync() lowered (split/lower.lower_block_groups)."""
        return self.is_barrier_stmt(s) and GRID_BARRIER in [t.spelling for t in s.get_tokens()]

    def is_warp_sync_stmt(self, s):
        """A `__syncwarp();` statement of the warp `if` (a stretch boundary)."""
        c = s
        while c.kind in (self.ci.CursorKind.UNEXPOSED_EXPR, self.ci.CursorKind.PAREN_EXPR) and \
                len(list(c.get_children())) == 1:
            c = next(c.get_children())
        return c.hash in self.warp_syncs

    def warp_if(self, s):
        return s.hash in self.warp_ifs

    def warp_if_stmts(self, s):
        """The statements of a warp `if`'s branch (one nested block is looked through)."""
        stmts = self.branch_stmts(list(s.get_children())[1])
        while len(stmts) == 1 and stmts[0].kind == self.ci.CursorKind.COMPOUND_STMT:
            stmts = list(stmts[0].get_children())
        return stmts

    def _find_warp_ifs(self, body):
        """The kernel's warp `if` (see __init__), if it has exactly one: no else branch, its
        branch's `__syncwarp()` calls (full mask) are top-level statements, its shuffles and
        votes are shuffle statements (_find_shuffles; in loops the thread loops go inside of:
        _assign_regions checks), and the branch holds no other synchronisation, no return,
        break, continue or loop exit. With more than one,
        lanes skipping one could meet another's __syncwarp on fibers: no split."""
        ci = self.ci
        found = []
        for s in self.walk(body):
            if s.kind != ci.CursorKind.IF_STMT or not any(
                    c.kind == ci.CursorKind.CALL_EXPR and (c.spelling == "__syncwarp" or
                                                           c.hash in self.shuffle_calls)
                    for c in self.walk(s)):
                continue
            kids = list(s.get_children())
            if len(kids) != 2 or not kids[0].kind.is_expression():
                continue
            syncs, ok, has_shuffle = set(), True, False
            for st in self.warp_if_stmts(s):
                c = st
                while c.kind in (ci.CursorKind.UNEXPOSED_EXPR, ci.CursorKind.PAREN_EXPR) and \
                        len(list(c.get_children())) == 1:
                    c = next(c.get_children())
                if c.kind == ci.CursorKind.CALL_EXPR and c.spelling == "__syncwarp":
                    toks = [t.spelling for t in c.get_tokens()]
                    if toks[1:] not in (["(", ")"], ["(", "0xffffffff", ")"],
                                        ["(", "0xffffffffu", ")"], ["(", "0xFFFFFFFF", ")"],
                                        ["(", "0xFFFFFFFFu", ")"]):
                        ok = False
                    syncs |= {x.hash for x in self.walk(st)}
                    continue
                # the shuffle statements' calls (and their callees' names) in `st`: a shuffle
                # statement, or a loop holding them
                shuffled = set()
                for c, _ in self.shuffle_calls.values():
                    if st.extent.start.offset <= c.extent.start.offset < st.extent.end.offset:
                        shuffled |= {c.hash} | {x.hash for x in
                                                self.walk(list(c.get_children())[0])}
                has_shuffle = has_shuffle or bool(shuffled)
                for x in self.walk(st):
                    if x.kind in (ci.CursorKind.DECL_REF_EXPR, ci.CursorKind.OVERLOADED_DECL_REF,
                                  ci.CursorKind.CALL_EXPR) and x.spelling in SYNC_NAMES and \
                            x.hash not in shuffled:
                        ok = False
                    if x.kind == ci.CursorKind.GOTO_STMT:
                        ok = False
                if self._exits([st]):   # return, break, continue, a __shared__ declaration
                    ok = False
            if ok and (syncs or has_shuffle) and self._first_warp_op_reached(s):
                found.append((s, syncs))
        if len(found) == 1:
            self.warp_ifs.add(found[0][0].hash)
            self.warp_syncs |= found[0][1]

    def _first_warp_op_reached(self, s):
        """Whether the lanes entering warp `if` `s` surely reach its first warp operation:
        at the top of the branch, or inside `for` loops whose headers hold only literals,
        warpSize and the loop's variable (tm_warp_sum's `for (offset = warpSize / 2; ...)`).
        The split checks the lanes' agreement before the branch and reports a disagreeing warp
        as stuck there; on fibers the lanes wait at that operation, so it must be reached (a
        loop of no iteration would make the report false)."""
        ci = self.ci
        first = min((c for c in self.walk(s) if c.kind == ci.CursorKind.CALL_EXPR and (
            c.spelling == "__syncwarp" or c.hash in self.shuffle_calls)),
            key=lambda c: c.extent.start.offset, default=None)
        if first is None:
            return False
        pos = first.extent.start.offset

        def around(c):
            """The statements between the branch and `first`."""
            for k in c.get_children():
                if k.extent.start.offset <= pos < k.extent.end.offset:
                    yield k
                    yield from around(k)
        for c in around(list(s.get_children())[1]):
            if c.kind in (ci.CursorKind.WHILE_STMT, ci.CursorKind.DO_STMT,
                          ci.CursorKind.CXX_FOR_RANGE_STMT, ci.CursorKind.IF_STMT,
                          ci.CursorKind.SWITCH_STMT, ci.CursorKind.CONDITIONAL_OPERATOR):
                return False
            if c.kind == ci.CursorKind.FOR_STMT:
                header, _, _ = self.for_parts(c)
                names = {d.spelling for h in header for d in self.walk(h)
                         if d.kind == ci.CursorKind.VAR_DECL}
                for h in header:
                    for t in h.get_tokens():
                        if t.kind == ci.TokenKind.IDENTIFIER and t.spelling not in names and \
                                t.spelling != "warpSize":
                            return False
        return True

    def _warp_predicate(self, cond):
        """Whether an `if`'s condition reads only threadIdx, uniform values and locals
        recomputed from them (nothing shared memory or the branch could change)."""
        return not self._reads_memory(cond) and \
            self._reads_thread_and_uniform(cond, self.recompute)

    def _reads_memory(self, expr):
        """Whether `expr` may read memory (a subscript, `*p`, `p->x`, a call but pure math):
        a value recomputed in a later thread loop would read it after the kernel's writes."""
        ci = self.ci
        for c in self.walk(expr):
            if c.kind == ci.CursorKind.ARRAY_SUBSCRIPT_EXPR:
                return True
            if c.kind == ci.CursorKind.CALL_EXPR and self.call_name(c) not in PURE_CALLS:
                kids = list(c.get_children())
                if not (kids and kids[0].kind == ci.CursorKind.TYPE_REF):   # T(x): a cast
                    return True
            if c.kind in (ci.CursorKind.UNARY_OPERATOR, ci.CursorKind.MEMBER_REF_EXPR):
                toks = [t.spelling for t in c.get_tokens()]
                if (c.kind == ci.CursorKind.UNARY_OPERATOR and toks[:1] == ["*"]) or "->" in toks:
                    return True
            if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None and \
                    c.referenced.type.kind in (ci.TypeKind.LVALUEREFERENCE,
                                               ci.TypeKind.RVALUEREFERENCE):
                return True
        return False

    def _reads_thread_and_uniform(self, expr, allowed):
        """Whether `expr` reads only threadIdx, block-uniform values and the variables whose
        declaration hashes are in `allowed`."""
        ci = self.ci
        for c in self.walk(expr):
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

    def has_barrier(self, s):
        """Whether `s` holds a __syncthreads() or a shuffle statement (both end a thread loop)."""
        return any(c.kind == self.ci.CursorKind.CALL_EXPR and (
            c.spelling in BLOCK_BARRIERS or c.hash in self.shuffle_calls) for c in self.walk(s))

    def has_barrier_in(self, extent):
        """Whether the body holds a barrier or shuffle call within (start, end) offsets (their
        offsets found in one walk of the body, for every question)."""
        if self._barrier_offsets is None:
            self._barrier_offsets = [
                c.extent.start.offset for c in self.walk(self.body)
                if c.kind == self.ci.CursorKind.CALL_EXPR and
                (c.spelling in BLOCK_BARRIERS or c.hash in self.shuffle_calls)]
        start, end = extent
        return any(start <= offset < end for offset in self._barrier_offsets)

    def is_shuffle_stmt(self, s):
        return s.hash in self.shuffle_stmts

    def callees(self, c):
        """The functions call `c` may call: the one it refers to, or, for a call a template
        leaves unresolved, every function of that name the parse declares (at file level and
        in namespaces: cuda::memcpy_async)."""
        ci = self.ci
        fn = c.referenced
        if fn is not None and fn.kind in (ci.CursorKind.FUNCTION_DECL,
                                          ci.CursorKind.FUNCTION_TEMPLATE):
            return [fn]
        name = self.call_name(c)
        return [d for d in self._declared(self.tu.cursor) if d.spelling == name] if name else []

    def call_name(self, c):
        """The called function's name; in a template, a dependent call's (libclang spells the
        call itself "")."""
        if c.spelling:
            return c.spelling
        kids = list(c.get_children())
        refs = [x for x in self.walk(kids[0]) if x.kind in (
            self.ci.CursorKind.OVERLOADED_DECL_REF, self.ci.CursorKind.DECL_REF_EXPR) and
            x.spelling] if kids else []
        return refs[0].spelling if refs else ""

    def shuffle_calls_of(self, s):
        """The shuffle statement's warp operations, in source order: [(cursor, name)]."""
        return sorted((v for v in self.shuffle_calls.values()
                       if s.extent.start.offset <= v[0].extent.start.offset < s.extent.end.offset),
                      key=lambda v: v[0].extent.start.offset)

    def _find_shuffles(self, body):
        """The statements whose shuffles and votes run as thread loops: a declaration of one
        variable or an expression statement, in statement position (the body, a loop's or an
        if's body; whether every lane of a warp reaches it is _assign_regions' check: no
        thread-dependent control around it), whose warp operations have a full mask, no
        explicit template arguments, and are not under `?:`, `&&` or `||` (a lane might skip
        one), and whose only side effect is its one top-level assignment (no ++, --, or calls
        but pure math): its arguments evaluated in one thread loop and the rest of the
        statement in the next give what the fibers give. In a kernel with a warp `if`
        (_find_warp_ifs) they may sit in its branch or before it, not after it (lanes skipping
        the `if` would meet them: _assign_regions). Anything else is left to _check_body (fibers)."""
        ci = self.ci
        for parent in self.walk(body):
            kids = list(parent.get_children())
            if parent.kind == ci.CursorKind.COMPOUND_STMT:
                cands = kids
            elif parent.kind == ci.CursorKind.FOR_STMT:
                cands = kids[-1:]
            elif parent.kind == ci.CursorKind.IF_STMT:
                cands = kids[1:]
            else:
                continue
            for st in cands:
                calls = [(c, self.call_name(c)) for c in self.walk(st)
                         if c.kind == ci.CursorKind.CALL_EXPR]
                ops = [(c, n) for c, n in calls if n in SHUFFLE_OPS or n in VOTE_OPS]
                if ops and self._shuffle_shape(st, calls, ops):
                    self.shuffle_stmts.add(st.hash)
                    self.shuffle_calls.update({c.hash: (c, n) for c, n in ops})

    def _shuffle_shape(self, st, calls, ops):
        ci = self.ci
        if st.kind == ci.CursorKind.DECL_STMT:
            if len(self.var_decls(st)) != 1:
                return False
        elif not st.kind.is_expression():
            return False
        spans = [(c.extent.start.offset, c.extent.end.offset) for c, _ in ops]

        def inside(c):
            return any(a <= c.extent.start.offset < b for a, b in spans)
        for c, n in ops:
            kids = list(c.get_children())
            if any(inside(o) and o.hash != c.hash and
                   kids[0].extent.end.offset <= o.extent.start.offset < c.extent.end.offset
                   for o, _ in ops):
                return False   # a warp operation in another's arguments
            if "<" in [t.spelling for t in kids[0].get_tokens()]:
                return False
            if len(kids) - 1 not in ((2,) if n in VOTE_OPS else (3, 4)):
                return False   # (libclang lists a default width as an argument)
            if not self._full_mask(kids[1]):
                return False
        for c, n in calls:
            if n in SHUFFLE_OPS or n in VOTE_OPS or n in PURE_CALLS:
                continue
            kids = list(c.get_children())
            if kids and kids[0].kind == ci.CursorKind.TYPE_REF:
                continue   # T(0): a functional cast
            return False
        refs = [x for x in self.walk(st) if x.kind in (ci.CursorKind.DECL_REF_EXPR,
                                                        ci.CursorKind.OVERLOADED_DECL_REF)
                and x.spelling in SYNC_NAMES]
        if len({x.extent.start.offset for x in refs}) != len(ops):
            return False   # another synchronisation, or a warp operation's name not called
        assigns = 0
        for t in st.get_tokens():
            if t.spelling in ("++", "--"):
                return False
            if t.spelling in _WRITE_AFTER:
                assigns += 1
                if any(a <= t.extent.start.offset < b for a, b in spans):
                    return False
            elif t.spelling in ("?", "&&", "||") and not any(
                    a <= t.extent.start.offset < b for a, b in spans):
                return False
        return assigns <= 1

    def _full_mask(self, expr):
        ci = self.ci
        if "".join(t.spelling for t in expr.get_tokens()) in FULL_MASKS:
            return True
        c = expr
        while c.kind == ci.CursorKind.UNEXPOSED_EXPR and len(list(c.get_children())) == 1:
            c = next(c.get_children())
        d = c.referenced if c.kind == ci.CursorKind.DECL_REF_EXPR else None
        if d is None or d.kind != ci.CursorKind.VAR_DECL or not d.type.is_const_qualified() or \
                d.location.file is None or d.location.file.name != SOURCE_NAME:
            return False
        t = d.type.get_canonical()
        if t.kind not in (ci.TypeKind.INT, ci.TypeKind.UINT, ci.TypeKind.LONG, ci.TypeKind.ULONG,
                          ci.TypeKind.LONGLONG, ci.TypeKind.ULONGLONG) or t.get_size() < 4:
            return False   # `const unsigned short M = 0xffffffffu;` holds 0xffff
        inits = [x for x in d.get_children() if x.kind.is_expression()]
        return bool(inits) and "".join(t.spelling for t in inits[-1].get_tokens()) in FULL_MASKS

    def is_shared_decl(self, s):
        if s.kind != self.ci.CursorKind.DECL_STMT:
            return False
        return any(a.kind == self.ci.CursorKind.ANNOTATE_ATTR and a.spelling == "tm_shared"
                   for d in self.var_decls(s) for a in d.get_children())

    def var_decls(self, s):
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
        for s in map(self.unwrap, stmts):
            if self.is_barrier_stmt(s):
                counter[0] += 1
                region = counter[0]
                continue
            if self.is_shared_decl(s):
                continue
            if self.is_shuffle_stmt(s):
                # its arguments are read in the thread loop before it (this region), the
                # statement runs in the next
                if seen_return or (self.warp_ifs_seen and not self._in_warp_if):
                    raise Fallback(f"a warp shuffle or vote after a return or after an if "
                                    f"holding warp operations (line {s.location.line})")
                for c, _ in self.shuffle_calls_of(s):
                    for arg in list(c.get_children())[1:]:
                        self._note_uses(arg, region)
                counter[0] += 1
                region = counter[0]
                if s.kind == ci.CursorKind.DECL_STMT:
                    self._place_decls(self._local_decls(s), region)
                self._note_uses(s, region)
                continue
            if self.warp_if(s) and not any(c.hash in self.warp_syncs for c in self.walk(s)) \
                    and self._uniform_expr(list(s.get_children())[0]):
                # only shuffles under a block-uniform condition (`if (n > 0)`): every warp takes
                # the same branch, a block-uniform if (split_ifs, below), after which shuffles
                # may follow
                self.warp_ifs.discard(s.hash)
            if self.warp_if(s):
                if self._loop_depth or self._in_warp_if or seen_return:
                    raise Fallback(f"__syncwarp under a loop or after a return (line "
                                    f"{s.location.line})")
                cond = list(s.get_children())[0]
                if not self._warp_predicate(cond):
                    raise Fallback(f"__syncwarp or a shuffle under an if whose condition reads "
                                    f"more than the thread's index and uniform values (line "
                                    f"{s.location.line})")
                self.warp_ifs_seen.add(s.hash)
                counter[0] += 1   # the predicate's thread loop
                for c in self.walk(cond):
                    if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None:
                        self.uses.setdefault(c.referenced.hash, set()).add(counter[0])
                counter[0] += 1
                self._in_warp_if = True
                self._assign_regions(self.warp_if_stmts(s), counter, top=False)
                self._in_warp_if = False
                counter[0] += 1
                region = counter[0]
                continue
            barrier_loop = s.kind == ci.CursorKind.FOR_STMT and self.has_barrier(s)
            if barrier_loop:
                self._check_uniform_for(s)
            if barrier_loop or s.hash in self.stepping or (
                    not seen_return and not self.has_barrier(s) and not self._in_warp_if and
                    self.interchange and self.hoistable(s)):
                self.hoisted.add(s.hash)
                counter[0] += 1
                header, body, inner = self.for_parts(s)
                for h in header:
                    for c in self.walk(h):
                        if c.kind == ci.CursorKind.VAR_DECL:
                            self.uniform.add(c.hash)
                self._loop_depth += 1
                self._assign_regions(inner, counter, top=False)
                self._loop_depth -= 1
                counter[0] += 1
                region = counter[0]
                continue
            if not seen_return and not self._in_warp_if and self._is_round_loop(s):
                # its variable, set in one thread loop and stepped in the next: per-thread
                init, cond, inc, body = s.get_children()
                counter[0] += 1
                for d in self.var_decls(init):
                    self.region_of[d.hash] = counter[0]
                    self.same_stmt[d.hash] = [d]
                for c in self.walk(init):
                    if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None:
                        self.uses.setdefault(c.referenced.hash, set()).add(counter[0])
                counter[0] += 1
                for part in (cond, inc, body):
                    for c in self.walk(part):
                        if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None:
                            self.uses.setdefault(c.referenced.hash, set()).add(counter[0])
                self.round_loops.add(s.hash)
                counter[0] += 1
                region = counter[0]
                continue
            if s.kind == ci.CursorKind.IF_STMT and self.has_barrier(s):
                self._check_uniform_if(s)
                self.split_ifs.add(s.hash)
                for branch in list(s.get_children())[1:]:
                    counter[0] += 1
                    self._assign_regions(self.branch_stmts(branch), counter, top=False)
                counter[0] += 1
                region = counter[0]
                continue
            seen_return = seen_return or any(c.kind == ci.CursorKind.RETURN_STMT
                                             for c in self.walk(s))
            if self.has_barrier(s):
                raise Fallback(self._barrier_place(s))
            if s.kind == ci.CursorKind.DECL_STMT:
                decls = self._local_decls(s)
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
                self._place_decls(decls, region)
            self._note_uses(s, region)

    def _barrier_place(self, s):
        """Why a barrier (or shuffle) inside statement `s` keeps the fibers, naming the
        construct `s` is: only `for` loops with a block-uniform header and `if`s with a
        block-uniform condition hold barriers in a split kernel (checked before this)."""
        ci, line = self.ci, s.location.line
        what = {ci.CursorKind.WHILE_STMT: "a while loop", ci.CursorKind.DO_STMT: "a do loop",
                ci.CursorKind.SWITCH_STMT: "a switch", ci.CursorKind.CXX_FOR_RANGE_STMT:
                "a range-based for loop", ci.CursorKind.COMPOUND_STMT: "a nested { } block",
                ci.CursorKind.CXX_TRY_STMT: "a try block"}.get(s.kind)
        if what is None and s.kind.is_statement() and s.kind != ci.CursorKind.DECL_STMT and \
                s.kind != ci.CursorKind.UNEXPOSED_STMT:
            what = f"a {s.kind.name.lower().replace('_stmt', '')} statement"
        if what is None:
            what = "an expression (not a statement of its own)"
        return f"{self._sync_word(s)} inside {what} (line {line}): only block-uniform for " \
               "loops and ifs around one split"

    def _sync_word(self, s):
        """What in `s` ends a thread loop: a barrier, or only warp shuffles and votes."""
        return "a barrier" if any(c.kind == self.ci.CursorKind.CALL_EXPR and
                                  c.spelling in BLOCK_BARRIERS for c in self.walk(s)) \
            else "a warp shuffle or vote"

    def _local_decls(self, s):
        """The variables declaration statement `s` declares; a static one keeps the fibers."""
        decls = self.var_decls(s)
        if any(d.storage_class == self.ci.StorageClass.STATIC for d in decls):
            raise Fallback(f"a static local variable (line {s.location.line}): one for all "
                            "threads")
        return decls

    def _place_decls(self, decls, region):
        """Declared in `region` (a per-thread array where used in another), with the variables
        of the same statement."""
        for d in decls:
            self.region_of[d.hash] = region
            self.same_stmt[d.hash] = decls

    def _note_uses(self, cursor, region):
        """Every variable `cursor` names is used in `region`."""
        for x in self.walk(cursor):
            if x.kind == self.ci.CursorKind.DECL_REF_EXPR and x.referenced is not None:
                self.uses.setdefault(x.referenced.hash, set()).add(region)

    def unwrap(self, s):
        """The for loop under `#pragma unroll` (libclang: an attributed statement holding it);
        the pragma is a hint the emulator's compiler does not need."""
        ci = self.ci
        kids = list(s.get_children()) if s.kind == ci.CursorKind.UNEXPOSED_STMT else []
        if len(kids) == 1 and kids[0].kind == ci.CursorKind.FOR_STMT:
            return kids[0]
        return s

    def branch_stmts(self, branch):
        """The statements of an if's branch (a compound statement or one statement)."""
        if branch.kind == self.ci.CursorKind.COMPOUND_STMT:
            return list(branch.get_children())
        return [branch]

    def split_if(self, s):
        """Whether `s` is an `if` holding barriers whose condition is block-uniform: the thread
        loops go inside its branches."""
        return s.hash in self.split_ifs

    def _check_uniform_if(self, s):
        kids = list(s.get_children())
        if len(kids) not in (2, 3) or not kids[0].kind.is_expression():
            raise Fallback(f"{self._sync_word(s)} inside an if with a declaration in its "
                           f"condition (line {s.location.line})")
        if not self._uniform_expr(kids[0]):
            raise Fallback(f"{self._sync_word(s)} inside an if whose condition may differ "
                           f"between threads (line {s.location.line}): it reads the thread "
                           "index, memory, or a value that varies by thread")

    def for_parts(self, s):
        """(header cursors, body cursor, body statements) of a for loop."""
        kids = list(s.get_children())
        body = kids[-1]
        stmts = list(body.get_children()) if body.kind == self.ci.CursorKind.COMPOUND_STMT \
            else [body]
        return kids[:-1], body, stmts

    def split_loop(self, s):
        """Whether `s` is a loop the thread loops go inside of: one with barriers, or (design
        1's interchange) a barrier-free loop with a block-uniform header and no exit from its
        body, so that `for k { for threads { body } }` runs each thread's iterations in order
        and the compiler can vectorise across threads (decided once per loop, in order)."""
        return s.hash in self.hoisted

    def hoistable(self, s):
        ci = self.ci
        if s.kind != ci.CursorKind.FOR_STMT:
            return False
        header, body, stmts = self.for_parts(s)
        if len(header) != 3 or self._uniform_for_problem(s) is not None:
            return False
        loops = (ci.CursorKind.FOR_STMT, ci.CursorKind.WHILE_STMT, ci.CursorKind.DO_STMT,
                 ci.CursorKind.CXX_FOR_RANGE_STMT)
        if any(c.kind in loops for b in stmts for c in self.walk(b)):
            # a loop nest (regtile's k step over its TM x TN register tile) stays inside the
            # thread loop: its inner loops vectorise within the thread and its locals stay the
            # thread's own; interchanged, they became per-thread arrays reached with a stride
            # (regtile: 3x slower than its fibers, benchmarks/emu_notes.md)
            return False
        return not self._exits(stmts)

    def loop_vars(self, s):
        """The VAR_DECL hashes for loop `s`'s header declares (its counters)."""
        return {c.hash for h in self.for_parts(s)[0] for c in self.walk(h)
                if c.kind == self.ci.CursorKind.VAR_DECL}

    def runtime_trips(self, s):
        """Whether loop `s`'s condition reads a variable or parameter other than its counter
        (`k < n`), not only constants (`k < TILE`): a loop as long as the data."""
        ci = self.ci
        header = self.for_parts(s)[0]
        if len(header) != 3:
            return False
        counters = self.loop_vars(s)
        return any(c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None and
                   c.referenced.hash not in counters and
                   c.referenced.kind in (ci.CursorKind.PARM_DECL, ci.CursorKind.VAR_DECL)
                   for c in self.walk(header[1]))

    def chunkable(self, s):
        """Whether the threads run a hoisted barrier-free loop in chunks of a few threads, each
        chunk all its iterations before the next (_thread_loop's strip): its body writes only
        per-thread variables and locals of its own, so nothing another thread reads changes
        while it runs (warp-synchronous code that writes shared memory keeps every thread's
        iteration k before any thread's k + 1), and it carries a value from one iteration to
        the next in the same place (`sum += ...`), which the chunk keeps in registers (a loop
        that only stores, `sum[c] = 0`, gains nothing: coarse 32 ran 0.7x chunked)."""
        ci, K = self.ci, self.ci.CursorKind
        refs = (ci.TypeKind.POINTER, ci.TypeKind.LVALUEREFERENCE, ci.TypeKind.RVALUEREFERENCE)
        header, body, inner = self.for_parts(s)
        own = set()
        for c in self.walk(body):
            if c.kind == K.VAR_DECL:
                if c.type.get_canonical().kind in refs:
                    return False   # an alias of something else's memory
                own.add(c.hash)

        def thread_state(target):   # an element or member of a variable of the thread's own
            while True:   # (not through a pointer: the variable is not one)
                kids = list(target.get_children())
                if target.kind == K.DECL_REF_EXPR:
                    v = target.referenced
                    return v is not None and (v.hash in self.live_types or v.hash in own) and \
                        v.type.get_canonical().kind not in refs
                if target.kind not in (K.PAREN_EXPR, K.UNEXPOSED_EXPR, K.ARRAY_SUBSCRIPT_EXPR,
                                       K.MEMBER_REF_EXPR) or not kids:
                    return False
                target = kids[0]

        counters = self.loop_vars(s)

        def refs_of(c):
            return {r.referenced.hash for r in self.walk(c)
                    if r.kind == K.DECL_REF_EXPR and r.referenced is not None}

        carried = False   # a value of the thread's that the next iteration reads again
        for c in self.walk(body):
            kids = list(c.get_children())
            target = None
            if c.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR) and len(kids) == 2:
                op = self._op_token(c, kids[0])
                if op not in _WRITE_AFTER:
                    continue
                target = kids[0]
                read_again = op != "=" or bool(refs_of(target) & refs_of(kids[1]))
            elif c.kind == K.UNARY_OPERATOR and kids:
                op = [t.spelling for t in c.get_tokens()]
                if "&" in op[:1]:
                    return False
                if "++" not in op and "--" not in op:
                    continue
                target, read_again = kids[0], True
            if target is None:
                continue
            if not thread_state(target):
                return False
            # the same element every iteration (not indexed by the loop's own counter)
            carried |= read_again and not refs_of(target) & counters
        return carried

    def round_loop(self, s):
        """Whether `s` runs as rounds over the threads (see _is_round_loop)."""
        return s.hash in self.round_loops

    def _is_round_loop(self, s):
        """A barrier-free `for` whose header depends on the thread only through its start
        (`for (long long i = tid; i < n; i += blockDim.x)`: a uniform bound and step, a variable
        the body never writes, no exit from the body): it can run as rounds outer, threads
        inner (`while any thread is active: for threads: if (i < n) { body; i += step; }`),
        one of the interleavings a GPU may run, so that neighbouring threads' iterations sit
        side by side (consecutive addresses) instead of one thread's whole chain at a time."""
        ci = self.ci
        if s.kind != ci.CursorKind.FOR_STMT or self.has_barrier(s):
            return False
        header, body, stmts = self.for_parts(s)
        if len(header) != 3 or header[0].kind != ci.CursorKind.DECL_STMT:
            return False
        decls = self.var_decls(header[0])
        if len(decls) != 1 or decls[0].type.kind not in _SCALAR_KINDS or \
                not header[1].kind.is_expression() or not header[2].kind.is_expression():
            return False
        var = {decls[0].hash}
        if not (self._uniform_expr(header[1], var) and self._uniform_expr(header[2], var)):
            return False
        # the condition is evaluated once more per thread at each round's end: no side effect;
        # the step is exactly `i += stride`, the stride free of side effects
        if any(t.spelling in _WRITE_AFTER for t in header[1].get_tokens()) or \
                header[2].kind != ci.CursorKind.COMPOUND_ASSIGNMENT_OPERATOR:
            return False
        lhs, step = list(header[2].get_children())
        while lhs.kind in (ci.CursorKind.UNEXPOSED_EXPR, ci.CursorKind.PAREN_EXPR) and \
                len(list(lhs.get_children())) == 1:
            lhs = next(lhs.get_children())
        if lhs.kind != ci.CursorKind.DECL_REF_EXPR or lhs.referenced is None or \
                lhs.referenced.hash not in var or self._op_token(header[2], lhs) != "+=" or \
                any(t.spelling in _WRITE_AFTER for t in step.get_tokens()):
            return False
        inits = [c for c in decls[0].get_children() if c.kind.is_expression()]
        if not inits or self._uniform_expr(inits[-1]):
            return False   # a start every thread shares (no interleaving to gain)
        # a bound of the data's size (a parameter or a local: n, count), not a compile-time
        # one: tile loads (`for (e = t; e < BM * BK; e += THREADS)`) take a few iterations per
        # thread, and rounds there cost more than they gain (regtile, colmajor_b, coarse: 1.5-2.5x
        # slower, benchmarks/emu_notes.md)
        if not any(c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None and
                   c.referenced.hash not in var and
                   c.referenced.kind in (ci.CursorKind.PARM_DECL, ci.CursorKind.VAR_DECL) and
                   c.referenced.location.file is not None and
                   c.referenced.location.file.name == SOURCE_NAME and
                   not self._constant_local(c.referenced)
                   for c in self.walk(header[1])):
            return False
        if var & self.writes_in(body) or self._exits(stmts):
            return False
        return True

    def _constant_local(self, d):
        """A const local initialised from literals, template parameters and enumerators only
        (`const int TILE = 32;`, `const int THREADS = (BM / TM) * (BN / TN);`)."""
        ci = self.ci
        if d.kind != ci.CursorKind.VAR_DECL or not d.type.is_const_qualified():
            return False
        inits = [c for c in d.get_children() if c.kind.is_expression()]
        constants = (ci.CursorKind.TEMPLATE_NON_TYPE_PARAMETER, ci.CursorKind.ENUM_CONSTANT_DECL)
        return bool(inits) and all(
            c.kind != ci.CursorKind.DECL_REF_EXPR or
            (c.referenced is not None and c.referenced.kind in constants)
            for c in self.walk(inits[-1]))

    def _exits(self, stmts):
        """Whether a loop body (`stmts`) leaves the loop (return, break, continue) or declares
        shared memory, which must stay at the block level."""
        ci = self.ci
        loops = (ci.CursorKind.FOR_STMT, ci.CursorKind.WHILE_STMT, ci.CursorKind.DO_STMT,
                 ci.CursorKind.CXX_FOR_RANGE_STMT)

        def exits(c, depth_loop, depth_switch):
            if c.kind == ci.CursorKind.RETURN_STMT or (c.kind == ci.CursorKind.DECL_STMT and
                                                      self.is_shared_decl(c)):
                return True
            if c.kind == ci.CursorKind.CONTINUE_STMT and depth_loop == 0:
                return True
            if c.kind == ci.CursorKind.BREAK_STMT and depth_loop == 0 and depth_switch == 0:
                return True
            return any(exits(k, depth_loop + (c.kind in loops), depth_switch +
                             (c.kind == ci.CursorKind.SWITCH_STMT)) for k in c.get_children())
        return any(exits(b, 0, 0) for b in stmts)

    def _uniform_expr(self, cursor, allowed=()):
        ci = self.ci
        for c in self.walk(cursor):
            if c.kind == ci.CursorKind.CALL_EXPR and c.spelling not in PURE_CALLS and not (
                    c.referenced is not None and c.referenced.kind == ci.CursorKind.CONSTRUCTOR
                    and c.referenced.location.file is not None and
                    c.referenced.location.file.name == PRELUDE_NAME):
                return False   # a helper or clock64() could return anything (a prelude type's
                # constructor, cuda::aligned_size_t<16>(16), is its arguments' value)
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
            if self._reads_memory(inits[-1]) or \
                    not self._reads_thread_and_uniform(inits[-1], allowed):
                return False
        return True

    def _uniform_decl(self, d):
        if d.hash in self.written or d.type.kind in _ARRAY_KINDS:
            return False   # (a dependent array's size expression is no initializer)
        inits = [c for c in d.get_children() if c.kind.is_expression()]
        return bool(inits) and self._uniform_expr(inits[-1])

    def _uniform_for_problem(self, s):
        """Why the loop's trip count may differ between threads, or None."""
        header, body, stmts = self.for_parts(s)
        loop_vars = self.loop_vars(s)
        for h in header:
            if not self._uniform_expr(h, loop_vars):
                return (f"a barrier inside a loop whose trip count may differ between "
                        f"threads (line {s.location.line})")
        if loop_vars & self.writes_in(body):
            stepping = [st for st in map(self.unwrap, stmts) if self._steps(st, loop_vars)]
            rest = set()
            for st in map(self.unwrap, stmts):
                rest |= self.writes_in(self.for_parts(st)[1] if st in stepping else st)
            if loop_vars & rest:
                return f"the loop at line {s.location.line} changes its variable inside its body"
            self.stepping.update(st.hash for st in stepping)
        return None

    def _steps(self, s, loop_vars):
        """Whether `s` is a barrier-free `for (; cond; step)` whose header alone writes the
        enclosing loop's variables (`loop_vars`), reading only those and block-uniform values,
        and whose body writes nothing its header reads, holds no loop and does not leave
        (NVIDIA's globalToShmemAsyncCopy fills its pipeline ahead in `for (; aStage <= a +
        aStep * stages; aStage += aStep, ...)`): it runs at block level (stepping), the
        thread loops inside it, so that the block steps those variables once."""
        ci = self.ci
        if s.kind != ci.CursorKind.FOR_STMT or self.has_barrier(s):
            return False
        header, body, stmts = self.for_parts(s)
        tokens = [t.spelling for t in s.get_tokens()][:3]
        if len(header) != 2 or tokens[1:3] != ["(", ";"] or \
                not all(h.kind.is_expression() for h in header):
            return False   # (the condition and the step, no initialisation)
        cond, step = header
        read = {c.referenced.hash for h in header for c in self.walk(h)
                if c.kind == ci.CursorKind.DECL_REF_EXPR and c.referenced is not None}
        loops = (ci.CursorKind.FOR_STMT, ci.CursorKind.WHILE_STMT, ci.CursorKind.DO_STMT,
                 ci.CursorKind.CXX_FOR_RANGE_STMT)
        return self._uniform_expr(cond, loop_vars) and self._uniform_expr(step, loop_vars) and \
            not self.writes_in(cond) and self.writes_in(step) <= loop_vars and \
            not read & self.writes_in(body) and not self._exits(stmts) and \
            not any(c.kind in loops for b in stmts for c in self.walk(b))

    def _check_uniform_for(self, s):
        problem = self._uniform_for_problem(s)
        if problem is not None:
            raise Fallback(problem)

    def writes_in(self, body):
        saved = self.written
        self.written = set()
        self._find_writes(body)
        w, self.written = self.written, saved
        return w


_ARRAY_KINDS = set()    # filled from clang.cindex's TypeKind, when it loads
_SCALAR_KINDS = set()   # filled below from clang.cindex's TypeKind, when it loads


def kernel_names(source):
    """The names of the kernels `source` defines (libclang; templates included)."""
    ci = cindex()
    index = ci.Index.create()
    tu = index.parse(SOURCE_NAME, args=["-x", "c++", "-std=c++17", "-nostdinc", "-nostdinc++",
                                        "-include", PRELUDE_NAME],
                     unsaved_files=[(SOURCE_NAME, INCLUDE_RE.sub(
                         lambda m: " " * len(m.group(0)), source)),
                         (PRELUDE_NAME, _BODY_PRELUDE)],
                     options=ci.TranslationUnit.PARSE_INCOMPLETE)
    return sorted({c.spelling for c in kernel_cursors(ci, tu.cursor) if c.is_definition()})
