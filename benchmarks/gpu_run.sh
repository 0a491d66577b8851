#!/usr/bin/env bash
# One command for a GPU machine: build for this GPU, run the whole test suite on both
# backends, compute-sanitizer over every kernel, the demo, the benchmarks (kernels against
# cuBLAS and a device copy; NumPy round trips against pinned copies and numpy.matmul), and the
# notebooks with their outputs. Logs go to $OUT (or ./out); short tables come last.
#   usage: bash benchmarks/gpu_run.sh [all|test|pytest [FILES]|sanitize|bench|l2|callcost|lessons|cutlass|profile|programs|progcheck|tensor|samples|magics] [extra bench args]
#   test:  build, pytest (both backends), compute-sanitizer (memcheck, racecheck, synccheck,
#          initcheck) over every kernel; `pytest` and `sanitize` run its two halves apart (each
#          fits one 10-minute call of a lent machine)
#   bench: build (kept from `test` on the same machine), demo, bench, notebooks, l2
#   callcost: what one tm.matmul call costs beyond its kernel (benchmarks/call_cost.py)
#   l2:    the L2 flush's effect: each small size flushed (the default) and warm, one run
#          (benchmarks/l2_flush.py)
#   lessons: bench at the lessons' sizes (matmul 1024^3, reduce 2^24), and the time model's
#          prediction for this GPU's preset beside it, the lesson pairs' ratios last
#   cutlass: build with CUTLASS's headers from a carried nvidia-cutlass wheel (.whl/, the GPU
#          machine has no network), fast's configs against cuBLAS (fast_lab.py), then three runs
#          of bench for fast, cublas and cutlass at 2048, 4096, 8192 and 5000x3000x4000
#   profile: build, the emulator's profile counters against Nsight Compute for every kernel
#          (benchmarks/profile_vs_ncu.py), profile=True on cuda (tests/test_profile_ncu.py), and
#          bench --profile: measured H100 time beside the time predicted from counted traffic
#   programs: whole programs (tm.run) on both backends, stdout compared (benchmarks/programs_gpu.py)
#   progcheck: tm.run(check=True): each mistake of tests/programs/check/mistakes.cu on emu and
#          under compute-sanitizer on cuda, side by side (benchmarks/program_check_gpu.py), then
#          tests/test_program_check.py (its cuda tests need the GPU and compute-sanitizer)
#   tensor: tensor cores (issue 47): tests/test_wmma.py on both backends (emu against cuda bit
#          for bit, printing the fraction identical), compute-sanitizer over wmma and tf32x3,
#          tf32x3's accuracy against cuBLAS (benchmarks/tf32x3_accuracy.py), its tuning variants
#          (benchmarks/tf32x3_probe.cu), and bench of wmma,
#          tf32x3 and cublas at 4096 and 8192
#   samples: NVIDIA's cuda-samples (a carried checkout in .cuda-samples/, ignored by git) through
#          tm.run on cuda, each also built and run by nvcc itself (benchmarks/cuda_samples.py)
#   magics: the %%cuda magics on cuda through IPython's InteractiveShell, ncu/nsys included
#          (benchmarks/magics_gpu.py; needs IPython, and ncu/nsys on PATH for --profile)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
stage=${1:-all}; shift || true
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv

# libclang from a carried wheel (the GPU machine has none and no network): tm.compile and tm.run
# read CUDA source with it (pip download libclang --no-deps -d .whl; carry .whl).
clang_whl=$(ls .whl/libclang-*.whl 2>/dev/null | head -1)
if ! python3 -c "import clang.cindex" 2>/dev/null; then
    [ -n "$clang_whl" ] || { echo "no libclang: carry .whl/libclang-*.whl (pip download libclang --no-deps -d .whl)"; exit 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$clang_whl" \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# CUTLASS's headers (the cutlass rung) from a carried nvidia-cutlass wheel, for every stage.
whl=$(ls .whl/nvidia_cutlass-*.whl 2>/dev/null | head -1)
if [ -n "$whl" ]; then
    python3 -m zipfile -e "$whl" .whl/cutlass
    export TILEDMM_CUTLASS_INCLUDE=$PWD/.whl/cutlass/cutlass_library/source/include
elif [ "$stage" = cutlass ]; then
    echo "cutlass: no .whl/nvidia_cutlass-*.whl (pip download nvidia-cutlass --no-deps -d .whl)"; exit 1
fi
echo "== build (sm_$arch)"
TILEDMM_CUDA_ARCHS=$arch python3 setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }

