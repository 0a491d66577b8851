"""Check mode for whole programs on both backends (issue 32): each mistake of
tests/programs/check/mistakes.cu run with tm.run(check=True) on emu (tiledmm's checks) and on
cuda (compute-sanitizer memcheck, then initcheck), their findings side by side, kind and line.
Run by benchmarks/gpu_run.sh progcheck on the GPU machine; on a machine without a GPU or without
compute-sanitizer the cuda column says why."""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import tiledmm as tm  # noqa: E402

MISTAKES = os.path.join(ROOT, "tests", "programs", "check", "mistakes.cu")
MODES = ["ok", "oob", "past_end", "wrong_kind", "checked_copy", "uninit", "unchecked_launch",
         "checked_launch", "race", "leak"]


def findings(mode, backend):
    try:
        r = tm.run(MISTAKES, args=[mode], backend=backend, check=True, timeout=300)
    except (RuntimeError, OSError) as exc:
        return [f"not run: {exc}"[:160]]
    return [f"{p['kind']}@{p['line']}: {p['message'][:140]}" for p in r.problems] or ["(none)"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=None, help="also write the table to OUT/program_check.txt")
    args = ap.parse_args()
    lines = []
    for mode in MODES:
        lines.append(f"== {mode}")
        for backend in ("emu", "cuda"):
            lines += [f"  {backend:4} {f}" for f in findings(mode, backend)]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(os.path.join(args.out, "program_check.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
