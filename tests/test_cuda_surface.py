"""The CUDA surface NVIDIA's samples touch, on the emulator (issue 43): tests/programs/surface/
and tests/programs/cg_groups.cu are our own small programs, one per feature the samples need
(benchmarks/cuda_samples.py runs the samples themselves against a cuda-samples checkout).
Every program runs with a timeout (RUN_S)."""
import os

import numpy as np
import pytest

import tiledmm as tm
from tiledmm.programs.run import toolkit_header

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")
SURFACE = os.path.join(PROGRAMS, "surface")
RUN_S = 120


def run(program, **kw):
    kw.setdefault("backend", "emu")
    kw.setdefault("timeout", RUN_S)
    return tm.run(program, **kw)


def expected(path):
    with open(os.path.splitext(path)[0] + ".expected") as f:
        return f.read()


@pytest.mark.parametrize("name", ["runtime_surface.cu", "dialect.cu"])
def test_surface_program_matches_expected_stdout(name):
    """runtime_surface.cu: helper_cuda.h's guards, every attribute CUDA 13 names, deviceQuery's
    properties, occupancy, profiler, mapped host memory, limits, callbacks, peer access, pools,
    prefetch/advise in CUDA 13's and CUDA 12's forms. dialect.cu: extern __shared__ in an
    included header (both word orders, 2-D), umin/umax and __expf... (they load), __CUDA_ARCH__,
    launches from four host threads at once."""
    path = os.path.join(SURFACE, name)
    r = run(path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected(path)


def test_cooperative_groups_made_at_run_time():
    path = os.path.join(PROGRAMS, "cg_groups.cu")
    r = run(path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected(path)
    assert r.launches[0].path == "fibers"


def test_group_shuffles_of_types_wider_than_8_bytes():
    r = run(os.path.join(SURFACE, "wide_shuffles.cu"))
    assert r.returncode == 0, r.stderr
    got = [ln.split() for ln in r.stdout.splitlines()]
    assert len(got) == 32
    for t, row in enumerate(got):
        n = (t + 1) % 32
        assert [int(v) for v in row[:4]] == [n, 2 * n, 3 * n + 1, 4 * n + 5]
        d = t + 3 if t + 3 < 32 else t   # shfl_down past the tile's end: the lane's own value
        assert float(row[4]) == 1.5 * d + 2.0 + 7 * d
        assert int(row[5]) == (30 * 100 + 1 if t % 2 == 0 else -1)


def _grid_rounds(n, steps):
    """What grid_sync.cu computes: each round x[i] = (x[i] + 3 x[i+1 mod n]) mod 1000003."""
    x = np.array([(i * 7919) % 101 for i in range(n)], dtype=np.int64)
    for _ in range(steps):
        x = (x + 3 * np.roll(x, -1)) % 1000003
    return x


# The kernel split at its barriers (grid.sync() a region boundary, then the block's OS thread
# waits for the grid) and on fibers (TILEDMM_EMU_SPLIT=0)
PATHS = [("1", "thread loops"), ("0", "fibers")]


@pytest.mark.parametrize("split, path", PATHS)
def test_grid_sync_in_a_cooperative_launch(split, path, monkeypatch):
    """cudaLaunchCooperativeKernel: the blocks run at once (an OS thread each), grid.sync()
    holds every thread of the grid (a round reads what other blocks wrote in the last), and a
    grid larger than the occupancy allows is refused (reductionMultiBlockCG's pattern)."""
    monkeypatch.setenv("TILEDMM_EMU_SPLIT", split)
    r = run(os.path.join(SURFACE, "grid_sync.cu"))
    assert r.returncode == 0, r.stderr
    x = _grid_rounds(64 * 6 - 5, 9)
    assert r.stdout == (f"launch: cudaSuccess\nsync: cudaSuccess\n"
                        f"first {x[0]} {x[1]} {x[2]} last {x[-1]}\ntotal {int(x.sum())}\n"
                        "too large: cudaErrorCooperativeLaunchTooLarge\n")
    assert r.launches[0].path == path


def test_tile_reduce_and_grid_sync_split_as_on_fibers(monkeypatch):
    """reductionMultiBlockCG's shape (grid_reduce.cu): cg::reduce over static tiles of 32 (plus
    on doubles, bit_or), a helper taking the block group by reference that synchronises, a
    grid-stride loop over grid.thread_rank()/grid.size(), grid.sync(). Both paths give the
    same bits (the split's shuffles are the fibers' xor order), near NumPy's float64 sum."""
    i = np.arange(1000003, dtype=np.uint64)
    x = ((i * 2654435761) % (1 << 32) % 1000).astype(np.float32) / np.float32(1000) - \
        np.float32(0.5)
    want = float(np.sum(x.astype(np.float64)))
    totals = []
    for split, path in PATHS:
        monkeypatch.setenv("TILEDMM_EMU_SPLIT", split)
        r = run(os.path.join(SURFACE, "grid_reduce.cu"))
        assert r.returncode == 0, r.stderr
        assert r.launches[0].path == path, r.launches[0]
        lines = r.stdout.splitlines()
        assert lines[:2] == ["launch: cudaSuccess", "sync: cudaSuccess"], r.stdout
        _, total, _, bits = lines[2].split()
        assert abs(float(total) - want) <= 1e-9 * np.sum(np.abs(x.astype(np.float64))), \
            (total, want)
        assert bits == "ffffffff"
        totals.append(total)
    assert totals[0] == totals[1]


def test_grid_sync_is_refused_at_its_line():
    src = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(int *p)
{
    cg::grid_group g = cg::this_grid();
    p[g.thread_rank()] = 1;
    g.sync();
}
int main()
{
    int *p;
    cudaMalloc(&p, 64 * sizeof(int));
    k<<<2, 32>>>(p);
    cudaDeviceSynchronize();
    return 0;
}
"""
    r = run(src)
    assert r.returncode != 0
    assert "program.cu:7: grid.sync()" in r.stderr and "cooperative launch" in r.stderr


def test_undefined_symbol_is_a_named_link_error():
    """-Wl,-z,defs: a function nothing defines is a compile error naming it, never the
    loader's traceback when the program loads."""
    src = """extern "C" float not_defined_anywhere(float);
__global__ void k(float *p) { p[0] = not_defined_anywhere(p[0]); }
int main()
{
    float *p;
    cudaMalloc(&p, 4);
    k<<<1, 1>>>(p);
    return cudaDeviceSynchronize();
}
"""
    with pytest.raises(tm.CompileError) as info:
        run(src)
    assert "not_defined_anywhere" in str(info.value)


def test_samples_headers_guards_and_helper_style_macros():
    """What Common/helper_cuda.h tests and calls, written out (its code stays in NVIDIA's tree)."""
    src = """#include <cuda_runtime.h>
#include <cstdio>
#ifdef __DRIVER_TYPES_H__
#define check(x) do { cudaError_t e = (x); if (e) { printf("error %s\\n", cudaGetErrorName(e)); return 1; } } while (0)
#endif
#ifdef __CUDA_RUNTIME_H__
int pick()
{
    int mode = -1, integrated = -1, major = 0;
    check(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0));
    check(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, 0));
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    printf("%d %d %d\\n", mode == cudaComputeModeProhibited, integrated, major);
    return 0;
}
#endif
int main() { return pick(); }
"""
    r = run(src)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "0 0 9\n"


def test_inline_ptx_special_registers_and_a_clear_refusal():
    src = """#include <cstdio>
__global__ void lanes(unsigned *d)
{
    unsigned lane, lt;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
    d[threadIdx.x] = lane * 1000 + __popc(lt);
}
int main()
{
    unsigned *d;
    cudaMallocManaged(&d, 64 * sizeof(unsigned));
    lanes<<<1, 64>>>(d);
    cudaDeviceSynchronize();
    printf("%u %u %u\\n", d[0], d[33], d[63]);
    return 0;
}
"""
    r = run(src)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "0 1001 31031\n"
    with pytest.raises(tm.CompileError) as info:
        run(src.replace('asm("mov.u32 %0, %%laneid;" : "=r"(lane));',
                        'asm("add.u32 %0, %1, %1;" : "=r"(lane) : "r"(lt));'))
    assert "program.cu:5" in str(info.value) and "inline PTX is not emulated" in str(info.value)


def test_cuda_fp16_half2_rounds_to_half():
    src = """#include <cuda_fp16.h>
#include <cstdio>
__global__ void k(const half2 *a, float *out)
{
    half2 s = __float2half2_rn(0.f);
    for (int i = 0; i < 4; ++i) s = __hadd2(s, __hmul2(a[i], a[i]));
    s = __hfma2(s, __floats2half2_rn(2.f, 2.f), __float2half2_rn(1.f));
    out[0] = __low2float(s);
    out[1] = __high2float(s);
    out[2] = __half2float(__float2half(2049.0f));   // not a half: rounds to even, 2048
}
int main()
{
    half2 *a;
    float *out;
    cudaMallocManaged(&a, 4 * sizeof(half2));
    cudaMallocManaged(&out, 3 * sizeof(float));
    for (int i = 0; i < 4; ++i) a[i] = half2((float)i, 0.5f);
    k<<<1, 1>>>(a, out);
    cudaDeviceSynchronize();
    printf("%g %g %g %zu\\n", out[0], out[1], out[2], sizeof(half2));
    return 0;
}
"""
    r = run(src)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "29 3 2048 4\n"


def test_cuda_bf16_is_the_emulators_own_and_rounds_to_nearest_even():
    # NVIDIA's bf16TensorCoreGemm includes <cuda_bf16.h>: without tiledmm's stand-in, g++ found
    # the toolkit's own (in /usr/local/include where the toolkit is installed), whose vector
    # types and __half redefine the emulator's
    src = """#include <cuda_bf16.h>
#include <cstdio>
__global__ void k(const __nv_bfloat16 *a, float *out)
{
    out[0] = __bfloat162float(a[0]) + __bfloat162float(a[1]);
    out[1] = __bfloat162float(__float2bfloat16(1.0f + 1.0f / 256));   // a tie: to even, 1
    out[2] = __bfloat162float(__float2bfloat16(1.0f + 3.0f / 256));   // a tie: to even, 1 + 2^-6
}
int main()
{
    __nv_bfloat16 *a;
    float *out;
    cudaMallocManaged(&a, 2 * sizeof(__nv_bfloat16));
    cudaMallocManaged(&out, 3 * sizeof(float));
    a[0] = (__nv_bfloat16)(float)(257);   // 257 is not a bf16: 256
    a[1] = __float2bfloat16(0.5f);
    k<<<1, 1>>>(a, out);
    cudaDeviceSynchronize();
    printf("%g %g %g %zu\\n", out[0], out[1], out[2], sizeof(__nv_bfloat16));
    return 0;
}
"""
    r = run(src)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "256.5 1 1.01562 2\n"


def test_a_toolkit_header_without_a_stand_in_is_named(tmp_path):
    toolkit = tmp_path / "cuda" / "include"
    toolkit.mkdir(parents=True)
    (toolkit / "cuda_fp8.h").write_text("")
    (toolkit / "cuda_fp16.h").write_text("")
    linked = tmp_path / "usr_local_include"   # g++'s default folder, linked into the toolkit
    linked.mkdir()
    (linked / "cuda_fp8.h").symlink_to(toolkit / "cuda_fp8.h")
    log = (f"In file included from {toolkit}/cuda_fp16.h:131,\n"
           f"                 from {linked}/cuda_fp8.h:12,\n"
           "                 from p.cu:3:\n"
           f"{toolkit}/cuda_fp16.h:9:8: error: redefinition of 'struct __half'\n")
    assert toolkit_header(log, str(toolkit)) == "cuda_fp8.h"
    # a program's own header that includes one of the toolkit's: that one
    assert toolkit_header(log.replace(str(linked), str(tmp_path)), str(toolkit)) == "cuda_fp16.h"
    assert toolkit_header("p.cu:3:10: error: 'x' was not declared\n", str(toolkit)) is None
    assert toolkit_header(log, None) is None


def test_a_program_including_a_toolkit_header_without_a_stand_in_is_told_which(tmp_path):
    reachable = [d for d in ("/usr/local/include", "/usr/include")
                 if os.path.isfile(os.path.join(d, "cuda_fp8.h"))]
    if not reachable:
        pytest.skip("no CUDA toolkit header on the host compiler's default path")
    with pytest.raises(tm.CompileError) as info:
        run("#include <cuda_fp8.h>\nint main() { return 0; }\n")
    assert "it includes cuda_fp8.h, a CUDA toolkit header the emulator has no stand-in for" \
        in str(info.value)


def test_device_assert_fails_the_launch_with_cuda_error_assert():
    src = """#include <cassert>
#include <cstdio>
__global__ void k(int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    assert(i < n);
}
int main()
{
    k<<<2, 32>>>(60);
    cudaError_t e = cudaDeviceSynchronize();
    printf("%s\\n", cudaGetErrorName(e));
    printf("sticky: %s\\n", cudaGetErrorName(cudaMemset(nullptr, 0, 0)));
    return 0;
}
"""
    r = run(src)
    assert r.returncode == 0, r.stderr
    # the GPU's messages on stderr, as the H200 prints them (NVIDIA's simpleAssert: nothing of
    # them in stdout between its "-- Begin/End assert output")
    failed = [ln for ln in r.stderr.splitlines() if "Assertion" in ln]
    assert failed == [f"program.cu:6: void k(int): block: [1,0,0], thread: [{t},0,0] Assertion `i < n` failed."
                      for t in (28, 29, 30, 31)], r.stderr
    assert r.stdout.splitlines() == ["cudaErrorAssert", "sticky: cudaErrorAssert"]


def test_tiles_wider_than_a_warp_reduce_and_scan():
    """tiled_partition<64>/<128> with block_tile_memory (the reduction sample's multi-warp
    tiles): cg::reduce, cg::inclusive_scan, ranks, and the tile as a thread_group."""
    r = run(os.path.join(SURFACE, "wide_tiles.cu"))
    assert r.returncode == 0, r.stderr
    rows = np.array([ln.split() for ln in r.stdout.splitlines()], dtype=np.float64)
    assert rows.shape == (512, 6)
    h, d = rows[:, 0].reshape(-1, 64), rows[:, 4].reshape(-1, 128)
    np.testing.assert_array_equal(rows[:, 1], np.repeat(h.sum(axis=1), 64))
    np.testing.assert_array_equal(rows[:, 2], np.cumsum(h, axis=1).ravel())
    t = np.arange(512) % 256
    np.testing.assert_array_equal(rows[:, 3], t // 64 * 10000 + t % 64 * 10 + 1)
    np.testing.assert_array_equal(rows[:, 5], np.repeat(d.max(axis=1), 128))


def test_pipeline_and_barrier_memcpy_async():
    """cuda::pipeline<thread_scope_thread> (copies land when their batch is waited for, so a
    stage refilled ahead is not overwritten early), cuda::barrier<thread_scope_block>, and
    pipeline_consumer_wait_prior<2> leaving the newest two batches uncopied."""
    r = run(os.path.join(SURFACE, "async_copy.cu"))
    assert r.returncode == 0, r.stderr
    data, sums, prior = r.stdout.splitlines()
    tiles = np.array(data.split(), dtype=np.float64).reshape(3, -1)
    np.testing.assert_array_equal(np.array(sums.split(), dtype=np.float64),
                                  np.tile(tiles.sum(axis=1), 2))
    assert prior.split() == ["7", "-1", "-1"]
    # both thread-scope pipelines split: per-thread objects of the thread loops (made by
    # make_pipeline), copying as late as on fibers (wait_prior's values above say so)
    paths = {ln.kernel: ln.path for ln in r.launches}
    assert paths["wait_prior"] == paths["staged_sums"] == "thread loops", paths


def test_graphs_and_launches_through_a_kernels_address():
    """A graph made node by node (memcpy, memset of 4-byte values, kernel nodes whose arguments
    are copied when added, a host node, a clone), the same work captured from two streams
    joined by events, and cudaLaunchKernel; a function the emulator does not know as a kernel
    is cudaErrorInvalidDeviceFunction."""
    r = run(os.path.join(SURFACE, "graphs.cu"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    h = np.array(lines[-1].split(), dtype=np.float64)
    rows = [np.array(ln.split(), dtype=np.float64) for ln in lines if ln[:1] in "-0123456789"]
    built = 1 + 2 * h
    np.testing.assert_array_equal(rows[0], built)
    np.testing.assert_array_equal(rows[1], built)
    np.testing.assert_array_equal(rows[2], 3 * h)
    np.testing.assert_array_equal(rows[3], 2 * h)
    assert lines[:2] == ["unknown: cudaErrorInvalidDeviceFunction", "nodes: 6"]
    assert lines.count(f"host node: {built.sum():.1f}") == 2
    assert "captured nodes: 6, none ran" in lines
    assert f"host node: {3 * h.sum():.1f}" in lines


def _texture_reference(tex, mode, u, v):
    """What tex2D returns (texture unit semantics: 8 fraction bits in the linear weights)."""
    h, w = tex.shape
    linear, address = "linear" in mode, mode.split("-")[1]
    if "norm" in mode:
        u, v = u * w, v * h

    def at(i, j):
        if address == "border" and not (0 <= i < w and 0 <= j < h):
            return -7.0
        if address == "wrap":
            i, j = i % w, j % h
        elif address == "mirror":
            i, j = i % (2 * w), j % (2 * h)
            i, j = (i if i < w else 2 * w - 1 - i), (j if j < h else 2 * h - 1 - j)
        elif address == "clamp":
            i, j = min(max(i, 0), w - 1), min(max(j, 0), h - 1)
        return tex[j, i]

    if not linear:
        return at(int(np.floor(u)), int(np.floor(v)))
    ub, vb = u - 0.5, v - 0.5
    i, j = int(np.floor(ub)), int(np.floor(vb))
    a, b = np.floor((ub - i) * 256 + 0.5) / 256, np.floor((vb - j) * 256 + 0.5) / 256
    return ((1 - a) * (1 - b) * at(i, j) + a * (1 - b) * at(i + 1, j) +
            (1 - a) * b * at(i, j + 1) + a * b * at(i + 1, j + 1))


def test_texture_objects_filter_and_address_as_a_gpu():
    """tex2D over cudaArrays (float; unsigned char read as normalised float) with point and
    linear filtering, normalised coordinates and the four address modes; tex1Dfetch over linear
    memory (zero outside); tex2D over pitched memory. Against the texture unit's arithmetic in
    float64 (linear weights in 1.8 fixed point)."""
    r = run(os.path.join(SURFACE, "textures.cu"))
    assert r.returncode == 0, r.stderr
    rows = [ln.split() for ln in r.stdout.splitlines()]
    texels = [x for x in rows if x[0] == "texel"]
    img = np.zeros((4, 5))
    raw = np.zeros((4, 5))
    for _, i, j, f, b in texels:
        img[int(j), int(i)], raw[int(j), int(i)] = float(f), float(b)
    samples = [x for x in rows if x[0] not in ("texel", "fetch", "pitched")]
    assert len(samples) == 8 * 12
    for mode, u, v, got in samples:
        u, v = float(np.float32(u)), float(np.float32(v))
        tex = raw / 255 if mode.startswith("bytes") else img
        want = _texture_reference(tex, mode.replace("bytes-", ""), u, v)
        assert abs(float(got) - want) <= 1e-6 * max(1.0, abs(want)), (mode, u, v, got, want)
    fetched = [float(x[3]) for x in rows if x[0] == "fetch"]
    assert fetched == [0.0, *img.ravel(), 0.0]
    for _, u, v, got in (x for x in rows if x[0] == "pitched"):
        assert float(got) == _texture_reference(img, "point-clamp", float(u), float(v))
