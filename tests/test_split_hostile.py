"""Hostile and unusual student kernels against the barrier split (issue 34: the source transform
of tiledmm/toolchain/split/analysis.py and split/transform.py). Each kernel runs twice: as
tm.compile builds it (the thread loops where the transform applies) and built with
TILEDMM_EMU_SPLIT=0 (the fibers: one fiber per CUDA thread, the reference semantics). Both
must give the same bits and NumPy's answer (float64 reference, tolerance growing with the
sum's length), or fail alike ("no thread can proceed"), and say which path they took.

The first part holds what the transform got wrong when these tests were written (session 10's
review: each split silently differed from the fibers); each is now refused (the fibers, with
the reason asserted) or split right.
Every launch has a time limit (TIMEOUT_S); programs have RUN_S."""
import os

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.toolchain.split.transform import split_kernel

TIMEOUT_S = 30
RUN_S = 120
FULL = "0xffffffffu"


def _launch(src, name, grid, block, make_args, fibers):
    """(result, [arrays after the launch]) of one launch on fresh arguments, on the kernel as
    tm.compile builds it or (fibers) with TILEDMM_EMU_SPLIT=0, which tm.compile reads at each
    call (its caches key on it)."""
    args = make_args()
    saved = os.environ.get("TILEDMM_EMU_SPLIT")
    if fibers:
        os.environ["TILEDMM_EMU_SPLIT"] = "0"
    try:
        res = tm.compile(src, name, backend="emu")(grid, block, *args, timeout=TIMEOUT_S)
    finally:
        if saved is None:
            os.environ.pop("TILEDMM_EMU_SPLIT", None)
        else:
            os.environ["TILEDMM_EMU_SPLIT"] = saved
    return res, [a for a in args if isinstance(a, np.ndarray)]


def _same_on_both_paths(src, name, grid, block, make_args, path=None):
    """The arrays after the launch on the split build, asserted bit-identical to the fibers'
    and on `path` ("thread loops", "fibers", or None: either, for kernels the transform must
    either refuse or split right). A kernel the transform refused is built without a split:
    its TILEDMM_EMU_SPLIT=0 build would be the same code, and is not made."""
    res, outs = _launch(src, name, grid, block, make_args, fibers=False)
    if path is not None:
        assert res.launch.path == path, res.launch.path_reason
    if res.launch.path == "fibers":
        assert res.launch.path_reason
        return outs, res
    fib, fib_outs = _launch(src, name, grid, block, make_args, fibers=True)
    assert (fib.launch.path, fib.launch.path_reason) == ("fibers", "TILEDMM_EMU_SPLIT=0")
    if path is not None:
        assert res.launch.path == path, res.launch.path_reason
    for a, b in zip(outs, fib_outs):
        np.testing.assert_array_equal(a, b)
    return outs, res


def _fail_alike(src, name, grid, block, make_args, path=None):
    """Both builds fail with the fibers' divergence report."""
    errors = []
    for fibers in (False, True):
        with pytest.raises(tm.KernelError, match="no thread can proceed") as exc:
            _launch(src, name, grid, block, make_args, fibers)
        errors.append(str(exc.value))
    return errors


def _x(n, seed):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def _reverse_args():
    return [_x(64, 1), np.zeros(64, np.float32)]


# ---------------------------------------------------------------------------------------------
# What the transform got wrong (the review's findings; refused or split right since).
# ---------------------------------------------------------------------------------------------

# An in-place rotation: `v` is "recomputed" in the thread loop after the barrier (its
# initializer reads only threadIdx and a parameter never written), but the memory it reads has
# been rewritten by then: thread t reads what thread t-1 stored, and zeros sweep the array.
ROTATE = r"""
__global__ void rotate(float *data)
{
    float v = data[threadIdx.x];
    __syncthreads();
    data[(threadIdx.x + 1) % blockDim.x] = v;
}
"""


def test_a_local_read_from_global_memory_that_the_kernel_rewrites():
    x = _x(64, 2)
    outs, _ = _same_on_both_paths(ROTATE, "rotate", 1, 64, lambda: [x.copy()])
    np.testing.assert_array_equal(outs[0], np.roll(x, 1))


