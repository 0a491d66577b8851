"""The toolchain: what reads, rewrites and compiles a user's CUDA source.

source (libclang parsing), diagnostics (compiler messages at the user's lines), cache (the
kernel disk cache), compile_emu (g++ against the emulator), compile_nvrtc (NVRTC for the GPU),
check_rewrite (check mode's bounds rewrite) and split/ (the barrier transform, which setup.py
also loads by path). Compiling runs only in a confined child (tiledmm.confine.sandbox).
"""
