"""How profile mode builds kernels (docs/profile.md): the flags and wrapped symbols that
setup.py uses for tiledmm._emu_profile and tm.compile uses for a user kernel's profile build.
One list for both, so that a student's kernel is counted exactly as the registry's are.
setup.py reads this file with runpy (it cannot import the package it builds): plain Python,
no imports from tiledmm."""
import platform

# Profile mode: the kernels get ThreadSanitizer's instrumentation (calls before every load and
# store, implemented by emu/profile/emu_profile.cpp; libtsan is not linked). No vectorising and
# no loops turned into memcpy/memset calls, so every access of the source stays one access.
# No scalar replacement of aggregates (-fno-tree-sra): a float4 load or store stays one 16-byte
# access (__tsan_read16), as it is one LDG.128/LDS.128 on the GPU, instead of four 4-byte ones
# (measured against ncu on the H100: fast, shuffle and vectorized then agree exactly).
# -fsanitize-coverage=trace-pc: a call at the start of every basic block, whose return address
# names the block: each lane's path between barriers, for the divergent-branch count.
# TM_EMU_PROFILE: cp.async's emulator helpers (cuda/matmul_fast.cu) hand the copy to the profile
# hooks, which count it as one cp.async (LDGSTS) access as ncu does.
PROFILE_KERNEL_FLAGS = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
                        "-fsanitize-coverage=trace-pc", "-DTM_EMU_PROFILE",
                        # template statics (the __shared__ arrays) stay this module's own, not
                        # unified with tiledmm._emu's by the dynamic linker (STB_GNU_UNIQUE)
                        "-fno-gnu-unique",
                        "-fno-tree-vectorize", "-fno-tree-loop-distribute-patterns", "-fno-tree-sra",
                        # no jump threading: it copies a block into each path that reaches it, so
                        # `s[i] = c ? g[j] : 0` became two stores (two PCs) and a warp whose lanes
                        # took both paths counted two shared stores where the GPU runs one
                        "-fno-thread-jumps"]
# emu/profile's hooks read their thread-local state on every access and basic block: TLS
# descriptors (x86-64's -mtls-dialect=gnu2; aarch64's default) make that read cheaper than a
# __tls_get_addr call in a dlopen'ed module.
PROFILE_HOOK_FLAGS = ["-mtls-dialect=gnu2"] if platform.machine() in ("x86_64", "AMD64") else []
# The emulator entry points whose calls from the kernels emu_profile.cpp sees (ld --wrap).
PROFILE_WRAPPED = ["_ZN6tm_emu6launchEPKvPFvPvES2_4dim3S5_m", "_ZN6tm_emu7warp_opEijyiiPKci",
                   "tm_emu_syncthreads", "tm_emu_syncthreads_op", "cudaMalloc", "cudaFree",
                   "cudaDeviceGetAttribute"]
