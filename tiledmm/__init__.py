"""tiledmm: run, time and compare a parallel-computing course's CUDA kernels on NumPy arrays.

    import numpy as np, tiledmm as tm
    A = np.random.rand(512, 300).astype(np.float32)
    B = np.random.rand(300, 200).astype(np.float32)
    C, t = tm.matmul(A, B, kernel="tiled", tile=16)
    print(t.kernel_ms, tm.kernels("matmul"))

Backends: 'cuda' (the GPU) and 'emu' (the same kernel sources on the CPU). The default is
'cuda' when a device is present, else 'emu'; `set_backend`, TILEDMM_BACKEND or `backend=`
choose.
"""
from ._backend import get_backend, set_backend
from ._core import Launch, Result, Timing, mat_add, matmul, reduce, vec_add
from ._device import device_info, mem_info
from ._device_array import DeviceArray, to_device
from ._registry import KernelSpec, kernels
from . import model, occupancy, plot, profile, sweep
from .errors import CompileError, CompileWarning, KernelError
from .user_kernels.kernel import Kernel, cache_info, clear_cache, compile
from .grading.checkers import (CheckReport, GradeTable, check_matmul, check_reduce, grade_matmul,
                      grade_reduce)
from . import grading  # noqa: F401 -- tm.grading, the grader's package
from .grading import GradeReport, grade
from .programs.report import ProgramLaunch, ProgramResult
from .programs.run import run
from . import magics

__version__ = "0.1.0"


def load_ipython_extension(shell):
    """`%load_ext tiledmm` in Jupyter: the %%cuda magics (tiledmm/magics.py,
    nvcc4jupyter's; IPython is imported only there, when the magics' class is made)."""
    magics.load_ipython_extension(shell)


__all__ = ["matmul", "reduce", "vec_add", "mat_add", "kernels", "device_info", "mem_info",
           "to_device", "DeviceArray",
           "set_backend", "get_backend", "Result", "Timing", "Launch", "KernelSpec",
           "model", "occupancy", "sweep", "plot", "profile",
           "compile", "Kernel", "CompileError", "CompileWarning", "KernelError", "clear_cache",
           "cache_info",
           "grade_matmul", "grade_reduce", "GradeTable", "check_matmul", "check_reduce",
           "CheckReport",
           "run", "ProgramResult", "ProgramLaunch", "grade", "GradeReport"]
