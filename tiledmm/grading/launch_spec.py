"""A launch configuration written as text: the assignment's, or the one a submission declares.

A submission may declare its own launch in comment lines anywhere in the file

    // tiledmm-grade: block (16, 16)
    // tiledmm-grade: grid (cdiv(N, 16), cdiv(M, 16))
    // tiledmm-grade: shared 2 * 16 * 16 * 4
    // tiledmm-grade: define TILE_WIDTH=16
    // tiledmm-grade: kernel MatrixMulKernel

or in a sidecar file beside it, `SUBMISSION.launch` (for `mm.cu`, `mm.launch`), holding the same
`key value` lines (a colon after the key is allowed; `#` starts a comment). The sidecar's lines
override the comments'; what neither gives comes from the assignment. Keys: `grid`, `block`,
`shared` (bytes of dynamic shared memory), `define NAME=VALUE` (repeatable, a -D option),
`kernel` (the `__global__` function to grade).

`grid`, `block` and `shared` are arithmetic expressions of the case's sizes, by the assignment's
names (M, N, K; n; Width ...) and by the kernel's own parameter names: integers, + - * / // %,
parentheses, tuples and the functions cdiv(a, b) (ceiling division), ceil, floor, min, max, int.
Nothing else is evaluated: no attributes, no other names, no strings.
"""
import ast
import math
import os
import re

from ..confine.sandbox import read_bounded

__all__ = ["LaunchSpec", "LaunchFunction", "evaluate", "read_declared"]

PREFIX = "tiledmm-grade:"
KEYS = ("grid", "block", "shared", "define", "kernel")
_FUNCTIONS = {"cdiv": lambda a, b: -(-int(a) // int(b)), "ceil": math.ceil, "floor": math.floor,
              "min": min, "max": max, "int": int}
_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


# Bounds on a launch expression (a submission writes them; the grader evaluates them): its
# length, its nesting, the size of any number, tuples of at most 3 numbers
EXPR_MOST, DEPTH_MOST, NUMBER_MOST = 1000, 50, 1 << 62


def evaluate(text, names):
    """The value of the arithmetic expression `text` with `names` (a dict of numbers).
    Raises ValueError saying what is not allowed (and for any expression out of bounds: longer
    than EXPR_MOST characters, nested deeper than DEPTH_MOST, a number beyond NUMBER_MOST)."""
    text = str(text).strip()
    if len(text) > EXPR_MOST:
        raise ValueError(f"a launch expression of {len(text)} characters (at most {EXPR_MOST})")
    try:
        tree = ast.parse(text, mode="eval")
        return _checked(_eval(tree.body, names, text, 0), text)
    except (SyntaxError, MemoryError, RecursionError):
        raise ValueError(f"cannot read {text[:80]!r} as an expression") from None
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"{text[:80]!r}: {exc}") from None


def _checked(value, text):
    """A number within NUMBER_MOST, finite, or a tuple of at most 3 of them."""
    if isinstance(value, tuple):
        if len(value) > 3:
            raise ValueError(f"{text[:80]!r}: a tuple of {len(value)} (at most 3 dimensions)")
        return tuple(_checked(v, text) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{text[:80]!r}: not a number")
    if isinstance(value, float) and not math.isfinite(value) or abs(value) > NUMBER_MOST:
        raise ValueError(f"{text[:80]!r}: a number out of range ({value!r:.40})")
    return value


def _eval(node, names, text, depth):
    if depth > DEPTH_MOST:
        raise ValueError(f"{text[:80]!r}: nested deeper than {DEPTH_MOST}")
    value = _eval_node(node, names, text, depth + 1)
    return _checked(value, text)


def _eval_node(node, names, text, depth):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in names:
            return names[node.id]
        raise ValueError(f"{text!r}: unknown name {node.id!r} (known: {', '.join(sorted(names))})")
    if isinstance(node, ast.Tuple):
        if len(node.elts) > 3:
            raise ValueError(f"{text[:80]!r}: a tuple of {len(node.elts)} (at most 3)")
        return tuple(_eval(e, names, text, depth) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, names, text, depth)
        if isinstance(value, tuple):
            raise ValueError(f"{text[:80]!r}: arithmetic on a tuple")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left, names, text, depth), _eval(node.right, names, text, depth)
        if isinstance(left, tuple) or isinstance(right, tuple):
            raise ValueError(f"{text[:80]!r}: arithmetic on a tuple")
        try:
            return _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError(f"{text!r}: division by zero") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in _FUNCTIONS and not node.keywords:
        if len(node.args) > 8:
            raise ValueError(f"{text[:80]!r}: too many arguments")
        args = [_eval(a, names, text, depth) for a in node.args]
        try:
            return _FUNCTIONS[node.func.id](*args)
        except (TypeError, ZeroDivisionError, OverflowError, ValueError) as exc:
            raise ValueError(f"{text!r}: {exc}") from None
    raise ValueError(f"{text!r}: only numbers, names of sizes, + - * / // %, tuples and "
                     f"{', '.join(_FUNCTIONS)} are allowed")


