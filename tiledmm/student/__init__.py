"""Student code: everything that reads, compiles, checks, confines and runs code a student wrote.

tm.compile (user_kernels), tm.run (programs) and the %%cuda magics (magics) are built here from
the source reader (kernel_source, kernel_diagnostics), the two compilers (compile_emu,
compile_nvrtc), the kernel cache, check mode, and the worker process with its isolation and
sandbox. Nothing here imports tiledmm.grading, which sits above it.
"""
