"""NVIDIA's cuda-samples through tm.run (issues 43 and 44): the 40 samples the CUDA-surface issue
lists, each built as nvcc builds it (every .cu and .cpp of the sample's folder,
`-I<checkout>/Common` and the sample's own folder) and run through tm.run on the chosen backend
("emu" by default) in the sample's folder (where its data/ files are found), each in a Python
process of its own with a time limit. With --nvcc (a GPU machine), each sample is also built by
nvcc itself and run the same way, its result beside tm.run's. Prints a table (sample, result,
seconds); a pass is exit 0 with no "FAILED"/"Test failed" line in stdout, and the stdout nvcc's
build printed on the H200 (REFERENCE, recorded with --nvcc-only --save-reference) after masking
the lines that depend on the clock, the machine or the executable's path (MASKED_LINES), its
figures within FIGURE_TOLERANCE ("differs" otherwise). NVIDIA's code stays in the checkout:
nothing of it is copied into this repository (the reference holds the samples' output only).

    python benchmarks/cuda_samples.py /path/to/cuda-samples [--timeout 300] [--jobs 2] [--only NAME ...]
    python3 benchmarks/cuda_samples.py /path/to/cuda-samples --backend cuda --nvcc --jobs 8
    python3 benchmarks/cuda_samples.py /path/to/cuda-samples --nvcc-only --jobs 12 \
        --save-reference benchmarks/cuda_samples_nvcc_h200.json

Develop against NVIDIA/cuda-samples at SAMPLES_COMMIT (2025-09-05).
"""
import argparse
import concurrent.futures
import json
import os
import re
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
SAMPLES_COMMIT = "c94ff366aed18c797b8a85dfaac7817b0228b420"
FAILED_MARKS = ("FAILED", "Test failed", "TEST FAILED")
# nvcc's stdout of each sample on the H200 (--nvcc-only --json, then saved by --save-reference):
# a pass on emu also needs the same stdout, masked (masked_lines) and with its figures within
# FIGURE_TOLERANCE (same_stdout)
REFERENCE = os.path.join(HERE, "cuda_samples_nvcc_h200.json")
# Lines dropped before the comparison (re.search, case-sensitive): what depends on the clock
# (timings, rates), on the machine (its name, memory, clocks, SMs, versions, the OS) or on the
# executable's path (argv[0], "Starting..."), not on what the program computed.
MASKED_LINES = [
    # timings and rates
    r"[Tt]ime\b", r"[Tt]ime[ds]?:", r"msec", r"\bms\b", r"\bsecs?\b", r"[GM]B/s", r"GFlop/s",
    r"TFLOPS", r"Throughput", r"Gigaoptions", r"[Bb]andwidth", r"[Mm]pixels", r"MPixels",
    r"GOP/s", r"MegaElements/s", r"clocks/block", r"iterations while waiting", r"^memcopy:",
    r"^kernel:", r"^non-streamed:", r"^\d+ streams:", r"[Ee]lapsed", r"took",
    # the machine: the GPU's name, SMs, capability, memory, clocks, versions, the OS
    r"NVIDIA H\d+", r"Hopper", r"Multi-?[Pp]rocessors?", r"\bMPs?\b", r"MP\(s\)",
    r"SM \d+\.\d+", r"[Cc]ompute [Cc]apabilit", r"Capability", r"OS_System", r"OS Info",
    r"Driver", r"Runtime Version", r"CUDA Cores", r"[Cc]lock rate", r"Memory Clock",
    r"Bus Width", r"L2 Cache", r"amount of", r"shared memory per", r"Texture", r"registers", r"Warp size",
    r"threads per", r"dimension size", r"pitch", r"[Aa]lignment", r"Concurrent", r"limit on",
    r"Integrated", r"page-locked", r"ECC", r"Device supports", r"Device has", r"Domain ID",
    r"Compute Mode", r"Cooperative", r"Unified", r"PCI", r"Default \(", r"deviceQuery, CUDA",
    r"copy engine", r"TCC", r"Managed", r"Compute Preemption", r"Host Native", r"Device PCI",
    r"Device Query", r"scaling factor",
    # the executable's path
    r"Starting\.\.\.", r"/tmp/",
    # results of inputs seeded by the clock (fp16ScalarProduct: srand(time(NULL)))
    r"^Result (native operators|intrinsics)\t:",
]
# Figures (numbers with a point or an exponent) of the masked stdout compared within this:
# |emu - nvcc| <= rel * max(|emu|, |nvcc|) + abs. Integers must be equal.
FIGURE_TOLERANCE = (1e-3, 1e-4)
_FIGURE = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][-+]?\d+)?")


