"""NVIDIA's cuda-samples through tm.run (issues 43 and 44): the 40 samples the CUDA-surface issue
lists, each built as nvcc builds it (every .cu and .cpp of the sample's folder,
`-I<checkout>/Common` and the sample's own folder) and run through tm.run on the chosen backend
("emu" by default) in the sample's folder (where its data/ files are found), each in a Python
process of its own with a time limit. With --nvcc (a GPU machine), each sample is also built by
nvcc itself and run the same way, its result beside tm.run's. Prints a table (sample, result,
seconds); a pass is exit 0 with no "FAILED"/"Test failed" line in stdout. NVIDIA's code stays in
the checkout: nothing of it is copied into this repository.

    python benchmarks/cuda_samples.py /path/to/cuda-samples [--timeout 300] [--jobs 2] [--only NAME ...]
    python3 benchmarks/cuda_samples.py /path/to/cuda-samples --backend cuda --nvcc --jobs 8

Develop against NVIDIA/cuda-samples at c94ff366aed18c797b8a85dfaac7817b0228b420 (2025-09-05).
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SAMPLES = [
    "0_Introduction/vectorAdd", "0_Introduction/matrixMul", "0_Introduction/simpleAtomicIntrinsics",
    "0_Introduction/simpleCooperativeGroups", "0_Introduction/simplePrintf",
    "0_Introduction/simpleTemplates", "0_Introduction/simpleVoteIntrinsics", "0_Introduction/asyncAPI",
    "0_Introduction/simpleStreams", "0_Introduction/clock", "0_Introduction/simpleOccupancy",
    "0_Introduction/simpleAssert", "0_Introduction/simpleCallback", "0_Introduction/template",
    "0_Introduction/mergeSort", "0_Introduction/simpleZeroCopy", "0_Introduction/fp16ScalarProduct",
    "0_Introduction/simpleTexture", "1_Utilities/deviceQuery", "2_Concepts_and_Techniques/reduction",
    "2_Concepts_and_Techniques/scan", "2_Concepts_and_Techniques/shfl_scan",
    "2_Concepts_and_Techniques/histogram", "2_Concepts_and_Techniques/scalarProd",
    "2_Concepts_and_Techniques/sortingNetworks", "2_Concepts_and_Techniques/threadFenceReduction",
    "2_Concepts_and_Techniques/convolutionSeparable", "2_Concepts_and_Techniques/reductionMultiBlockCG",
    "2_Concepts_and_Techniques/inlinePTX", "2_Concepts_and_Techniques/streamOrderedAllocation",
    "3_CUDA_Features/warpAggregatedAtomicsCG", "3_CUDA_Features/binaryPartitionCG",
    "3_CUDA_Features/globalToShmemAsyncCopy", "3_CUDA_Features/cudaTensorCoreGemm",
    "3_CUDA_Features/simpleCudaGraphs", "3_CUDA_Features/newdelete", "5_Domain_Specific/BlackScholes",
    "5_Domain_Specific/fastWalshTransform", "5_Domain_Specific/dwtHaar1D", "6_Performance/transpose",
]
FAILED_MARKS = ("FAILED", "Test failed", "TEST FAILED")


def verdict(returncode, stdout, stderr, timed_out):
    """(result, detail) of one finished run, tm.run's or nvcc's binary's alike."""
    bad = [ln for ln in stdout.splitlines() if any(m in ln for m in FAILED_MARKS)]
    if timed_out:
        return "timeout", ""
    if returncode != 0:
        errs = [ln for ln in stderr.splitlines() if ln.strip()]
        outs = [ln for ln in stdout.splitlines() if ln.strip()]
        said = next((ln for ln in errs if ln.startswith("tiledmm:")), None)
        return f"exit {returncode}", said or " | ".join(errs[-2:] or outs[-1:])
    if bad:
        return "wrong", bad[0]
    return "pass", ""