# The same local as a warp if's predicate (split_analysis._warp_predicate allows recomputed
# locals): lanes 0-31 read 0 before the kernel writes 100 over it, the split's predicate loop
# reads 100 and no warp takes the branch.
WARP_IF_FROM_MEMORY = r"""
__global__ void select(float *x, float *out)
{
    __shared__ float s[64];
    int sel = (int)x[threadIdx.x];
    x[threadIdx.x] = 100.0f;
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if (sel < 32) {
        float v = s[threadIdx.x] + s[threadIdx.x + 32];
        __syncwarp();
        s[threadIdx.x] = v;
        __syncwarp();
    }
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
"""


def test_a_warp_if_predicate_read_from_memory_the_kernel_rewrites():
    """Refused (the fibers); the kernel's name is also POSIX select's (tm.compile's launcher
    names it through a pointer of its exact type: tests/test_libc_kernel_names.py)."""
    sel = np.where(np.arange(64) < 32, 0.0, 64.0).astype(np.float32)
    outs, _ = _same_on_both_paths(WARP_IF_FROM_MEMORY, "select", 1, 64,
                                  lambda: [sel.copy(), np.zeros(64, np.float32)], path="fibers")
    t = np.arange(64)
    np.testing.assert_array_equal(outs[1], np.where(t < 32, 2 * t + 32, t).astype(np.float32))


def test_a_warp_if_predicate_read_from_memory_keeps_the_fibers():
    """The analysis alone: the predicate `sel` reads global memory, so it is no recomputable
    local."""
    reason = split_kernel(WARP_IF_FROM_MEMORY, "select").reason
    assert "condition reads more than the thread's index" in reason, reason


# A parameter written per thread: the split function's parameters are one per block.
PARAM_SCALAR = r"""
__global__ void param(float *out, int n)
{
    __shared__ float s[64];
    n += threadIdx.x;
    s[threadIdx.x] = n;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x] + n;
}
"""



def test_a_parameter_written_per_thread():
    outs, res = _same_on_both_paths(PARAM_SCALAR, "param", 1, 64,
                                    lambda: [np.zeros(64, np.float32), np.int32(5)])
    assert res.launch.path == "fibers" and "parameter n is written" in res.launch.path_reason
    np.testing.assert_array_equal(outs[0], np.full(64, 73.0, np.float32))


# A block-uniform local (`int idx = 0;`, kept at block level between the thread loops) written
# per thread in ways split_analysis._find_writes (tokens around the name) does not see.
HIDDEN_WRITE = r"""
#define SET(a, b) a = b
__device__ void set_to_thread(int &v) { v = threadIdx.x; }
__global__ void hidden(const float *x, float *out)
{
    __shared__ float s[64];
    int idx = 0;
    WRITE;
    s[idx] = x[idx];
    __syncthreads();
    out[idx] = s[63 - idx];
}
"""


@pytest.mark.parametrize("write", ["SET(idx, threadIdx.x)", "set_to_thread(idx)"])
def test_a_uniform_local_written_where_the_analysis_does_not_look(write):
    src = HIDDEN_WRITE.replace("WRITE", write)
    outs, res = _same_on_both_paths(src, "hidden", 1, 64, _reverse_args)
    if write.startswith("SET"):   # the macro's statement: refused (split_analysis._check_body)
        assert res.launch.path == "fibers" and "macro" in res.launch.path_reason
    else:   # idx written through the reference: a per-thread variable
        assert res.launch.path == "thread loops", res.launch.path_reason
    np.testing.assert_array_equal(outs[1], outs[0][::-1])


@pytest.mark.parametrize("write", ["int &r = idx; r = threadIdx.x", "(idx) = threadIdx.x",
                                   "*(&idx) = threadIdx.x", "int *p = &idx; *p += threadIdx.x"])
def test_a_uniform_local_written_through_an_alias_or_parentheses_is_per_thread(write):
    """split_analysis._find_writes decides from the AST: every use that is not a plain read
    makes idx written, so it is no block-uniform local: a per-thread variable (issue 34)."""
    src = HIDDEN_WRITE.replace("WRITE", write)
    outs, res = _same_on_both_paths(src, "hidden", 1, 64, _reverse_args, path="thread loops")
    np.testing.assert_array_equal(outs[1], outs[0][::-1])


