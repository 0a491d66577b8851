#!/usr/bin/env bash
# One command for a GPU machine: build for this GPU, run the whole test suite on both
# backends, run compute-sanitizer over every kernel, run the benchmark and the demo.
# Logs go to $OUT (or ./out); the short table comes last.
#   usage: bash benchmarks/gpu_run.sh [extra bench args]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv

echo "== build (sm_$arch)"
TILEDMM_CUDA_ARCHS=$arch python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }

echo "== tests (both backends)"
python3 -m pytest -q --maxfail=20 -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -15

echo "== compute-sanitizer (memcheck, racecheck, synccheck) over every kernel"
: >"$OUT/sanitizer.log"
for tool in memcheck racecheck synccheck initcheck; do
    echo "=== $tool" >>"$OUT/sanitizer.log"
    compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_cases.py \
        >>"$OUT/sanitizer.log" 2>&1
    rc=$?
    echo "$tool: exit $rc, $(grep -c ': ok$' "$OUT/sanitizer.log") kernel variants so far;" \
         "$(grep 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
    [ $rc -eq 0 ] || tail -15 "$OUT/sanitizer.log"
done

echo "== demo"
python3 -m tiledmm demo 2>&1 | tee "$OUT/demo.log"

echo "== bench"
python3 -m tiledmm bench --csv "$OUT/bench.csv" "$@" | tee "$OUT/bench.txt"
