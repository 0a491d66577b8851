"""Registers per thread of every registry kernel, as nvcc compiles it for the H100 (sm_90):
writes tiledmm/profiling/kernel_registers.py, which the time model (tiledmm/profiling/time_model.py) uses so that
occupancy on the emulator counts registers as the GPU does.

    python benchmarks/kernel_registers.py            # needs nvcc (no GPU); about a minute
    python benchmarks/kernel_registers.py --check    # exit 1 when the table is out of date

Each cuda/*.cu is compiled as setup.py compiles it for the cuda backend (-O3 -std=c++17
-Icuda -Itiledmm/native -Icsrc), for sm_90 only, with `-Xptxas -v`: ptxas prints "Used N registers" for each
kernel instantiation. ROWS below says which instantiation each registry kernel and parameter
value launches (read from the kernel's launcher in cuda/); where a kernel has a 32-bit and a
64-bit index instantiation, the 32-bit one (every matrix up to 2^31 elements uses it). A row
that matches no compiled kernel, or more than one, is an error: a renamed kernel or a changed
template makes this script fail rather than write a wrong table.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(HERE, "tiledmm", "profiling", "kernel_registers.py")
SOURCES = ["matmul_naive.cu", "matmul_tiled.cu", "matmul_coarse.cu", "matmul_colmajor.cu",
           "matmul_regtile.cu", "matmul_fast.cu", "reduce_lecture.cu", "reduce_per_level.cu",
           "reduce_shuffle.cu", "reduce_steps.cu", "reduce_atomic.cu", "elementwise.cu",
           "matmul_wmma.cu", "matmul_tf32x3.cu"]
FAST = {1: "128, 128, 16, 2, 4, 2", 2: "128, 128, 8, 2, 4, 2", 3: "64, 64, 16, 2, 2, 4",
        4: "128, 256, 32, 2, 4, 1", 5: "128, 256, 16, 2, 4, 1"}
STEPS = ["interleaved_divergent", "interleaved_bank_conflicts", "sequential", "first_add",
         "unroll_last_warp", "multi_element"]   # reduce_steps.cu's STEP_* in order


def rows():
    """(kernel, params that select the instantiation, dtype, the instantiation's name)."""
    out = []
    for T in ("float", "double"):
        dt = "float32" if T == "float" else "float64"
        out += [("naive", (), dt, f"matmul_naive_kernel<{T}>"),
                ("naive_uncoalesced", (), dt, f"matmul_naive_uncoalesced_kernel<{T}>"),
                ("regtile", (("dims", 1),), dt, f"matmul_regtile_kernel<{T}, 64, 64, 8, 8, 1>"),
                ("regtile", (("dims", 2),), dt,
                 f"matmul_regtile_kernel<{T}, 128, 128, 8, 8, 8>"),
                ("colmajor_b", (("corner", 0),), dt, f"matmul_colmajor_naive_kernel<{T}>")]
        for tile in (8, 16, 32):
            out += [("tiled", (("tile", tile),), dt, f"matmul_tiled_kernel<{T}, {tile}, int>"),
                    ("colmajor_b", (("corner", 1), ("tile", tile)), dt,
                     f"matmul_colmajor_turned_kernel<{T}, {tile}>")]
            out += [("coarse", (("coarsen", c), ("tile", tile)), dt,
                     f"matmul_coarse_kernel<{T}, {tile}, {c}>") for c in (1, 2, 4, 8)]
        out += [(k, (), dt, f"reduce_step_kernel<{T}, {i}>") for i, k in enumerate(STEPS)]
        out += [(k, (), dt, f"{fn}<{T}>") for k, fn in (
            ("shuffle", "reduce_shuffle_kernel"), ("vectorized", "reduce_vectorized_kernel"),
            ("per_level", "reduce_level_kernel"), ("single_block", "reduce_single_block_kernel"),
            ("multi_pass", "reduce_multi_pass_kernel"), ("shared", "reduce_shared_kernel"),
            ("atomic", "reduce_atomic_kernel"),
            ("atomic_per_element", "reduce_atomic_per_element_kernel"),
            ("demo_wrong_block_sync", "reduce_wrong_block_sync_kernel"),
            ("vec_add", "vec_add_kernel"), ("mat_add", "mat_add_kernel"))]
    # fast is float32 only; config 6 is config 4's tiles with B by cp.async
    # (the tag types in fast's names decide how ptxas orders its FFMAs: matmul_fast.cu)
    out += [("fast", (("config", c),), "float32",
             f"matmul_fast_kernel<(anonymous namespace)::FastConfig<{cfg}>, int, "
             "(anonymous namespace)::kernel_tag_default_ffma_order>")
            for c, cfg in FAST.items()]
    out += [("fast", (("config", c),), "float32",
             f"matmul_fast_async_kernel<(anonymous namespace)::FastConfig<{FAST[4]}>, {s}, int, "
             "(anonymous namespace)::kernel_tag_ffma_order_as_in_cutlass>")
            for c, s in ((6, 2),)]
    # config 7: CUTLASS's SIMT structure, 4 stages, B rows 16-byte aligned (the common case)
    out += [("fast", (("config", 7),), "float32",
             "matmul_fast_simt_kernel<4, true, int, "
             "(anonymous namespace)::kernel_tag_ffma_order_as_in_cutlass>")]
    # tensor cores (issue 47): wmma's precision 0 TF32, 1 FP16; tf32x3
    out += [("wmma", (("precision", p),), "float32", f"matmul_wmma_kernel<{p}, int>") for p in (0, 1)]
    out += [("tf32x3", (), "float32", "matmul_tf32x3_kernel<true, int, 4, true>")]   # X3_* defaults
    return out


# Kernels compiled from headers this script does not build against (CUTLASS's are optional),
# measured once: (kernel, params, dtype, registers, what was compiled). cutlass: CUTLASS 4.2.0.0
# (the nvidia-cutlass wheel), cuda/matmul_cutlass.cu with -DTM_HAVE_CUTLASS, nvcc 13.0 for sm_90.
FIXED = [("cutlass", (), "float32", 254,
          "cutlass::Kernel<cutlass::gemm::kernel::Gemm<MmaMultistage<128x256x8, MmaSimt 64x64x8>, "
          "3 stages>> (CUTLASS 4.2.0.0)")]


def compiled_registers(nvcc):
    """{demangled kernel name: registers per thread} over SOURCES, for sm_90."""
    mangled = {}
    with tempfile.TemporaryDirectory() as tmp:
        for src in SOURCES:
            cmd = [nvcc, "-std=c++17", "-O3", "-arch=sm_90", "-Icuda", "-Itiledmm/native", "-Icsrc", "-cubin",
                   "-Xptxas", "-v", "-o", os.path.join(tmp, "k.cubin"), os.path.join("cuda", src)]
            log = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, check=True).stderr
            name = None
            for line in log.splitlines():
                m = re.search(r"Compiling entry function '(\w+)'", line)
                if m:
                    name = m.group(1)
                m = re.search(r"Used (\d+) registers", line)
                if m and name:
                    mangled[name] = int(m.group(1))
                    name = None
    names = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True,
                           text=True, check=True).stdout.splitlines()
    # "void name<args>(parameters)" -> "name<args>" (every kernel here is a template)
    return {n.removeprefix("void ")[:n.removeprefix("void ").index(">(") + 1]: r
            for n, r in zip(names, mangled.values())}