# The loop variable of a loop with barriers (kept at block level) stepped through a reference:
# on fibers each thread's i runs 1, 3, 5, 7; split, one i is stepped by all 64 threads.
LOOP_VAR_REF = r"""
__global__ void steps(float *out)
{
    __shared__ float s[64];
    float acc = 0.0f;
    for (int i = 0; i < 8; ++i) {
        int &r = i;
        r += 1;
        s[threadIdx.x] = i * (threadIdx.x + 1.0f);
        __syncthreads();
        acc += s[(threadIdx.x + 1) % 64];
        __syncthreads();
    }
    out[threadIdx.x] = acc;
}
"""


def test_a_loop_variable_stepped_through_a_reference():
    outs, res = _same_on_both_paths(LOOP_VAR_REF, "steps", 1, 64,
                                    lambda: [np.zeros(64, np.float32)])
    assert res.launch.path == "fibers" and "changes its variable" in res.launch.path_reason
    want = 16.0 * ((np.arange(64) + 1) % 64 + 1)
    np.testing.assert_array_equal(outs[0], want.astype(np.float32))


# A loop variable that shadows a local another, recomputed, local depends on: the thread loop
# recomputes `int t = threadIdx.x; int idx = ... t;` at its top, and that `t` then hides the
# loop's `t` in the loop body.
SHADOW = r"""
__global__ void shadow(const float *x, float *out)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    int idx = blockIdx.x * 64 + t;
    float acc = 0.0f;
    for (int t = 0; t < 4; ++t) {
        s[threadIdx.x] = x[idx] * (t + 1);
        __syncthreads();
        acc += s[(threadIdx.x + 1) % 64];
        __syncthreads();
    }
    out[idx] = acc;
}
"""


def test_a_loop_variable_shadowing_a_recomputed_local():
    outs, res = _same_on_both_paths(SHADOW, "shadow", 1, 64, _reverse_args, path="fibers")
    assert "`t` names two things" in res.launch.path_reason
    x = outs[0]
    np.testing.assert_allclose(outs[1], 10.0 * np.roll(x, -1), rtol=1e-6)


# A local named like a built-in: split_analysis._uniform_expr takes any name in
# UNIFORM_BUILTINS as block-uniform, so a barrier loop over `warpSize = threadIdx.x % 2`
# (a divergent barrier: fibers report it) runs as a uniform loop of the emulator's 32 trips.
WARPSIZE_SHADOW = r"""
__global__ void trips(const float *x, float *out)
{
    __shared__ float s[64];
    const int warpSize = threadIdx.x % 2;
    float acc = 0.0f;
    for (int i = 0; i < warpSize; ++i) {
        s[threadIdx.x] = x[threadIdx.x];
        __syncthreads();
        acc += s[63 - threadIdx.x];
    }
    out[threadIdx.x] = acc;
}
"""


def test_a_local_shadowing_warpsize_in_a_barrier_loop_fails_alike():
    _fail_alike(WARPSIZE_SHADOW, "trips", 1, 64, _reverse_args)
    assert "the name warpSize is declared" in split_kernel(WARPSIZE_SHADOW, "trips").reason


# Two kernels of a file often share a macro redefined between them; tm.compile appends the split
# after the whole file, where the macro has its last value (whole programs insert it after the
# kernel: test_a_macro_redefined_after_the_kernel_in_a_program).
REDEFINED = r"""
#define SCALE 2.0f
__global__ void scaled(const float *x, float *out)
{
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x] * SCALE;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
}
#undef SCALE
#define SCALE 3.0f
"""


def test_a_macro_redefined_after_the_kernel():
    outs, _ = _same_on_both_paths(REDEFINED, "scaled", 1, 64, _reverse_args, path="thread loops")
    np.testing.assert_array_equal(outs[1], (outs[0] * np.float32(2.0))[::-1])


# A `return` inside a macro: the transform rewrites the RETURN_STMT's extent (the whole macro
# invocation, condition included) as `goto next thread`: every thread skips its work.
GUARD = r"""
#define GUARD(c) if (c) return
__global__ void guarded(const float *x, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    GUARD(i >= n);
    out[i] = 2.0f * x[i];
}
"""


def test_a_return_hidden_in_a_macro():
    n = 100
    outs, res = _same_on_both_paths(GUARD, "guarded", 2, 64,
                                    lambda: [_x(128, 4), np.zeros(128, np.float32), np.int32(n)],
                                    path="fibers")
    assert "from a macro's expansion" in res.launch.path_reason
    want = np.zeros(128, np.float32)
    want[:n] = 2.0 * outs[0][:n]
    np.testing.assert_array_equal(outs[1], want)


