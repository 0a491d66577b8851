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
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

echo "== build (sm_$arch)"
TILEDMM_CUDA_ARCHS=$arch python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }

echo "== tests (both backends)"
python3 -m pytest -q -x -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -5

echo "== compute-sanitizer (memcheck, racecheck, synccheck) over every kernel"
for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_cases.py \
        >"$OUT/sanitizer_$tool.log" 2>&1
    echo "$tool: exit $? ($(grep -c 'ERROR SUMMARY: 0 errors' "$OUT/sanitizer_$tool.log") clean summaries)"
done

echo "== demo"
python3 -m tiledmm demo 2>&1 | tee "$OUT/demo.log"

echo "== bench"
python3 -m tiledmm bench --csv "$OUT/bench.csv" --json "$OUT/bench.json" "$@" | tee "$OUT/bench.txt"