def markdown_table(rows, backend):
    """The rows as docs/programs.md shows them: sample, result, seconds, what stops it."""
    out = ["| sample | result | seconds | what stops it |", "|---|---|---|---|"]
    for r in rows:
        detail = (r["detail"] or "").replace("|", "\\|")
        out.append(f"| {r['sample']} | {r['result']} | {r['seconds']} | "
                   f"{detail[:157] + '...' if len(detail) > 160 else detail} |")
    passed = sum(r["result"] == "pass" for r in rows)
    return "\n".join(out) + f"\n\n**{passed} of {len(rows)} pass** through tm.run on {backend}.\n"


def masked_lines(stdout):
    """stdout's lines, right-stripped, without the blank ones and MASKED_LINES'."""
    keep = []
    for line in stdout.splitlines():
        line = line.rstrip()
        if line.strip() and not any(re.search(m, line) for m in MASKED_LINES):
            keep.append(line)
    return keep


# Samples whose lines come from device printf in several blocks at once: the GPU prints them in
# whichever order the blocks ran (simplePrintf's "[2, 0]" before "[1, 0]" in one H200 run), so
# their masked lines are compared as sorted lists.
ORDER_FREE = ("simplePrintf",)


def same_stdout(emu, nvcc, any_order=False):
    """None where `emu` matches `nvcc` after masking, else the first difference (a string)."""
    mine, theirs = masked_lines(emu), masked_lines(nvcc)
    if any_order:
        mine, theirs = sorted(mine), sorted(theirs)
    for k, (a, b) in enumerate(zip(mine, theirs)):
        fa, fb = _FIGURE.findall(a), _FIGURE.findall(b)
        if _FIGURE.sub("#", a) != _FIGURE.sub("#", b) or len(fa) != len(fb) or any(
                abs(float(x) - float(y)) > FIGURE_TOLERANCE[0] * max(abs(float(x)), abs(float(y)))
                + FIGURE_TOLERANCE[1] for x, y in zip(fa, fb)):
            return f"line {k + 1} of the masked stdout: {a[:120]!r}, nvcc's: {b[:120]!r}"
    if len(mine) != len(theirs):
        extra = (mine + theirs)[min(len(mine), len(theirs))]
        return (f"{len(mine)} masked lines, nvcc's {len(theirs)}: "
                f"{'its' if len(mine) > len(theirs) else 'nvcc'}'s {extra[:120]!r}")
    return None
