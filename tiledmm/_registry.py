"""The kernel registry as Python sees it: one row per kernel, read from the compiled table in
cuda/registry.cu (both backends are built from it, so either one can answer)."""
import difflib
import html
import itertools
import operator
from dataclasses import dataclass
from typing import Tuple

from . import _backend


FAMILIES = ("matmul", "reduce", "elementwise")

# Kernels that only the cuda backend can run: cuBLAS and CUTLASS are NVIDIA's GPU libraries, and
# the emulator has neither (its launchers report cudaErrorNotSupported). `cutlass` is also built
# only where setup.py finds CUTLASS's headers (cuda/matmul_cutlass.cu).
# `tf32x3` is inline PTX (mma.sync on TF32 tensor cores), which the emulator does not run.
CUDA_ONLY = frozenset({"cublas", "cutlass", "tf32x3"})


@dataclass(frozen=True)
class Param:
    """One parameter of a kernel: its name (the keyword of the call), default, allowed values
    and a one-line meaning."""
    name: str
    default: int
    values: Tuple[int, ...]
    doc: str


@dataclass(frozen=True)
class KernelSpec:
    """One row of the kernel registry (cuda/registry.cu): name, family ('matmul', 'reduce',
    'elementwise'), dtypes it runs in, params (a tuple of Param: name, default, values, doc),
    the lecture it comes from, and a one-line summary. `str(spec)` is a readable block."""
    name: str
    family: str
    dtypes: Tuple[str, ...]
    params: Tuple[Param, ...]
    lecture: str
    summary: str

    def param_combinations(self):
        """Every combination of the parameters' allowed values, as keyword dicts (a kernel
        without parameters has one: the empty dict)."""
        names = [p.name for p in self.params]
        return [dict(zip(names, values))
                for values in itertools.product(*(p.values for p in self.params))]

    @property
    def defaults(self):
        """The parameters' default values, as keyword arguments."""
        return {p.name: p.default for p in self.params}

    def __str__(self):
        params = ", ".join(f"{p.name} in {{{', '.join(map(str, p.values))}}} (default {p.default})"
                           for p in self.params) or "no parameters"
        return (f"{self.name:<20} {self.family:<11} {'/'.join(self.dtypes):<16} {params}\n"
                f"{'':<20} {self.summary}\n{'':<20} lecture: {self.lecture}")


def _params_text(spec):
    """A kernel's parameters on one line: name=default (allowed values)."""
    return ", ".join(f"{p.name}={p.default} ({'/'.join(map(str, p.values))})"
                     for p in spec.params) or "-"


class KernelList(list):
    """The list `tm.kernels()` returns: KernelSpec items, shown as a table with one line per
    kernel (the REPL, `python -m tiledmm info`) and as an HTML table in Jupyter."""

    _HEADERS = ("kernel", "family", "dtypes", "parameters: default (allowed)")

    def _rows(self):
        return [(k.name, k.family, "/".join(k.dtypes), _params_text(k)) for k in self]

    def __repr__(self):
        rows = self._rows()
        if not rows:
            return "(no kernels)"
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(self._HEADERS)]
        lines = ["  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)).rstrip()
                 for row in [self._HEADERS] + rows]
        lines.append(f"{len(rows)} kernel{'s' if len(rows) != 1 else ''}; print(spec) for one "
                     "kernel's summary and lecture")
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self):
        headers = self._HEADERS + ("summary", "lecture")
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>"
                             for cell in row + (k.summary, k.lecture)) + "</tr>"
            for row, k in zip(self._rows(), self))
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def did_you_mean(name, choices):
    """"did you mean 'tiled'?" for a near miss of name among choices, else ''."""
    close = difflib.get_close_matches(str(name), list(choices), n=1)
    return f"did you mean {close[0]!r}?" if close else ""


def _in_parentheses(text):
    return f" ({text})" if text else ""


_specs = None


def specs():
    """name -> KernelSpec, in registry order."""
    global _specs
    if _specs is None:
        try:
            rows = _backend.module("emu").registry()
        except RuntimeError:
            rows = _backend.module("cuda").registry()
        _specs = {
            row["name"]: KernelSpec(row["name"], row["family"], tuple(row["dtypes"]),
                                    tuple(Param(**p) for p in row["params"]), row["lecture"],
                                    row["summary"])
            for row in rows}
    return _specs


def kernels(family=None):
    """The registered kernels (optionally of one family: 'matmul', 'reduce', 'elementwise'),
    as a list of KernelSpec in registry order that shows as a table, one kernel a line.

    >>> "tiled" in [k.name for k in tm.kernels("matmul")]
    True
    >>> tiled = next(k for k in tm.kernels() if k.name == "tiled")
    >>> tiled.family, tiled.params[0].name, tiled.params[0].values, tiled.params[0].default
    ('matmul', 'tile', (8, 16, 32), 16)
    """
    rows = list(specs().values())
    if family is not None:
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}"
                             f"{_in_parentheses(did_you_mean(family, FAMILIES))}; "
                             f"choose one of {', '.join(FAMILIES)}")
        rows = [k for k in rows if k.family == family]
    return KernelList(rows)


def lookup(name, family):
    """The spec of kernel `name`, which must belong to `family`; ValueError lists the choices."""
    spec = specs().get(name)
    if spec is None or spec.family != family:
        names = [k.name for k in kernels(family)]
        hint = (f" ({name!r} is a {spec.family} kernel)" if spec is not None
                else _in_parentheses(did_you_mean(name, names)))
        raise ValueError(f"unknown {family} kernel {name!r}{hint}; choose one of: "
                         f"{', '.join(names)}")
    return spec


def param_values(spec, given):
    """The tuple of parameter values for a call, in registry order, from keyword arguments."""
    known = {p.name for p in spec.params}
    unknown = sorted(set(given) - known)
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        hint = did_you_mean(unknown[0], known)
        raise ValueError(f"kernel {spec.name!r} has no parameter {unknown[0]!r} "
                         f"(its parameters: {allowed}){'; ' + hint if hint else ''}")
    values = []
    for p in spec.params:
        given_value = given.get(p.name, p.default)
        value = as_int(given_value)
        if value not in p.values:
            raise ValueError(f"{p.name}={given_value!r} is not allowed for kernel {spec.name!r}; "
                             f"allowed: {', '.join(map(str, p.values))}")
        values.append(value)
    return tuple(values)


def as_int(value):
    """value as a Python int (NumPy integers included), or None if it is not an integer."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None
