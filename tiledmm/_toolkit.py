"""The one lookup of the CUDA toolkit and its tools: where nvcc, NVRTC, Nsight Compute and
Nsight Systems, and compute-sanitizer are. The order everywhere: $CUDA_HOME, $CUDA_PATH, the
folder of `nvcc` on PATH, /usr/local/cuda. Standard library only: setup.py loads this file by
path, before anything is built."""
import os
import shutil

DEFAULT_ROOT = "/usr/local/cuda"


def roots():
    """Candidate toolkit roots, in order, each once, those that exist."""
    found = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        found.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    found.append(DEFAULT_ROOT)
    out = []
    for root in found:
        if root and os.path.isdir(root) and root not in out:
            out.append(root)
    return out


def home():
    """The toolkit root that holds nvcc, or None."""
    return next((r for r in roots() if _executable(os.path.join(r, "bin", "nvcc"))), None)


def _executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def tool(name, subfolders=("bin",)):
    """The path of a toolkit executable (nvcc, ncu, nsys, compute-sanitizer): the toolkit roots'
    `subfolders` first, then PATH; None where there is none."""
    for root in roots():
        for sub in subfolders:
            if _executable(os.path.join(root, sub, name)):
                return os.path.join(root, sub, name)
    return shutil.which(name)


def lib_dirs():
    """The toolkit roots' lib64 folders that exist."""
    return [d for d in (os.path.join(r, "lib64") for r in roots()) if os.path.isdir(d)]


def include_dir(marker="cuda_runtime.h"):
    """The first toolkit include folder holding `marker`, or None."""
    return next((d for d in (os.path.join(r, "include") for r in roots())
                 if os.path.isfile(os.path.join(d, marker))), None)
