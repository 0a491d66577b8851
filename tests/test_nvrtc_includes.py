"""tm.compile on cuda compiles a cooperative_groups kernel (issue 30): NVRTC is given the CUDA
toolkit's include folders (cooperative_groups.h and the CCCL headers it includes). NVRTC needs no
GPU, so this runs wherever the toolkit is."""

import pytest

from tiledmm.toolchain import compile_nvrtc
from tiledmm.toolchain.source import full_source

CG_KERNEL = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void tile_sum(const float *x, float *out, int n)
{
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = tile.size() / 2; offset > 0; offset /= 2) v += tile.shfl_down(v, offset);
    if (tile.thread_rank() == 0) atomicAdd(out, v);
}
"""


def _nvrtc():
    try:
        return compile_nvrtc._load_nvrtc()
    except RuntimeError as exc:
        pytest.skip(str(exc))


def test_cooperative_groups_compile_with_the_toolkits_headers():
    lib = _nvrtc()
    includes = compile_nvrtc.toolkit_includes()
    if not includes:
        pytest.skip("no CUDA toolkit headers (cooperative_groups.h) here")
    headers = compile_nvrtc.prelude_headers()
    text = full_source(CG_KERNEL, "", [], "cuda")
    image, lowered, _log = compile_nvrtc._nvrtc_compile(
        lib, text, "tile_sum", headers, ["--gpu-architecture=compute_80", "-std=c++17", *includes],
        False)
    assert image and "tile_sum" in lowered
    with pytest.raises(Exception, match="cooperative_groups.h"):   # what it was without them
        compile_nvrtc._nvrtc_compile(lib, text, "tile_sum", headers,
                                      ["--gpu-architecture=compute_80", "-std=c++17"], False)
