"""The kernel families as one table of (inputs, call): for each, the shapes of a problem's
inputs and the tiledmm call that runs one of its kernels. occupancy, profile, sweep and bench
build problems and launch kernels through it, so a family (or a kernel whose inputs differ
from its family's, as mat_add's 2-D matrices do) is described once.

A problem `size` is an int or a tuple:
- matmul: n (n x n x n) or (M, N, K); inputs A (M x K) and B (K x N);
- reduce, vec_add: n elements, or a shape; one input (reduce) or two of that shape;
- mat_add: n (an n x n matrix), or a shape; two inputs.
`elements_size(n)` is the size of a problem of about n elements (matmul: n stays the edge).
"""
import math
from dataclasses import dataclass
from typing import Callable

from . import _core, _registry

__all__ = ["Family", "FAMILIES", "family_of"]


@dataclass(frozen=True)
class Family:
    """One row of the table: `call(*inputs, kernel=..., backend=..., **params)` runs a kernel
    of the family (tm.matmul, tm.reduce, tm.vec_add, tm.mat_add); `shapes(size)` are the
    shapes of its inputs for a problem `size`."""
    name: str
    call: Callable
    shapes: Callable
    elements_size: Callable

    def inputs(self, size, make):
        """The inputs of a problem `size`, each made by `make(shape)` (the caller's random
        values and dtype), in argument order."""
        return tuple(make(shape) for shape in self.shapes(size))


def _matmul_shapes(size):
    M, N, K = size if isinstance(size, tuple) else (size, size, size)
    return (M, K), (K, N)


def _flat_shape(size):
    return size if isinstance(size, tuple) else (size,)


def _square_shape(size):
    return size if isinstance(size, tuple) else (size, size)


def _same(n):
    return n


def _square_side(n):
    return int(round(math.sqrt(n)))


FAMILIES = {
    "matmul": Family("matmul", _core.matmul, _matmul_shapes, _same),
    "reduce": Family("reduce", _core.reduce, lambda size: (_flat_shape(size),), _same),
    "vec_add": Family("vec_add", _core.vec_add, lambda size: (_flat_shape(size),) * 2, _same),
    "mat_add": Family("mat_add", _core.mat_add, lambda size: (_square_shape(size),) * 2,
                      _square_side),
}

# Kernels whose row is not their registry family's (mat_add: an elementwise kernel on 2-D
# matrices with 2-D blocks); every other kernel takes its family's row.
_KERNEL_ROWS = {"mat_add": "mat_add"}
_FAMILY_ROWS = {"matmul": "matmul", "reduce": "reduce", "elementwise": "vec_add"}


def family_of(kernel):
    """The table's row for a kernel (a name or a KernelSpec). ValueError for an unknown name."""
    spec = kernel if isinstance(kernel, _registry.KernelSpec) else _registry.specs().get(kernel)
    if spec is None:
        known = ", ".join(_registry.specs())
        raise ValueError(f"unknown kernel {kernel!r}; choose one of: {known}")
    return FAMILIES[_KERNEL_ROWS.get(spec.name, _FAMILY_ROWS[spec.family])]