# A plain `#undef` after the kernel: the split sits right after the kernel, where the macro is
# still defined (appended after the file, it did not compile: fibers).
UNDEFINED_AFTER = REDEFINED.replace("#define SCALE 3.0f\n", "")


def test_a_macro_undefined_after_the_kernel_splits():
    outs, _ = _same_on_both_paths(UNDEFINED_AFTER, "scaled", 1, 64, _reverse_args,
                                  path="thread loops")
    np.testing.assert_array_equal(outs[1], (outs[0] * np.float32(2.0))[::-1])


# What the thread loops would copy out of its place: a macro redefined inside the kernel (the
# split after the kernel sees the last value), a local type used across a barrier (a thread
# loop's scope; recomputed locals are emitted before it), a local hiding a parameter.
IN_KERNEL = {
    "define": r"""
#define SCALE 2.0f
__global__ void k(const float *x, float *out)
{
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x] * SCALE;
#undef SCALE
#define SCALE 3.0f
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x] * SCALE;
}
""",
    "typedef": r"""
__global__ void k(const float *x, float *out)
{
    __shared__ float s[64];
    typedef float real;
    real v = x[threadIdx.x] * 2.0f;
    s[threadIdx.x] = v;
    __syncthreads();
    real w = s[63 - threadIdx.x] * 3.0f;
    out[threadIdx.x] = w;
}
""",
    "parameter": r"""
__global__ void k(const float *x, float *out, int n)
{
    __shared__ float s[64];
    int j = (threadIdx.x + n) % 64;
    for (int n = 0; n < 1; ++n) {
        s[threadIdx.x] = x[j] * 2.0f;
        __syncthreads();
        out[threadIdx.x] = s[63 - threadIdx.x] * 3.0f;
        __syncthreads();
    }
}
""",
}
IN_KERNEL["unroll"] = r"""
__global__ void k(const float *x, float *out)
{
    __shared__ float s[64];
#pragma unroll
    s[threadIdx.x] = x[threadIdx.x] * 2.0f;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x] * 3.0f;
}
"""
IN_KERNEL_REASON = {"define": "#undef inside the kernel", "typedef": "a type declared inside",
                    "parameter": "`n` names two things",
                    "unroll": "expected a for, while, or do-while loop to follow '#pragma unroll'"}


@pytest.mark.parametrize("what", sorted(IN_KERNEL))
def test_text_the_thread_loops_would_move_keeps_the_fibers(what):
    shift = 1 if what == "parameter" else 0   # out[t] = 6 x[(63 - t + shift) % 64]
    outs, res = _same_on_both_paths(
        IN_KERNEL[what], "k", 1, 64,
        lambda: [*_reverse_args()] + ([np.int32(shift)] if what == "parameter" else []),
        path="fibers")
    assert IN_KERNEL_REASON[what] in res.launch.path_reason
    want = 6.0 * np.roll(outs[0].astype(np.float64), -shift)[::-1]
    np.testing.assert_array_equal(outs[1], want.astype(np.float32))

# A local named like the transform's own variables (the emitted code's tm_threadIdx_, behind
# the threadIdx macro in the split function): every thread after it writes out[0].
RESERVED_NAME = r"""
__global__ void named(const float *x, float *out)
{
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    uint3 tm_threadIdx_ = make_uint3(0, 0, 0);
    out[threadIdx.x] = s[63 - threadIdx.x] + tm_threadIdx_.x;
}
"""


def test_a_local_named_like_the_transforms_variables():
    outs, res = _same_on_both_paths(RESERVED_NAME, "named", 1, 64, _reverse_args)
    assert res.launch.path == "fibers" and "tm_threadIdx_" in res.launch.path_reason and \
        "reserved" in res.launch.path_reason
    np.testing.assert_array_equal(outs[1], outs[0][::-1])


# A last warp at warp granularity: a helper with full-mask __syncwarp()s, each step's reads and
# writes in separate stretches (no race inside the warp); inlined at its call.
BLOCK_SUM_LAST_WARP = r"""
__device__ void last_warp(volatile float *s, int t)
{
    float v;
    v = s[t] + s[t + 32]; __syncwarp(); s[t] = v; __syncwarp();
    v = s[t] + s[t + 16]; __syncwarp(); s[t] = v; __syncwarp();
    v = s[t] + s[t + 8]; __syncwarp(); s[t] = v; __syncwarp();
    v = s[t] + s[t + 4]; __syncwarp(); s[t] = v; __syncwarp();
    v = s[t] + s[t + 2]; __syncwarp(); s[t] = v; __syncwarp();
    v = s[t] + s[t + 1]; __syncwarp(); s[t] = v; __syncwarp();
}
"""


