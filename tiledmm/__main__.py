"""python -m tiledmm info | demo | bench | grade | run"""
import argparse
import sys

import numpy as np

import tiledmm as tm
from tiledmm import _registry, bench
from tiledmm.grading.cli import add_grade_parser
from tiledmm.confine import sandbox
from tiledmm.programs import nvcc_args
from tiledmm.programs.run import run_cli
from tiledmm.testing import assert_matmul_close

# Printed under the demo's table on the emulator, where tiled usually loses to naive in CPU time.
EMU_DEMO_NOTE = ("On emu the ms column is CPU time of an emulator: each kernel runs as loops over a "
                 "block's threads,\nsplit at its __syncthreads (res.launch.path says \"thread "
                 "loops\", or \"fibers\" where it cannot split),\nand shared memory is ordinary "
                 "CPU cache, so tiling saves little there. The last column is the\nlesson: the "
                 "global and shared traffic an H100 would have, counted here at the lecture's "
                 "1024^3\nwith Nsight Compute's definitions, and the H100 time a model predicts "
                 "from it\n(tm.matmul(A, B, kernel=\"tiled\", profile=True), docs/profile.md).")
# Where the demo counts traffic on emu: the lesson's size, where the grids fill an H100.
DEMO_COUNT_SIZE = 1024
DEMO_KERNELS = [("naive", {}), ("naive_uncoalesced", {}), ("tiled", {"tile": 8}),
                ("tiled", {"tile": 16}), ("tiled", {"tile": 32})]


def cmd_info(args):
    print(tm.device_info(backend=args.backend))
    print(sandbox.describe())   # what confines student code here (issue 29)
    print()
    print(tm.kernels())


def demo_rows(backend, n, count_size=DEMO_COUNT_SIZE):
    """The demo's rows: each kernel run at n x n on `backend`, checked against NumPy; on emu also
    the H100 time predicted from the traffic counted at count_size^3 (None on cuda)."""
    rng = np.random.default_rng(1)
    A = (rng.random((n, n), dtype=np.float32) * 2 - 1)
    B = (rng.random((n, n), dtype=np.float32) * 2 - 1)
    counted = ([(rng.random((count_size, count_size), dtype=np.float32) * 2 - 1) for _ in "AB"]
               if backend != "cuda" else None)
    rows = []
    for kernel, params in DEMO_KERNELS:
        res = tm.matmul(A, B, kernel=kernel, backend=backend, **params)
        assert_matmul_close(res.out, A, B)
        predicted = (tm.profile.count("matmul", kernel, *counted, **params).predict("H100")
                     if counted is not None else None)
        rows.append((kernel + "".join(f" {k}={v}" for k, v in params.items()), res, predicted))
    return rows


def cmd_demo(args):
    backend = args.backend or tm.get_backend()
    n = args.size or (2048 if backend == "cuda" else 128)
    info = tm.device_info(backend=backend)
    print(f"backend {backend}: {info['name']}")
    print(f"C = A @ B, {n}x{n} float32, checked against numpy in float64\n")
    emu = backend != "cuda"
    predicted_head = f"H100 ms predicted ({DEMO_COUNT_SIZE}^3)" if emu else ""
    print(f"{'kernel':<20}{'CPU ms' if emu else 'ms':>10}{'GFLOP/s':>12}"
          f"{'modelled traffic MB':>22}{predicted_head:>30}  check")
    for label, res, predicted in demo_rows(backend, n):
        column = f"{predicted.ms:>30.3f}" if predicted is not None else ""
        print(f"{label:<20}{res.timing.kernel_ms:>10.3f}{res.gflops:>12.3g}"
              f"{res.model_bytes / 1e6:>22.1f}{column}  ok")
    print(f"\n({res.timing.clock}; median of {len(res.timing.samples_ms)} run(s))")
    if emu:
        print(EMU_DEMO_NOTE)


def cmd_bench(args):
    runners = {"matmul": bench.bench_matmul, "reduce": bench.bench_reduce}
    families = (list(runners) if args.family == "all" else
                [] if args.family == "none" else [args.family])
    all_rows, tables = [], []
    for family in families:
        if not tm.kernels(family):
            continue
        sizes = args.sizes  # only with one family (check_bench_args)
        rows = runners[family](sizes=sizes, kernels=args.kernels, backend=args.backend,
                               warmup=args.warmup, repeat=args.repeat,
                               progress=bench.progress_to_stderr if args.verbose else None,
                               warm_l2=args.warm_l2,
                               **({"profile": True} if args.profile else {}))
        all_rows += [dict(r, family=family) for r in rows]
        tables.append(bench.format_table(rows, family))
    if args.end_to_end:
        rows = bench.bench_end_to_end(backend=args.backend,
                                      progress=bench.progress_to_stderr if args.verbose else None)
        all_rows += [dict(r, family="end_to_end") for r in rows]
        tables.append(bench.format_end_to_end(rows))
    bench.save(all_rows, args.csv, args.json)
    print(bench.header(args.backend, args.warmup, args.repeat, args.warm_l2))
    print("\n\n".join(tables))


def cmd_run(args):
    """A whole CUDA program on the terminal: its stdin and stdout, its exit code."""
    return run_cli(args.files, backend=args.backend or args.run_backend, timeout=args.timeout,
                   args=args.program_args, compiler_args=args.compiler_args,
                   profile=args.profile, check=args.check, outdir=args.outdir)


# run's own options (the rest of its options are nvcc's: programs/nvcc_args.py)
RUN_VALUED = ("--backend", "--timeout", "--outdir")
RUN_FLAGS = ("--check", "--profile", "-h", "--help")


