"""Which of the assignment's arguments each kernel parameter receives, for tm.grade and for
tm.grade_matmul / tm.grade_reduce alike. In this order, the first that fits:
1. by name: every parameter is one of the assignment's names or aliases, each array argument
   taken once;
2. arrays by position, numbers by name: the pointer parameters take the assignment's arrays in
   its order, the other parameters are sizes named as the assignment names them (with
   pass_scalars, a number no size is named like comes from each launch pass's dict);
3. by position: the assignment's order, or that order without its sizes for a kernel that takes
   none.
A caller may instead give a function of the assignment's values (tm.grade_matmul's args=):
`Mapping.by_function`."""
from .assignment import Arg

__all__ = ["Mapping", "match_arguments"]


def _takes_array(param):
    return bool(getattr(param, "takes_array", getattr(param, "pointer", False)))


class Mapping:
    """`order`: the assignment's Arg for each kernel parameter; `how`: 'name', 'position
    (arrays) and name (numbers)', 'position' or 'args='; `text`: what the report says;
    `arguments(values, scalars)`: the kernel's arguments for one launch."""

    def __init__(self, params, order, how, function=None, args=()):
        self.params, self.order, self.how = list(params), list(order), how
        self.function, self.args = function, list(args)
        if function is not None:
            self.text = f"by {how}"
        else:
            pairs = ", ".join(p.name if p.name == a.name else f"{p.name}={a.name}"
                              for p, a in zip(self.params, self.order))
            self.text = f"by {how}: ({pairs})"

    @classmethod
    def by_function(cls, params, args, function):
        """The kernel's arguments are function(*the assignment's values in its order,
        **the pass's scalars)."""
        return cls(params, [], "args=", function, args)

    def size_names(self, sizes):
        """The kernel's own names for the sizes (Width, n, ...), for launch expressions."""
        return {p.name: sizes[a.name] for p, a in zip(self.params, self.order)
                if a.kind == "size" and a.name in sizes}

    def array_dtypes(self):
        """{argument name: the float dtype the kernel's pointer says}, where it says one."""
        return {a.name: p.dtype for p, a in zip(self.params, self.order)
                if a.is_array and getattr(p, "dtype", None) is not None and p.dtype.kind == "f"}

    def arguments(self, values, scalars=None):
        """The kernel's arguments for one launch: `values` by the assignment's names, `scalars`
        the launch pass's own (a reduction's depth, ...)."""
        scalars = scalars or {}
        if self.function is not None:
            return tuple(self.function(*(values[a.name] for a in self.args), **scalars))
        missing = [a.name for a in self.order if a.kind == "pass" and a.name not in scalars]
        if missing:
            raise ValueError(f"cannot tell what to pass for {', '.join(map(repr, missing))}: "
                             f"give it in each pass, e.g. launch=lambda n: [(grid, block, "
                             f"shared_bytes, {{{missing[0]!r}: value}})]")
        return tuple(scalars[a.name] if a.kind == "pass" else values[a.name]
                     for a in self.order)


def _fits(param, arg):
    return _takes_array(param) == arg.is_array


def _by_name(params, args):
    order = []
    for p in params:
        hits = [a for a in args if p.name in a.aliases]
        if len(hits) != 1 or not _fits(p, hits[0]) or hits[0] in order:
            return None
        order.append(hits[0])
    if any(a.is_array and a not in order for a in args):
        return None
    return order


def _arrays_by_position(params, args, pass_scalars):
    arrays = [a for a in args if a.is_array]
    if sum(map(_takes_array, params)) != len(arrays):
        return None
    order, next_array = [], iter(arrays)
    for p in params:
        if _takes_array(p):
            order.append(next(next_array))
            continue
        hits = [a for a in args if not a.is_array and p.name in a.aliases]
        if len(hits) == 1:
            order.append(hits[0])
        elif pass_scalars and not hits:
            order.append(Arg(p.name, "pass"))
        else:
            return None
    return order


def match_arguments(params, args, pass_scalars=False):
    """A Mapping, or ValueError saying why the kernel's parameters fit none. pass_scalars: a
    number parameter that matches no argument is given by each launch pass (Arg kind 'pass')."""
    params = list(params)
    order = _by_name(params, args)
    if order is not None:
        return Mapping(params, order, "name")
    order = _arrays_by_position(params, args, pass_scalars)
    if order is not None:
        return Mapping(params, order, "position (arrays) and name (numbers)")
    for candidate in (list(args), [a for a in args if a.kind != "size"]):
        if len(candidate) == len(params) and all(_fits(p, a) for p, a in zip(params, candidate)):
            return Mapping(params, candidate, "position")
    want = ", ".join(f"{a.name} ({'array' if a.is_array else 'number'})" for a in args)
    have = ", ".join(p.decl() if hasattr(p, "decl") else p.name for p in params)
    raise ValueError(f"cannot match the kernel's parameters ({have}) to the assignment's "
                     f"arguments ({want}): name them as the assignment does, or take them in "
                     "this order")