# A warp helper's parameters become `tm_wl_<name>` when it is inlined (inline_warp_helpers):
# a kernel local of that name, passed as the argument, initialises the copy with itself.
WL_NAME = BLOCK_SUM_LAST_WARP + r"""
__global__ void wl_named(const float *x, float *out)
{
    __shared__ float s[64];
    int tm_wl_t = threadIdx.x;
    s[tm_wl_t] = x[tm_wl_t];
    __syncthreads();
    if (tm_wl_t < 32) last_warp(s, tm_wl_t);
    if (tm_wl_t == 0) out[0] = s[0];
}
"""


def test_a_local_named_like_an_inlined_helpers_parameter():
    x = _x(64, 13)
    outs, res = _same_on_both_paths(WL_NAME, "wl_named", 1, 64,
                                    lambda: [x.copy(), np.zeros(1, np.float32)])
    assert res.launch.path == "fibers" and "tm_wl_t" in res.launch.path_reason and \
        "reserved" in res.launch.path_reason
    assert abs(outs[1][0] - x.astype(np.float64).sum()) <= 1e-5 * np.abs(x).sum()


# decltype of a per-thread variable names the thread loop's reference to its element.
DECLTYPE = r"""
__global__ void declared(const float *x, float *out)
{
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    float v = s[63 - threadIdx.x] + 1.0f;
    __syncthreads();
    decltype(v) w = v;
    w *= 2.0f;
    out[threadIdx.x] = v + w;
}
"""


def test_decltype_of_a_variable_live_across_a_barrier():
    outs, res = _same_on_both_paths(DECLTYPE, "declared", 1, 64, _reverse_args)
    assert res.launch.path == "fibers" and "decltype" in res.launch.path_reason
    v = outs[0][::-1] + np.float32(1)
    np.testing.assert_array_equal(outs[1], v + v * np.float32(2))


# A "full" mask through a const unsigned short initialised with 0xffffffffu: its value is
# 0xffff (g++ warns), a partial mask; split_analysis._full_mask reads only the initializer's
# tokens. On fibers lanes 16-31 are not in the group and the warp never completes.
SHORT_MASK = r"""
__global__ void short_mask(const float *x, float *out)
{
    const unsigned short M = 0xffffffffu;
    float v = x[threadIdx.x];
    v += __shfl_down_sync(M, v, 1);
    out[threadIdx.x] = v;
}
"""


@pytest.mark.filterwarnings("ignore::tiledmm.CompileWarning")   # g++'s -Woverflow on M
def test_a_mask_variable_too_narrow_for_a_full_mask_fails_alike():
    _fail_alike(SHORT_MASK, "short_mask", 1, 32, lambda: [_x(32, 5), np.zeros(32, np.float32)])
    assert "__shfl_down_sync" in split_kernel(SHORT_MASK, "short_mask").reason


# A grid-stride loop whose condition has a side effect (`i++ < n`): run as rounds, the
# condition is evaluated once more per thread at each round's end (barrier_split._round_loop).
ROUND_SIDE_EFFECT = r"""
__global__ void rounds(const float *x, float *out, int n)
{
    for (int i = threadIdx.x; i++ < n; i += blockDim.x)
        out[i - 1] += x[i - 1] + 1.0f;
}
"""


def test_a_grid_stride_condition_with_a_side_effect():
    n, threads = 200, 8
    x = np.arange(n, dtype=np.float32)
    outs, _ = _same_on_both_paths(ROUND_SIDE_EFFECT, "rounds", 1, threads,
                                  lambda: [x.copy(), np.zeros(n, np.float32), np.int32(n)])
    want = np.zeros(n, np.float32)
    for t in range(threads):   # each thread's iterations as C++ runs them
        i = t
        while True:
            i += 1
            if not i - 1 < n:
                break
            want[i - 1] += x[i - 1] + 1.0
            i += threads
    np.testing.assert_array_equal(outs[1], want)