def _timeout(text):
    """argparse type for run --timeout: seconds > 0, or 'none' for no limit."""
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("the timeout is seconds > 0, or 'none'")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tiledmm", description=__doc__)
    parser.add_argument("--backend", choices=["cuda", "emu"], default=None)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="device query and the kernel registry").set_defaults(fn=cmd_info)
    demo = sub.add_parser("demo", help="naive vs tiled matmul, checked and timed")
    demo.add_argument("--size", type=int, default=None)
    demo.set_defaults(fn=cmd_demo)
    b = sub.add_parser("bench", help="matmul kernels x sizes: time, TFLOP/s, %% of cuBLAS")
    b.add_argument("--family", choices=["matmul", "reduce", "all", "none"], default="all")
    b.add_argument("--sizes", type=_positive_int, nargs="+", default=None,
                   help="square sizes (with --family matmul) or lengths (with --family reduce); "
                        "refused without one of those")
    b.add_argument("--kernels", nargs="+", default=None,
                   help="registered kernel names of the family (python -m tiledmm info lists them)")
    b.add_argument("--warmup", type=int, default=None)
    b.add_argument("--repeat", type=int, default=None)
    b.add_argument("--warm-l2", action="store_true",
                   help="keep the L2 cache warm between timed launches (default: flush it "
                        "before each, so small sizes are timed from memory)")
    b.add_argument("--end-to-end", action="store_true",
                   help="also NumPy round trips: copy GB/s vs pinned memory, matmul vs numpy.matmul")
    b.add_argument("--csv", default=None)
    b.add_argument("--json", default=None)
    b.add_argument("-v", "--verbose", action="store_true")
    b.add_argument("--profile", action="store_true",
                   help="count each kernel's global/shared memory traffic on the emulator as "
                        "Nsight Compute would and add the predicted H100 time (on cuda: beside "
                        "the measured time; docs/profile.md)")
    b.set_defaults(fn=cmd_bench)
    add_grade_parser(sub)
    r = sub.add_parser("run", help="build and run a whole CUDA program (FILE.cu); the exit code "
                                   "is the program's",
                       usage="python -m tiledmm run [nvcc's -I DIR -D X[=Y] -U X -std=... -O... "
                             "-arch/-gencode ... -Xcompiler X -l LIB] FILES... [--backend "
                             "emu|cuda] [--check] [--profile] [--timeout S] [--outdir DIR] "
                             "[-- ARGS...]")
    r.add_argument("files", nargs="+", metavar="FILES",
                   help="the program's .cu (and .cpp) files; headers are found as nvcc finds "
                        "them")
    r.add_argument("--outdir", default=None,
                   help="where the files the program writes go (default: beside the program)")
    r.add_argument("--backend", dest="run_backend", choices=["cuda", "emu"], default=None)
    r.add_argument("--check", action="store_true",
                   help="check mode: every launch checked (out-of-bounds, races, uninitialised "
                        "reads) and the host-side mistakes compute-sanitizer reports; on cuda, "
                        "under compute-sanitizer")
    r.add_argument("--profile", action="store_true",
                   help="emu: count each launch's traffic and predict its H100 time (stderr)")
    r.add_argument("--timeout", type=_timeout, default=None,
                   help="seconds (default: none on a terminal); 'none' for no limit")
    r.set_defaults(fn=cmd_run, program_args=[])   # after --: the program's own arguments
    argv = list(sys.argv[1:] if argv is None else argv)
    if "run" in argv and "--" in argv[argv.index("run"):]:   # the program's arguments, untouched
        cut = argv.index("--", argv.index("run"))
        argv, program_args = argv[:cut], argv[cut + 1:]
    else:
        program_args = None
    compiler_args = []
    if "run" in argv:   # nvcc's options, apart from run's own and the files
        at = argv.index("run") + 1
        try:
            compiler_args, rest = nvcc_args.split(argv[at:], RUN_VALUED, RUN_FLAGS)
        except nvcc_args.OptionError as exc:
            r.error(str(exc))
        argv = argv[:at] + rest
    args = parser.parse_args(argv)
    if args.command == "run":
        args.program_args = program_args or []
        args.compiler_args = compiler_args
    if args.command == "bench":
        check_bench_args(b, args)
    return args.fn(args) or 0


def _positive_int(text):
    """argparse type for --sizes: a size of 0 or less is refused with exit code 2."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"sizes must be 1 or more, got {value}")
    return value


def check_bench_args(parser, args):
    """Refuse (exit code 2, with the reason) what bench would otherwise run as an empty or
    unintended table."""
    if args.sizes and args.family not in ("matmul", "reduce"):
        parser.error("--sizes needs --family matmul (square sizes) or --family reduce "
                     "(lengths)")
    if not args.kernels:
        return
    if args.family == "none":
        parser.error("--kernels needs --family matmul, reduce or all")
    families = ["matmul", "reduce"] if args.family == "all" else [args.family]
    known = [k.name for f in families for k in tm.kernels(f)]
    for name in args.kernels:
        if name not in known:
            hint = _registry.did_you_mean(name, known)
            parser.error(f"unknown kernel {name!r} for --family {args.family}"
                         f"{' (' + hint + ')' if hint else ''}; choose from: {', '.join(known)}")
    backend = args.backend or tm.get_backend()
    for name in args.kernels:
        if name in _registry.CUDA_ONLY and backend != "cuda":
            parser.error(f"kernel {name!r} runs on the cuda backend only; this run uses "
                         f"{backend}")


if __name__ == "__main__":
    sys.exit(main())
