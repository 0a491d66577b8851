"""What building a whole program costs with tm.run (issue 44's table): for a few of NVIDIA's
samples, the build alone (tiledmm.programs.run.build: the parse, the launch rewrite, the barrier
transform, the compile and link) uncached and cached, on this machine's backend or the one
given. The first build in an empty cache folder also compiles what every program shares (the
emulator's runtime objects and the precompiled prelude): measured apart, as "shared, once".

    python benchmarks/program_build_time.py /path/to/cuda-samples [--backend emu|cuda]
                                            [--only vectorAdd matrixMul ...]
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from tiledmm.programs import run as programs  # noqa: E402

SAMPLES = ["0_Introduction/vectorAdd", "0_Introduction/matrixMul",
           "2_Concepts_and_Techniques/reduction", "5_Domain_Specific/BlackScholes",
           "3_CUDA_Features/simpleCudaGraphs"]
SHARED = "int main() { return 0; }\n"   # builds what every program shares, and little else


def build_seconds(folder, checkout, backend):
    """Seconds of programs.build for the sample's files (its main file first), and the origin
    of the build ("compiled" or "disk_hits")."""
    names = sorted(n for n in os.listdir(folder) if n.endswith((".cu", ".cpp")))
    main = next((n for n in names if n.endswith(".cu")), names[0])
    with open(os.path.join(folder, main)) as f:
        source = f.read()
    extra = []
    for n in names:
        if n != main:
            with open(os.path.join(folder, n)) as f:
                extra.append((f.read(), n, folder))
    args = [f"-I{os.path.join(checkout, 'Common')}", f"-I{folder}"]
    start = time.perf_counter()
    _image, _meta, origin = programs.build(source, main, backend, args, folder,
                                           extra_sources=extra)
    return time.perf_counter() - start, origin


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help="a cuda-samples checkout (Samples/ and Common/)")
    ap.add_argument("--backend", default="emu", choices=("emu", "cuda"))
    ap.add_argument("--only", nargs="*", help="samples to build (their folder names)")
    a = ap.parse_args()
    os.environ["TILEDMM_CACHE_DIR"] = tempfile.mkdtemp(prefix="tiledmm-build-time-")
    start = time.perf_counter()
    programs.build(SHARED, "shared.cu", a.backend)
    print(f"{a.backend}: shared, once per cache folder: {time.perf_counter() - start:.1f} s")
    print("| sample | uncached (s) | cached (s) |\n|---|---|---|")
    for s in SAMPLES:
        if a.only and s.split("/")[-1] not in a.only:
            continue
        folder = os.path.join(os.path.abspath(a.checkout), "Samples", s)
        cold, origin = build_seconds(folder, os.path.abspath(a.checkout), a.backend)
        warm, again = build_seconds(folder, os.path.abspath(a.checkout), a.backend)
        assert origin == "compiled" and again == "disk_hits", (origin, again)
        print(f"| {s.split('/')[-1]} | {cold:.1f} | {warm:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