# ---------------------------------------------------------------------------------------------
# What the transform gets right: split with the fibers' bits, or kept on the fibers.
# ---------------------------------------------------------------------------------------------

def _shfl_source(op, lane, arg, width):
    """The source lane of a shuffle as the emulator takes it (emu/cuda_emu.h shfl_source; a
    width that is not a power of two in 1..32 is 32), or the lane itself."""
    wd = width if 0 < width <= 32 and width & (width - 1) == 0 else 32
    seg = lane & ~(wd - 1)
    if op == "idx":
        return seg + (arg & (wd - 1))
    if op == "down":
        return lane + arg if (lane & (wd - 1)) + arg < wd else lane
    src = lane ^ arg   # xor
    return src if src < seg + wd else lane


# Lane arguments read from shared memory and from another shuffle's result, a width of 6 (not a
# power of two) and of 0.
SHUFFLE_LANES = r"""
__global__ void lanes(const float *x, float *out, int *got)
{
    __shared__ int src[64];
    float v = x[threadIdx.x];
    src[threadIdx.x] = (threadIdx.x * 5 + 1) % 32;
    __syncthreads();
    float a = __shfl_sync(FULL, v, src[threadIdx.x], 6);
    int k = __shfl_xor_sync(FULL, (int)threadIdx.x, 3);
    float b = __shfl_sync(FULL, v, k);
    float c = __shfl_down_sync(FULL, v, 1, 0);
    got[threadIdx.x] = k;
    out[threadIdx.x] = a + 10.0f * b + 100.0f * c;
}
""".replace("FULL", FULL)


def test_shuffle_lanes_from_shared_memory_and_another_shuffle_and_odd_widths():
    x = _x(64, 6)
    outs, _ = _same_on_both_paths(SHUFFLE_LANES, "lanes", 1, 64,
                                  lambda: [x.copy(), np.zeros(64, np.float32),
                                           np.zeros(64, np.int32)], path="thread loops")
    want, got = np.zeros(64), np.zeros(64, np.int64)
    for t in range(64):
        base, lane = t & ~31, t & 31
        got[t] = base + _shfl_source("xor", lane, 3, 32)
        a = x[base + _shfl_source("idx", lane, (t * 5 + 1) % 32, 6)]
        b = x[base + _shfl_source("idx", lane, int(got[t]), 32)]
        c = x[base + _shfl_source("down", lane, 1, 0)]
        want[t] = np.float32(np.float32(a + np.float32(10) * b) + np.float32(100) * c)
    np.testing.assert_array_equal(outs[2], got)
    np.testing.assert_array_equal(outs[1], want.astype(np.float32))


# A block sum: a strided sum per thread, a tree over __syncthreads, the last warp at warp
# granularity (BLOCK_SUM_LAST_WARP), the
# thread's index from a 3-D block, blocks whose size is not a multiple of 32.
BLOCK_SUM = BLOCK_SUM_LAST_WARP + r"""
__global__ void block_sum(const float *x, float *out, int n)
{
    __shared__ float s[1024];
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int nt = blockDim.x * blockDim.y * blockDim.z;
    for (int j = t; j < 1024; j += nt) s[j] = 0.0f;
    float a = 0.0f;
    for (int i = t; i < n; i += nt) a += x[i];
    __syncthreads();
    s[t] = a;
    __syncthreads();
    for (int stride = 512; stride > 32; stride /= 2) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t < 32) last_warp(s, t);
    if (t == 0) out[0] = s[0];
}
"""


@pytest.mark.parametrize("block", [(5, 7, 3), (33, 1, 1), (1024, 1, 1)])
def test_a_block_sum_with_a_warp_granular_last_warp_in_odd_and_3d_blocks(block):
    n = 3001
    x = _x(n, 8)
    outs, _ = _same_on_both_paths(BLOCK_SUM, "block_sum", 1, block,
                                  lambda: [x.copy(), np.zeros(1, np.float32), np.int32(n)],
                                  path="thread loops")
    want = x.astype(np.float64).sum()
    assert abs(outs[1][0] - want) <= 1e-6 * np.log2(n) * np.abs(x).sum() + 1e-6


