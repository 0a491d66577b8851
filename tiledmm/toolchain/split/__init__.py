"""The barrier transform: a kernel split at its `__syncthreads()` into loops over the block's
threads (analysis: the libclang parse and what may split; lower: cooperative groups' calls
written as built-ins; inline: helpers taken into the kernel; guard: a thread-dependent `if`
around a loop written as guarded statements; transform: the emitter). setup.py runs it over
cuda/*.cu at build time, loading tiledmm/ by path without its __init__ (nothing compiled): so
it and what it imports use relative imports only.
"""

# Every file the transform is made of, relative to tiledmm/: setup.py rebuilds the split registry
# sources when one changes and the kernel cache's key hashes them (tests/test_layering.py checks
# that loading the transform imports exactly these).
FILES = ("errors.py", "toolchain/__init__.py", "toolchain/diagnostics.py", "toolchain/source.py",
         "toolchain/split/__init__.py", "toolchain/split/analysis.py",
         "toolchain/split/guard.py", "toolchain/split/inline.py", "toolchain/split/lower.py",
         "toolchain/split/transform.py")
