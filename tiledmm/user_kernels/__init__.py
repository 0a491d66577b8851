"""tm.compile: a user's kernel compiled (tiledmm.toolchain), loaded and launched (launch) in the
confined worker (worker), through the same timed launch and Result as the registry's kernels
(kernel).
"""
