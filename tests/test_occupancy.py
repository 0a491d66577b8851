"""tm.occupancy: the lectures' worksheet and the limiting resource."""
import numpy as np
import pytest

import tiledmm as tm
from tiledmm import occupancy as occ_mod


def test_callable_module_and_presets():
    assert callable(tm.occupancy)
    assert set(tm.occupancy.PRESETS) >= {"G80", "GM107", "GM204", "T4", "A100", "H100"}
    assert tm.occupancy.preset("gm204")["compute_capability"] == (5, 2)
    with pytest.raises(ValueError, match="GM204"):
        tm.occupancy.preset("GTX 9999")


def test_lecture_000_gm107_cases():
    # TILE 16: 2 KB per block; shared memory would allow 32 blocks, 2,048 threads only 8.
    o = tm.occupancy(threads_per_block=256, shared_bytes=2048, device="GM107")
    assert o.blocks_per_sm == 8 and o.limited_by == "threads"
    assert o.limits["shared_memory"] == 32
    # TILE 32: 8 KB per block; shared memory 8 blocks, threads 2.
    o = tm.occupancy(threads_per_block=1024, shared_bytes=8192, device="GM107")
    assert o.blocks_per_sm == 2 and o.limited_by == "threads"
    assert o.limits["shared_memory"] == 8
    assert o.occupancy == 1.0


def test_lecture_003_g80_cases():
    # 16 KB of shared memory: 8 blocks of 2 KB, but 768 threads per SM hold 3 blocks of 256.
    o = tm.occupancy(threads_per_block=256, shared_bytes=2048, device="G80")
    assert o.limits["shared_memory"] == 8
    assert o.blocks_per_sm == 3 and o.limited_by == "threads"
    # 32 x 32 tiles need 1,024 threads: more than G80's 512 per block.
    o = tm.occupancy(threads_per_block=1024, shared_bytes=8192, device="G80")
    assert o.blocks_per_sm == 0 and o.limited_by == "threads_per_block"
    assert "512" in str(o)


def test_worksheet_gm204_max_tile():
    ans = tm.occupancy.max_tile_size("GM204")
    assert ans["tile"] == 32
    assert ans["next_fails_on"] == "threads_per_block"       # 64 x 64 = 4,096 threads
    assert ans["load_reduction"] == 32
    assert ans["blocks_per_sm"] == 2 and ans["limited_by"] == "threads"
    assert tm.occupancy.max_tile_size("GM204", powers_of_two=False)["tile"] == 32  # 33^2 > 1024
    assert tm.occupancy.max_tile_size("G80")["tile"] == 16


def test_each_limiting_resource_is_named():
    # blocks: tiny blocks hit the 32-blocks-per-SM slot limit.
    assert tm.occupancy(threads_per_block=32, device="GM204").limited_by == "blocks"
    # shared memory: 40 KB blocks on a 96 KB SM.
    o = tm.occupancy(threads_per_block=128, shared_bytes=40 * 1024, device="GM204")
    assert o.limited_by == "shared_memory" and o.blocks_per_sm == 2
    # registers: 256 threads x 128 registers = 32K registers per block, 2 blocks of 64K.
    o = tm.occupancy(threads_per_block=256, shared_bytes=0, registers_per_thread=128,
                     device="GM204")
    assert o.limited_by == "registers" and o.blocks_per_sm == 2
    # per-block limits: shared memory beyond 48 KB on Maxwell, registers beyond 255.
    assert tm.occupancy(threads_per_block=64, shared_bytes=64 * 1024,
                        device="GM204").limited_by == "shared_memory_per_block"
    assert tm.occupancy(threads_per_block=64, registers_per_thread=300,
                        device="H100").limited_by == "registers_per_thread"
    # cc 8.0+ reserve 1 KB per block: 227 KB blocks fit once on an H100 SM.
    assert tm.occupancy(threads_per_block=128, shared_bytes=227 * 1024,
                        device="H100").blocks_per_sm == 1


def test_tile_table_rows():
    rows = tm.occupancy.tile_table("GM107", tiles=(8, 16, 32))
    assert [r["tile"] for r in rows] == [8, 16, 32]
    assert [r["blocks_per_sm"] for r in rows] == [32, 8, 2]
    assert rows[0]["limited_by"] == "threads"       # 2048/64 = 32 = the block limit: a tie
    assert "blocks" in occ_mod.compute(64, 512, device="GM107").tied


@pytest.mark.parametrize("kernel,params", [("tiled", {"tile": 8}), ("tiled", {"tile": 16}),
                                           ("tiled", {"tile": 32}), ("naive", {})])
def test_agrees_with_the_backend_for_a_real_result(backend, kernel, params):
    """From a real launch, on the current backend: the same count the backend's occupancy API
    reported (registers included on cuda)."""
    A = np.ones((64, 64), np.float32)
    res = tm.matmul(A, A, kernel=kernel, backend=backend, **params)
    o = tm.occupancy(res, backend=backend)
    assert o.blocks_per_sm == res.launch.blocks_per_sm
    assert o.threads_per_block == res.launch.threads_per_block
    assert o.shared_bytes == res.launch.shared_bytes
    assert o.limited_by in occ_mod.RESOURCES
    by_name = tm.occupancy(kernel, backend=backend, **params)
    assert by_name.blocks_per_sm == res.launch.blocks_per_sm


def test_kernel_name_on_a_preset_and_unknown_kernel():
    o = tm.occupancy("tiled", tile=32, device="G80", backend="emu")
    assert o.blocks_per_sm == 0 and o.limited_by == "threads_per_block"
    with pytest.raises(ValueError, match="unknown kernel"):
        tm.occupancy("no_such_kernel", backend="emu")
    with pytest.raises(ValueError):
        tm.occupancy()
