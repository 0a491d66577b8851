#!/usr/bin/env bash
# One command for a GPU machine: build for this GPU, run the whole test suite on both
# backends, compute-sanitizer over every kernel, the demo, the benchmarks (kernels against
# cuBLAS and a device copy; NumPy round trips against pinned copies and numpy.matmul), and the
# notebooks with their outputs. Logs go to $OUT (or ./out); short tables come last.
#   usage: bash benchmarks/gpu_run.sh [all|test|bench] [extra bench args]
#   test:  build, pytest (both backends), compute-sanitizer (memcheck, racecheck, synccheck,
#          initcheck) over every kernel
#   bench: build (kept from `test` on the same machine), demo, bench, notebooks
#   profile: build, the emulator's profile counters against Nsight Compute for every kernel
#          (benchmarks/profile_vs_ncu.py), profile=True on cuda (tests/test_profile_ncu.py), and
#          bench --profile: measured H100 time beside the time predicted from counted traffic
#   programs: whole programs (tm.run) on both backends, stdout compared (benchmarks/programs_gpu.py)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
stage=${1:-all}; shift || true
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv

echo "== build (sm_$arch)"
TILEDMM_CUDA_ARCHS=$arch python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }

if [ "$stage" = all ] || [ "$stage" = test ]; then
    echo "== tests (both backends)"
    # In parallel where pytest-xdist is there, except the tests that measure device memory:
    # other processes on the GPU would move their readings. Those run after, serially.
    workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8" || echo "")
    python3 -m pytest -q $workers -m "not device_memory" --maxfail=20 -p no:cacheprovider 2>&1 \
        | tee "$OUT/pytest.log" | tail -8
    python3 -m pytest -q -m device_memory --maxfail=20 -p no:cacheprovider 2>&1 \
        | tee -a "$OUT/pytest.log" | tail -8

    echo "== compute-sanitizer over every kernel"
    : >"$OUT/sanitizer.log"
    for tool in memcheck racecheck synccheck initcheck; do
        echo "=== $tool" >>"$OUT/sanitizer.log"
        start=$SECONDS
        compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_cases.py \
            >>"$OUT/sanitizer.log" 2>&1
        rc=$?
        echo "$tool: exit $rc in $((SECONDS - start)) s; $(grep 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
        [ $rc -eq 0 ] || grep -E "FAILED|Invalid|Race|error" "$OUT/sanitizer.log" | head -15
    done
    grep -c ': ok$' "$OUT/sanitizer.log" | xargs echo "variants ok (all tools):"
fi

if [ "$stage" = all ] || [ "$stage" = bench ]; then
    echo "== notebooks (executed on this backend, outputs saved)"
    python3 benchmarks/run_notebooks.py --backend cuda --keep-going >"$OUT/notebooks.log" 2>&1
    echo "notebooks: exit $?"; tail -3 "$OUT/notebooks.log"
    tar czf "$OUT/notebooks.tgz" notebooks/*.ipynb

    echo "== demo"
    python3 -m tiledmm demo 2>&1 | tee "$OUT/demo.log"

    echo "== bench"
    python3 -m tiledmm bench --end-to-end --csv "$OUT/bench.csv" "$@" | tee "$OUT/bench.txt"
fi

if [ "$stage" = all ] || [ "$stage" = profile ]; then
    echo "== profile=True on cuda (Nsight Compute)"
    python3 -m pytest -q tests/test_profile_ncu.py -p no:cacheprovider 2>&1 \
        | tee "$OUT/pytest_profile_ncu.log" | tail -3
    echo "== predicted (from counted traffic) beside measured"
    python3 -m tiledmm bench --family matmul --sizes 1024 --profile --csv "$OUT/bench_profile_matmul.csv" \
        >"$OUT/bench_profile_matmul.txt" 2>&1; echo "bench matmul: exit $?"
    python3 -m tiledmm bench --family reduce --sizes 16777216 --profile --csv "$OUT/bench_profile_reduce.csv" \
        >"$OUT/bench_profile_reduce.txt" 2>&1; echo "bench reduce: exit $?"
    python3 benchmarks/sass_memory_ops.py --out "$OUT"
    ncu --query-metrics >"$OUT/ncu_metrics.txt" 2>&1
    echo "== emulator counters against Nsight Compute, every kernel"
    python3 benchmarks/profile_vs_ncu.py --out "$OUT" 2>&1 | tee "$OUT/profile_vs_ncu.txt" | tail -60
fi

if [ "$stage" = all ] || [ "$stage" = programs ]; then
    echo "== whole programs (tm.run) on emu and cuda: the same stdout"
    python3 benchmarks/programs_gpu.py --out "$OUT" 2>&1 | tee "$OUT/programs.txt" | tail -20
fi
