"""Check mode (tm.compile(..., check=True), emulator only) and tm.check_matmul / tm.check_reduce
on the lectures' own kernels, typed as a student would (with only the fixes that make them
compile), and on correct ones:
- a check belongs to one launch: threads checking one kernel at once get their own verdicts;
- out-of-bounds accesses say whether they read or wrote;
- write-write races in global memory (two blocks, or two threads of a block between barriers);
- reads of shared memory that no thread of the block wrote;
- outputs a launch never wrote, in the checker's reports;
- the lectures' in-place, multi-pass reductions graded by check_reduce;
- casts of checked parameters compile, and reports name the student's types.
"""
import threading

import numpy as np
import pytest

import tiledmm as tm

pytestmark = pytest.mark.filterwarnings("ignore")

SCALE = r"""
__global__ void scale(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def _report(kernel, *args, **kwargs):
    """The KernelError text of a launch that must fail."""
    with pytest.raises(tm.KernelError) as info:
        kernel(*args, backend="emu", **kwargs)
    return str(info.value)


# ---- issue 18: one check per launch ----

def test_threads_checking_one_kernel_get_their_own_verdicts():
    kernel = tm.compile(SCALE, backend="emu", check=True, isolate=False)
    n = 1 << 15
    x = np.ones(n, np.float32)
    verdicts = {"buggy": [], "correct": []}
    start = threading.Barrier(2)

    def run(kind):
        start.wait()
        for _ in range(60):
            y = np.zeros(n, np.float32)
            # the buggy call claims one element more than the arrays hold: x[n] is read
            count = n + 1 if kind == "buggy" else n
            try:
                kernel((n + 256) // 256, 256, x, y, 2.0, count, backend="emu")
                verdicts[kind].append("passed" if np.all(y == 2) else "wrong")
            except tm.KernelError as exc:
                verdicts[kind].append(str(exc))

    threads = [threading.Thread(target=run, args=(k,)) for k in verdicts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert verdicts["correct"] == ["passed"] * 60, [v for v in verdicts["correct"] if v != "passed"][:3]
    assert len(verdicts["buggy"]) == 60
    for text in verdicts["buggy"]:
        assert f"out-of-bounds read of x[{n}]" in text, text