# The lecture's last warp as written before Volta: volatile shared memory, no __syncwarp. A
# GPU's lockstep warp sums; the emulator runs each lane of the warp to its end in turn on both
# paths (no synchronisation to stop at), so each lane reads its neighbours' values as they are
# then. Both paths must give that same answer.
VOLATILE_WARP = r"""
__global__ void volatile_warp(const float *x, float *out)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    if (t < 32) {
        volatile float *v = s;
        v[t] += v[t + 32]; v[t] += v[t + 16]; v[t] += v[t + 8];
        v[t] += v[t + 4]; v[t] += v[t + 2]; v[t] += v[t + 1];
    }
    __syncthreads();
    out[t] = s[t];
}
"""


def test_a_volatile_last_warp_without_syncwarp_runs_lanes_in_turn_on_both_paths():
    x = _x(64, 9)
    outs, _ = _same_on_both_paths(VOLATILE_WARP, "volatile_warp", 1, 64,
                                  lambda: [x.copy(), np.zeros(64, np.float32)],
                                  path="thread loops")
    s = x.copy()
    for t in range(32):   # lane after lane, each to its end
        for d in (32, 16, 8, 4, 2, 1):
            s[t] = np.float32(s[t] + s[t + d])
    np.testing.assert_array_equal(outs[1], s)


# Recursion in a helper, a block of 33 threads (a partial second warp) and of 1, a shuffle
# whose partner lane does not exist.
RECURSIVE = r"""
__device__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__global__ void recursive(const float *x, float *out)
{
    __shared__ float s[64];
    float v = x[threadIdx.x] * fib(threadIdx.x % 12);
    v += __shfl_down_sync(FULL, v, 1);
    s[threadIdx.x] = v;
    __syncthreads();
    out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}
""".replace("FULL", FULL)


@pytest.mark.parametrize("threads", [1, 33])
def test_recursion_and_a_partial_warp(threads):
    x = _x(threads, 10)
    outs, _ = _same_on_both_paths(RECURSIVE, "recursive", 1, threads,
                                  lambda: [x.copy(), np.zeros(threads, np.float32)],
                                  path="thread loops")
    fib = [0, 1]
    while len(fib) < 12:
        fib.append(fib[-1] + fib[-2])
    v = np.array([np.float32(x[t] * np.float32(fib[t % 12])) for t in range(threads)],
                 np.float32)
    w = v.copy()
    for t in range(threads):
        base, lane = t & ~31, t & 31
        lanes = min(32, threads - base)
        if lane + 1 < 32 and lane + 1 < lanes:
            w[t] = v[t] + v[t + 1]
        else:
            w[t] = v[t] + v[t]   # no partner lane: the lane's own value
    np.testing.assert_array_equal(outs[1], w[::-1])


# A ballot and __syncthreads_count whose predicates read shared memory: fibers (a barrier with
# a value), the same counts.
def test_votes_and_syncthreads_count_over_shared_memory():
    src = r"""
__global__ void votes(const float *x, unsigned *ballots, int *counts)
{
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    unsigned b = __ballot_sync(FULL, s[threadIdx.x ^ 1] > 0.0f);
    int c = __syncthreads_count(s[(threadIdx.x + 7) % 64] > 0.5f);
    ballots[threadIdx.x] = b;
    counts[threadIdx.x] = c;
}
""".replace("FULL", FULL)
    x = _x(64, 11)
    outs, res = _same_on_both_paths(src, "votes", 1, 64,
                                    lambda: [x.copy(), np.zeros(64, np.uint32),
                                             np.zeros(64, np.int32)], path="fibers")
    assert "__syncthreads_count" in res.launch.path_reason
    pos = x > 0
    want_b = [sum(1 << k for k in range(32) if pos[(w * 32 + k) ^ 1]) for w in (0, 1)]
    np.testing.assert_array_equal(outs[1], np.repeat(want_b, 32).astype(np.uint32))
    np.testing.assert_array_equal(outs[2], np.full(64, (x > 0.5).sum(), np.int32))


# A grid-stride loop whose stride doubles inside the loop (no rounds: a plain loop in a thread
# loop) after a barrier, printf between barriers.
STRIDE = r"""
__global__ void stride(const float *x, float *out, int n)
{
    __shared__ float s[32];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    printf("thread %d sees %d\n", (int)threadIdx.x, (int)(s[31 - threadIdx.x] > 0.0f));
    int step = blockDim.x;
    for (int i = threadIdx.x; i < n; i += step) {
        out[i] = x[i] * 2.0f + s[31 - threadIdx.x];
        step *= 2;
    }
}
"""