if [ "$stage" = all ] || [ "$stage" = test ] || [ "$stage" = pytest ]; then
    echo "== tests (both backends)"
    # In parallel where pytest-xdist is there, except the tests that measure device memory:
    # other processes on the GPU would move their readings. Those run after, serially.
    # One line per test (-v) in the log, so a run cut off by the machine's time limit before
    # pytest's summary still names what failed; `pytest FILES...` runs only those files.
    workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8" || echo "")
    files=(); [ "$stage" = pytest ] && files=("$@")
    python3 -m pytest -v -rf $workers -m "not device_memory and not gpu_alone" --maxfail=20 -p no:cacheprovider \
        "${files[@]}" >"$OUT/pytest.log" 2>&1
    python3 -m pytest -v -rf -m "device_memory or gpu_alone" --maxfail=20 -p no:cacheprovider "${files[@]}" \
        >>"$OUT/pytest.log" 2>&1
    grep -E "^(FAILED|ERROR) |\] (FAILED|ERROR) |^=+ .* in [0-9.]+s" "$OUT/pytest.log" | tail -30
fi

if [ "$stage" = all ] || [ "$stage" = test ] || [ "$stage" = sanitize ]; then
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
    # In a real Jupyter kernel where nbclient and ipykernel are there (carried as wheels: the
    # GPU machine has no Jupyter), else with run_notebooks.py's exec() runner.
    if python3 -c "import nbclient, ipykernel, jupytext" 2>/dev/null; then
        python3 benchmarks/execute_notebooks.py --backend cuda >"$OUT/notebooks.log" 2>&1
    else
        python3 benchmarks/run_notebooks.py --backend cuda --keep-going >"$OUT/notebooks.log" 2>&1
    fi
    echo "notebooks: exit $?"; tail -9 "$OUT/notebooks.log"
    tar czf "$OUT/notebooks.tgz" notebooks/*.ipynb

    echo "== demo"
    python3 -m tiledmm demo 2>&1 | tee "$OUT/demo.log"

    echo "== bench"
    python3 -m tiledmm bench --end-to-end --csv "$OUT/bench.csv" "$@" | tee "$OUT/bench.txt"
fi

if [ "$stage" = all ] || [ "$stage" = bench ] || [ "$stage" = l2 ]; then
    echo "== the L2 flush: small sizes flushed (the default) beside warm (--warm-l2)"
    PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 benchmarks/l2_flush.py --backend cuda \
        --csv "$OUT/l2_flush.csv" | tee "$OUT/l2_flush.txt"
fi

if [ "$stage" = all ] || [ "$stage" = bench ] || [ "$stage" = callcost ]; then
    echo "== what one call costs beyond its kernel (device inputs; flushed and warm L2; torch beside)"
    PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 benchmarks/call_cost.py 2>&1 | tee "$OUT/call_cost.txt"
fi

if [ "$stage" = all ] || [ "$stage" = lessons ]; then
    echo "== the lesson pairs: predicted for this GPU's preset from counted traffic, beside measured"
    python3 -m tiledmm bench --family matmul --sizes 1024 --csv "$OUT/lessons_matmul.csv" \
        >"$OUT/lessons_bench.txt" 2>&1
    python3 -m tiledmm bench --family reduce --sizes 16777216 --csv "$OUT/lessons_reduce.csv" \
        >>"$OUT/lessons_bench.txt" 2>&1
    preset=$(python3 -c "from tiledmm.profiling import time_model as t; print(t.default_device()[0])")
    python3 benchmarks/predicted_vs_measured.py --device "$preset" \
        --csv "$OUT/lessons_matmul.csv" "$OUT/lessons_reduce.csv" \
        2>&1 | tee "$OUT/predicted_vs_measured.md" | tail -18
fi

if [ "$stage" = cutlass ]; then
    grep "kernel 'cutlass'" "$OUT/build.log"
    echo "== fast's configs against cuBLAS"
    python3 benchmarks/fast_lab.py --configs 0,4,6,7 2048 4096 8192 5000x3000x4000 2>&1 | tee "$OUT/fast_lab.txt"
    for run in 1 2 3; do
        echo "== bench run $run"
        python3 -c "
import sys, tiledmm.bench as b
rows = b.bench_matmul(sizes=[2048, 4096, 8192, (5000, 3000, 4000)], kernels=['fast', 'cublas', 'cutlass'])
for r in rows:
    print(r['kernel'], r['params'], f\"{r['M']}x{r['N']}x{r['K']}\", f\"{r['ms']:.3f} ms\", f\"{r['tflops']:.2f} TFLOP/s\",
          f\"{r['pct_cublas']:.1f}% of cuBLAS\" if r['pct_cublas'] else '', f\"err {r['max_rel_error']:.1e}\")
" 2>&1 | tee "$OUT/bench_cutlass_$run.txt"
    done
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

if [ "$stage" = all ] || [ "$stage" = progcheck ]; then
    echo "== check mode for programs: emu's findings beside compute-sanitizer's"
    python3 benchmarks/program_check_gpu.py --out "$OUT" 2>&1 | tee "$OUT/program_check_run.txt" | tail -40
    python3 -m pytest -q -p no:cacheprovider tests/test_program_check.py tests/test_grade_programs.py 2>&1 \
        | tee "$OUT/program_check_pytest.log" | tail -8
fi

if [ "$stage" = all ] || [ "$stage" = magics ]; then
    echo "== %%cuda magics (tests/magics/cells.py, the nvcc4jupyter-style notebook) on cuda"
    python3 benchmarks/magics_gpu.py --backend cuda --out "$OUT" 2>&1 | tee "$OUT/magics.txt" | tail -40
fi

if [ "$stage" = samples ]; then
    echo "== NVIDIA's samples: tm.run on cuda beside nvcc"
    [ -d .cuda-samples/Samples ] || { echo "samples: carry .cuda-samples (a cuda-samples checkout)"; exit 1; }
    python3 benchmarks/cuda_samples.py .cuda-samples --backend cuda --nvcc --jobs 8 --timeout 120 \
        --json "$OUT/samples_cuda.json" 2>&1 | tee "$OUT/samples_cuda.txt" | tail -44
fi

if [ "$stage" = tensor ]; then
    echo "== tensor cores: tests (emu against cuda)"
    python3 -m pytest -q -rA -s tests/test_wmma.py -p no:cacheprovider 2>&1 | tee "$OUT/tensor_pytest.log" \
        | grep -E "bit-identical|passed|failed|FAILED|Error" | tail -60
    echo "== tensor cores: compute-sanitizer"
    for tool in memcheck racecheck synccheck initcheck; do
        compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_cases.py \
            --kernels wmma tf32x3 >"$OUT/tensor_sanitizer_$tool.log" 2>&1
        echo "$tool: exit $?; $(grep 'ERROR SUMMARY' "$OUT/tensor_sanitizer_$tool.log" | tail -1)"
    done
    echo "== tensor cores: tf32x3 accuracy"
    PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 benchmarks/tf32x3_accuracy.py \
        --csv "$OUT/tf32x3_accuracy.csv" | tee "$OUT/tf32x3_accuracy.txt"
    echo "== tensor cores: tf32x3's tuning variants beside cuBLAS SGEMM, TF32 and FP16 (benchmarks/tf32x3_probe.cu)"
    # sm_90a on compute capability 9.0: the wgmma kernel's rows (an sm_90 build leaves them out)
    probe_arch=$arch; [ "$arch" = 90 ] && probe_arch=90a
    nvcc -std=c++17 -O3 -arch=sm_$probe_arch -Icuda -Itiledmm/native -Icsrc benchmarks/tf32x3_probe.cu \
        -lcublas -o "$OUT/tf32x3_probe" >"$OUT/tf32x3_probe_build.log" 2>&1 \
        && "$OUT/tf32x3_probe" 8192 | tee "$OUT/tf32x3_probe.txt"
    rm -f "$OUT/tf32x3_probe"
    echo "== tensor cores: bench"
    python3 -m tiledmm bench --family matmul --kernels cublas fast wmma tf32x3 --sizes 4096 8192 \
        --csv "$OUT/tensor_bench.csv" "$@" | tee "$OUT/tensor_bench.txt"
fi