def _dims(value, what, text):
    dims = value if isinstance(value, tuple) else (value,)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} {text!r} must give 1 to 3 dimensions, got {value!r}")
    out = []
    for d in dims:
        if isinstance(d, float):
            if not d.is_integer():
                raise ValueError(f"{what} {text!r} gives {d!r}, not a whole number (use cdiv or "
                                 "ceil)")
            d = int(d)
        if d < 0:
            raise ValueError(f"{what} {text!r} gives a negative dimension {d}")
        out.append(int(d))
    return tuple(out)


class LaunchSpec:
    """grid / block / shared as expressions (strings) or callables of the sizes; `origin` says
    where they came from."""

    def __init__(self, grid, block, shared=0, origin="assignment"):
        self.grid, self.block, self.shared, self.origin = grid, block, shared, origin

    def resolve(self, names):
        """(grid, block, shared_bytes) for a case's names (sizes and kernel parameter names)."""
        out = []
        for what in ("grid", "block", "shared"):
            spec = getattr(self, what)
            value = spec(**names) if callable(spec) else evaluate(spec, names) \
                if isinstance(spec, str) else spec
            if what == "shared":
                value = _dims(value, what, spec)
                if len(value) != 1:
                    raise ValueError(f"shared {spec!r} must be one number of bytes")
                value = value[0]
            else:
                value = _dims(value, what, spec)
            out.append(value)
        return tuple(out)

    def passes(self, names):
        """[(grid, block, shared_bytes, {})]: one launch."""
        return [(*self.resolve(names), {})]

    def describe(self):
        """The spec as one line of text."""
        def text(v):
            return getattr(v, "__name__", "a function") if callable(v) else str(v)
        return f"grid {text(self.grid)}, block {text(self.block)}, shared {text(self.shared)}"

    def overridden(self, declared, origin):
        """A copy with the keys a submission declared replacing the assignment's."""
        if not any(k in declared for k in ("grid", "block", "shared")):
            return self
        return LaunchSpec(declared.get("grid", self.grid), declared.get("block", self.block),
                          declared.get("shared", self.shared), origin)


_PASS_FORMS = ("a pass is (grid, block), (grid, block, shared_bytes), or either with a dict of "
               "scalar arguments at the end; several passes are a list of them")