def test_a_grid_stride_loop_whose_stride_changes_and_printf(capfd):
    n = 500
    x = _x(n, 12)
    capfd.readouterr()
    res, outs = _launch(STRIDE, "stride", 1, 32,
                        lambda: [x.copy(), np.zeros(n, np.float32), np.int32(n)], fibers=False)
    printed = capfd.readouterr().out
    fib, fib_outs = _launch(STRIDE, "stride", 1, 32,
                            lambda: [x.copy(), np.zeros(n, np.float32), np.int32(n)], fibers=True)
    printed_f = capfd.readouterr().out
    assert (res.launch.path, fib.launch.path) == ("thread loops", "fibers")
    np.testing.assert_array_equal(outs[1], fib_outs[1])
    want = np.zeros(n, np.float32)
    for t in range(32):
        i, step = t, 32
        while i < n:
            want[i] = x[i] * np.float32(2) + x[31 - t]
            step *= 2   # in the body, before the loop's `i += step`
            i += step
    np.testing.assert_array_equal(outs[1], want)
    # the order of lines between threads is not guaranteed; each thread's line is
    lines = sorted(ln for ln in printed.splitlines() if ln.startswith("thread "))
    assert lines == sorted(ln for ln in printed_f.splitlines() if ln.startswith("thread "))
    assert lines == sorted(f"thread {t} sees {int(x[31 - t] > 0)}" for t in range(32))


# ---------------------------------------------------------------------------------------------
# Whole programs (tm.run): the compile child splits their kernels too.
# ---------------------------------------------------------------------------------------------

PROGRAM_MAIN = r"""
#include <cstdio>
int main()
{
    const int n = 64;
    float h[n], *d;
    for (int i = 0; i < n; ++i) h[i] = 0.25f * i - 3.0f;
    cudaMalloc(&d, n * sizeof(float));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    KERNEL<<<1, n>>>(d);
    if (cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
    for (int i = 0; i < n; ++i) printf("%.9g\n", h[i]);
    cudaFree(d);
    return 0;
}
"""


def _run_program(kernel_src, kernel):
    """(the printed array, the launch) of PROGRAM_MAIN around `kernel_src`, on emu."""
    r = tm.run(kernel_src + PROGRAM_MAIN.replace("KERNEL", kernel), backend="emu",
               timeout=RUN_S)
    assert r.returncode == 0, r.stderr
    return np.array(r.stdout.split(), dtype=np.float32), r.launches[0]


H = 0.25 * np.arange(64, dtype=np.float32) - 3.0


def test_a_macro_redefined_after_the_kernel_in_a_program():
    """A program's split sits right after the kernel's definition: the macro's value there."""
    src = r"""
#define SCALE 2.0f
__global__ void scaled(float *x)
{
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x] * SCALE;
    __syncthreads();
    x[threadIdx.x] = s[63 - threadIdx.x];
}
#undef SCALE
#define SCALE 3.0f
"""
    got, launch = _run_program(src, "scaled")
    assert (launch.kernel, launch.path) == ("scaled", "thread loops"), launch.path_reason
    np.testing.assert_array_equal(got, (2.0 * H)[::-1].astype(np.float32))


# A template whose warp shuffle sits under `if constexpr` in a statement the thread loops do not
# run (two assignments): the transform names the instances that must keep the fibers
# (SplitPlan.fiber_guard, `S` here); registry_source honours it (tm_pick_split_<k>).
GUARDED_TEMPLATE = r"""
template <bool S>
__global__ void pairs(float *x)
{
    __shared__ float s[64];
    float v = x[threadIdx.x], w = 0.0f;
    if constexpr (S) {
        v += w = __shfl_xor_sync(0xffffffffu, v, 1);
    }
    s[threadIdx.x] = v + w;
    __syncthreads();
    x[threadIdx.x] = s[63 - threadIdx.x];
}
"""


def test_a_template_instance_that_must_keep_the_fibers_in_a_program():
    got, launch = _run_program(GUARDED_TEMPLATE, "pairs<true>")
    assert launch.path == "fibers" and "instances where ((S))" in launch.path_reason and \
        "__shfl_xor_sync" in launch.path_reason, \
        (launch.path, launch.path_reason)
    h = H.astype(np.float64)
    s = h + 2.0 * h[np.arange(64) ^ 1]
    np.testing.assert_array_equal(got, s[::-1].astype(np.float32))