STDOUT_KEPT = 20000   # the last characters of a run's stdout a row keeps


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
    """The sample built by nvcc for this GPU and run in its folder: (result, detail, stdout)."""
    with tempfile.TemporaryDirectory() as scratch:
        exe = os.path.join(scratch, "sample")
        try:
            built = subprocess.run(["nvcc", "-arch=native", "-O2", *flags, *files, "-o", exe],
                                   capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", "nvcc", ""
        if built.returncode != 0:
            return "compile error", (built.stderr.strip().splitlines() or [""])[0], ""
        try:
            ran = subprocess.run([exe], cwd=folder, capture_output=True, text=True,
                                 timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "timeout", "", ""
        return (*verdict(ran.returncode, ran.stdout, ran.stderr, False), ran.stdout)


def one(checkout, sample, timeout, backend, nvcc, nvcc_only=False):
    """Runs one sample in this process; prints a JSON line {result, detail, stdout[, nvcc,
    nvcc_detail, nvcc_stdout]} (nvcc_only: nvcc's alone, result "not run")."""
    folder = os.path.join(checkout, "Samples", sample)
    files = sorted(os.path.join(folder, n) for n in os.listdir(folder)
                   if n.endswith((".cu", ".cpp")))
    flags = [f"-I{os.path.join(checkout, 'Common')}", f"-I{folder}"]
    os.chdir(folder)
    extra = {}
    if nvcc or nvcc_only:
        extra["nvcc"], extra["nvcc_detail"], extra["nvcc_stdout"] = with_nvcc(files, flags, folder,
                                                                              timeout)
    if nvcc_only:
        print(json.dumps({"result": "not run", "detail": "", "stdout": "", **extra}))
        return
    sys.path.insert(0, ROOT)
    import tiledmm as tm
    try:
        r = tm.run(files, backend=backend, timeout=timeout, compiler_args=flags)
    except tm.CompileError as exc:
        log = (getattr(exc, "log", "") or str(exc)).strip().splitlines()
        first = next((ln for ln in log if "error" in ln), log[0] if log else "")
        print(json.dumps({"result": "compile error", "detail": first[:300], "stdout": "",
                          **extra}))
        return
    except Exception as exc:   # noqa: BLE001 (the table says what went wrong)
        print(json.dumps({"result": "error", "detail": f"{type(exc).__name__}: {exc}"[:300],
                          "stdout": "", **extra}))
        return
    res, detail = verdict(r.returncode, r.stdout, r.stderr, r.timed_out)
    print(json.dumps({"result": res, "detail": detail[:300], "stdout": r.stdout[-STDOUT_KEPT:],
                      **extra}))


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
    ap.add_argument("--nvcc-only", action="store_true",
                    help="build and run each sample with nvcc alone (records its stdout)")
    ap.add_argument("--reference", default=REFERENCE,
                    help="nvcc's stdout of each sample (JSON); a pass needs the same masked "
                         "stdout ('' for none)")
    ap.add_argument("--markdown", help="also write the table as Markdown (docs/programs.md's)")
    ap.add_argument("--save-reference", help="write nvcc's stdout of each sample to this file")
    ap.add_argument("--machine", default="", help="what ran nvcc's builds, for the reference")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    checkout = os.path.abspath(a.checkout)
    reference = {}
    if a.reference and not a.nvcc_only:
        with open(a.reference) as f:
            reference = json.load(f)["stdout"]
    if a.one:
        one(checkout, a.one, a.timeout, a.backend, a.nvcc, a.nvcc_only)
        return 0
    def sample_row(s):
        t0 = time.monotonic()
        try:
            done = subprocess.run([sys.executable, os.path.abspath(__file__), checkout, "--one", s,
                                   "--timeout", str(a.timeout), "--backend", a.backend]
                                  + (["--nvcc"] if a.nvcc else [])
                                  + (["--nvcc-only"] if a.nvcc_only else []), capture_output=True,
                                  text=True, timeout=(3 if a.nvcc else 1) * a.timeout + 240)
            last = (done.stdout.strip().splitlines() or [""])[-1]
            try:
                row = json.loads(last)
            except ValueError:
                row = {"result": "error", "detail": (done.stderr.strip().splitlines() or [""])[-1][:300]}
        except subprocess.TimeoutExpired:
            row = {"result": "timeout", "detail": "build and run"}
        row.update(sample=s.split("/")[-1], seconds=round(time.monotonic() - t0, 1))
        if row["result"] == "pass" and row["sample"] in reference:
            differs = same_stdout(row.get("stdout", ""), reference[row["sample"]],
                                  any_order=row["sample"] in ORDER_FREE)
            if differs:
                row.update(result="differs", detail=differs)
        nvcc = f"nvcc: {row['nvcc']:14s}" if "nvcc" in row else ""
        print(f"{row['sample']:28s} {row['result']:14s} {nvcc}{row['seconds']:7.1f}  "
              f"{row['detail'] or row.get('nvcc_detail', '')}", flush=True)
        return row

    chosen = [s for s in SAMPLES if not a.only or s.split("/")[-1] in a.only]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:   # each sample a process
        rows = list(pool.map(sample_row, chosen))
    passed = sum(r["result"] == "pass" for r in rows)
    print(f"\n{passed} of {len(rows)} pass through tm.run on {a.backend}")
    if a.nvcc or a.nvcc_only:
        print(f"{sum(r.get('nvcc') == 'pass' for r in rows)} of {len(rows)} pass built by nvcc")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(markdown_table(rows, a.backend))
    if a.save_reference:
        with open(a.save_reference, "w") as f:
            json.dump({"machine": a.machine, "commit": SAMPLES_COMMIT,
                       "stdout": {r["sample"]: r.get("nvcc_stdout", "") for r in rows}}, f,
                      indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