def nvcc_version(nvcc):
    text = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release [\d.]+, V([\d.]+)", text)
    return m.group(1) if m else "unknown"


def launch_shapes():
    """(threads per block, shared bytes) of each fast config on the emulator: config 0 chooses
    a config by size, and the time model tells which one ran from the launch shape."""
    sys.path.insert(0, HERE)
    import numpy as np
    import tiledmm as tm
    A = np.ones((256, 256), np.float32)
    shapes = {}
    for c in range(1, 8):
        launch = tm.matmul(A, A, kernel="fast", config=c, backend="emu").launch
        shapes[c] = (launch.threads_per_block, launch.shared_bytes)
    return shapes


def render(nvcc):
    regs = compiled_registers(nvcc)
    shapes = launch_shapes()
    lines = [
        '"""Registers per thread of each registry kernel compiled for the H100 (sm_90), for the',
        "time model's occupancy (registers are not known on the emulator). Generated by",
        "benchmarks/kernel_registers.py (nvcc -Xptxas -v): do not edit; rerun it after changing a",
        'kernel."""',
        f'NVCC = "{nvcc_version(nvcc)}"',
        'ARCH = "sm_90"',
        "# (kernel, params that select the instantiation, dtype, registers per thread,",
        "#  the instantiation nvcc compiled)",
        "REGISTERS = ["]
    for kernel, params, dt, inst in rows():
        hits = [r for n, r in regs.items() if n == inst]
        if len(hits) != 1:
            raise SystemExit(f"{kernel} {params} {dt}: {len(hits)} compiled kernels named {inst}")
        lines.append(f"    ({kernel!r}, {params!r}, {dt!r}, {hits[0]}, {inst!r}),")
    for kernel, params, dt, regs_, inst in FIXED:
        lines.append(f"    ({kernel!r}, {params!r}, {dt!r}, {regs_}, {inst!r}),")
    lines.append("]")
    lines.append("# fast: (threads per block, shared bytes) of each config, to tell which config")
    lines.append("# config=0 chose from the counted launch")
    lines.append(f"FAST_LAUNCH_SHAPES = {shapes!r}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare with the table, write nothing")
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    args = ap.parse_args()
    text = render(args.nvcc)
    if args.check:
        with open(OUT) as f:
            current = f.read()
        same = [ln for ln in current.splitlines() if not ln.startswith("NVCC")] == \
            [ln for ln in text.splitlines() if not ln.startswith("NVCC")]
        print("up to date" if same else f"{OUT} is out of date: run {__file__}")
        return 0 if same else 1
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