def with_nvcc(files, flags, folder, timeout):
    """The sample built by nvcc for this GPU and run in its folder: (result, detail)."""
    with tempfile.TemporaryDirectory() as scratch:
        exe = os.path.join(scratch, "sample")
        try:
            built = subprocess.run(["nvcc", "-arch=native", "-O2", *flags, *files, "-o", exe],
                                   capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", "nvcc"
        if built.returncode != 0:
            return "compile error", (built.stderr.strip().splitlines() or [""])[0]
        try:
            ran = subprocess.run([exe], cwd=folder, capture_output=True, text=True,
                                 timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "timeout", ""
        return verdict(ran.returncode, ran.stdout, ran.stderr, False)


def one(checkout, sample, timeout, backend, nvcc):
    """Runs one sample in this process; prints a JSON line {result, detail[, nvcc]}."""
    sys.path.insert(0, ROOT)
    import tiledmm as tm
    folder = os.path.join(checkout, "Samples", sample)
    files = sorted(os.path.join(folder, n) for n in os.listdir(folder)
                   if n.endswith((".cu", ".cpp")))
    flags = [f"-I{os.path.join(checkout, 'Common')}", f"-I{folder}"]
    os.chdir(folder)
    extra = {}
    if nvcc:
        extra["nvcc"], extra["nvcc_detail"] = with_nvcc(files, flags, folder, timeout)
    try:
        r = tm.run(files, backend=backend, timeout=timeout, compiler_args=flags)
    except tm.CompileError as exc:
        log = (getattr(exc, "log", "") or str(exc)).strip().splitlines()
        first = next((ln for ln in log if "error" in ln), log[0] if log else "")
        print(json.dumps({"result": "compile error", "detail": first[:300], **extra}))
        return
    except Exception as exc:   # noqa: BLE001 (the table says what went wrong)
        print(json.dumps({"result": "error", "detail": f"{type(exc).__name__}: {exc}"[:300],
                          **extra}))
        return
    res, detail = verdict(r.returncode, r.stdout, r.stderr, r.timed_out)
    print(json.dumps({"result": res, "detail": detail[:300], **extra}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help="a cuda-samples checkout (the folder holding Samples/ and Common/)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per sample (build and run)")
    ap.add_argument("--only", nargs="*", help="samples to run (their folder names)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="samples run at once (their seconds then include waiting for a core)")
    ap.add_argument("--backend", default="emu", help="tm.run's backend (emu or cuda)")
    ap.add_argument("--nvcc", action="store_true",
                    help="also build each sample with nvcc and run it (a GPU machine)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    checkout = os.path.abspath(a.checkout)
    if a.one:
        one(checkout, a.one, a.timeout, a.backend, a.nvcc)
        return 0
    def sample_row(s):
        t0 = time.monotonic()
        try:
            done = subprocess.run([sys.executable, os.path.abspath(__file__), checkout, "--one", s,
                                   "--timeout", str(a.timeout), "--backend", a.backend]
                                  + (["--nvcc"] if a.nvcc else []), capture_output=True,
                                  text=True, timeout=(3 if a.nvcc else 1) * a.timeout + 240)
            last = (done.stdout.strip().splitlines() or [""])[-1]
            try:
                row = json.loads(last)
            except ValueError:
                row = {"result": "error", "detail": (done.stderr.strip().splitlines() or [""])[-1][:300]}
        except subprocess.TimeoutExpired:
            row = {"result": "timeout", "detail": "build and run"}
        row.update(sample=s.split("/")[-1], seconds=round(time.monotonic() - t0, 1))
        nvcc = f"nvcc: {row['nvcc']:14s}" if "nvcc" in row else ""
        print(f"{row['sample']:28s} {row['result']:14s} {nvcc}{row['seconds']:7.1f}  "
              f"{row['detail'] or row.get('nvcc_detail', '')}", flush=True)
        return row

    chosen = [s for s in SAMPLES if not a.only or s.split("/")[-1] in a.only]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:   # each sample a process
        rows = list(pool.map(sample_row, chosen))
    passed = sum(r["result"] == "pass" for r in rows)
    print(f"\n{passed} of {len(rows)} pass through tm.run on {a.backend}")
    if a.nvcc:
        print(f"{sum(r.get('nvcc') == 'pass' for r in rows)} of {len(rows)} pass built by nvcc")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
