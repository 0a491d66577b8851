"""Which of the assignment's arguments each kernel parameter receives: by name (every parameter
is one of the assignment's names or aliases, each array argument taken once), else by position
(the assignment's order, or that order without its sizes for a kernel that takes none)."""

__all__ = ["Mapping", "match_arguments"]


class Mapping:
    """`order`: the assignment's Arg for each kernel parameter; `how`: 'name' or 'position';
    `text`: what the report says."""

    def __init__(self, params, order, how):
        self.params, self.order, self.how = list(params), list(order), how
        pairs = ", ".join(p.name if p.name == a.name else f"{p.name}={a.name}"
                          for p, a in zip(params, order))
        self.text = f"by {how}: ({pairs})"

    def size_names(self, sizes):
        """The kernel's own names for the sizes (Width, n, ...), for launch expressions."""
        return {p.name: sizes[a.name] for p, a in zip(self.params, self.order)
                if a.kind == "size" and a.name in sizes}


def _fits(param, arg):
    return bool(getattr(param, "takes_array", getattr(param, "pointer", False))) == arg.is_array


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


def match_arguments(params, args):
    """A Mapping, or ValueError saying why the kernel's parameters fit none."""
    params = list(params)
    order = _by_name(params, args)
    if order is not None:
        return Mapping(params, order, "name")
    for candidate in (list(args), [a for a in args if a.kind != "size"]):
        if len(candidate) == len(params) and all(_fits(p, a) for p, a in zip(params, candidate)):
            return Mapping(params, candidate, "position")
    want = ", ".join(f"{a.name} ({'array' if a.is_array else 'number'})" for a in args)
    have = ", ".join(p.decl() if hasattr(p, "decl") else p.name for p in params)
    raise ValueError(f"cannot match the kernel's parameters ({have}) to the assignment's "
                     f"arguments ({want}): name them as the assignment does, or take them in "
                     "this order")