class LaunchFunction:
    """A launch as a Python function of the case's sizes, in the assignment's order of its
    'size' arguments: `fn(M, N, K)` -> (grid, block) or (grid, block, shared_bytes). With
    passes=True (a reduction's host loop) it may return one pass or a list of passes, launched
    in order on the same arrays, each either form with a dict of the kernel's other scalar
    arguments for that pass at the end; an empty list launches nothing."""

    def __init__(self, fn, size_names, passes=False):
        self.fn, self.size_names, self.several = fn, tuple(size_names), passes
        self.origin = "launch="

    def _call(self, names):
        args = ", ".join(str(names[n]) for n in self.size_names)
        return f"launch({args})", self.fn(*(names[n] for n in self.size_names))

    def passes(self, names):
        """[(grid, block, shared_bytes, scalars)], dimensions checked as LaunchSpec checks."""
        call, config = self._call(names)
        if not self.several:
            if not isinstance(config, tuple) or len(config) not in (2, 3):
                raise ValueError(f"{call} must return (grid, block) or (grid, block, "
                                 f"shared_bytes), got {config!r}")
            config = [config]
        elif isinstance(config, tuple):
            config = [config]
        elif isinstance(config, (str, bytes, dict)) or not hasattr(config, "__iter__"):
            raise ValueError(f"{call} must return one pass or a list of passes ({_PASS_FORMS}),"
                             f" got {config!r}")
        out = []
        for p in config:
            if not isinstance(p, tuple):
                raise ValueError(f"{call}: {_PASS_FORMS}; got {p!r}")
            scalars = {}
            if p and isinstance(p[-1], dict) and self.several:
                p, scalars = p[:-1], p[-1]
            if len(p) not in (2, 3):
                raise ValueError(f"{call}: {_PASS_FORMS}; got {p!r}")
            shared = _dims(p[2] if len(p) == 3 else 0, "shared", call)
            if len(shared) != 1:
                raise ValueError(f"{call}: shared_bytes must be one number, got {p[2]!r}")
            out.append((_dims(_tuple(p[0]), "grid", call), _dims(_tuple(p[1]), "block", call),
                        shared[0], dict(scalars)))
        return out

    def describe(self):
        return f"{getattr(self.fn, '__name__', 'a function')}({', '.join(self.size_names)})"

    def overridden(self, declared, origin):
        """A submission's declared launch replaces the function whole (grid and block both)."""
        if not any(k in declared for k in ("grid", "block", "shared")):
            return self
        if not all(k in declared for k in ("grid", "block")):
            raise ValueError("a submission graded with a launch= function must declare both its "
                             "grid and its block, or neither")
        return LaunchSpec(declared["grid"], declared["block"], declared.get("shared", 0), origin)


def _tuple(value):
    """A grid or block as launch functions write it: a number, a tuple or a list."""
    return tuple(value) if isinstance(value, list) else value


def _parse_lines(lines, where):
    """{'grid': text, 'block': text, 'shared': text, 'kernel': name, 'define': [...]}"""
    found = {}
    for number, line in lines:
        m = re.match(r"\s*([A-Za-z_]+)\s*:?\s*(.*?)\s*$", line)
        if not m or not m.group(1):
            continue
        key, value = m.group(1).lower(), m.group(2)
        if key not in KEYS:
            raise ValueError(f"{where}:{number}: unknown launch key {key!r} (known: "
                             f"{', '.join(KEYS)})")
        if not value:
            raise ValueError(f"{where}:{number}: {key} needs a value")
        if key == "define":
            if not re.fullmatch(r"[A-Za-z_]\w*(=[^\s]+)?", value):
                raise ValueError(f"{where}:{number}: define {value!r} must be NAME or NAME=VALUE")
            found.setdefault("define", []).append(value)
        else:
            found[key] = value
    return found


def sidecar_path(path):
    """SUBMISSION.launch beside SUBMISSION.cu."""
    return os.path.splitext(path)[0] + ".launch"


def read_declared(source, path=None):
    """(what the submission declares, where from): its `// tiledmm-grade:` comments, then the
    sidecar file's lines over them. `where` is 'submission comments', 'sidecar file NAME', both
    joined by ' + ', or '' when it declares nothing."""
    lines = []
    for number, line in enumerate(source.splitlines(), 1):
        m = re.match(r"\s*//\s*" + re.escape(PREFIX) + r"(.*)$", line)
        if m:
            lines.append((number, m.group(1)))
    declared = _parse_lines(lines, os.path.basename(path) if path else "submission")
    origins = ["submission comments"] if declared else []
    side = sidecar_path(path) if path else None
    if side and os.path.lexists(side):
        try:   # the submission's folder: no link followed, no FIFO waited on, bounded
            text = read_bounded(side, 65536, whole=True).decode("utf-8", errors="replace")
        except OSError as exc:
            raise ValueError(f"cannot read the sidecar file {os.path.basename(side)}: "
                             f"{exc.strerror or exc}") from None
        side_lines = [(i, ln.split("#", 1)[0]) for i, ln in enumerate(text.splitlines(), 1)]
        more = _parse_lines([(i, ln) for i, ln in side_lines if ln.strip()],
                            os.path.basename(side))
        defines = declared.get("define", []) + more.pop("define", [])
        declared.update(more)
        if defines:
            declared["define"] = defines
        origins.append(f"sidecar file {os.path.basename(side)}")
    return declared, " + ".join(origins)
