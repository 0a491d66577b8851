"""Profile mode's warp-instruction keying, divergent branches and cp.async (issue 21), against
values computed by hand from the kernels' sources (cuda/matmul_tiled.cu, cuda/reduce_steps.cu,
cuda/matmul_fast.cu). Allocations on the emulator are 256-byte aligned, so a row's byte offset
gives its 32-byte sectors directly."""
import numpy as np
import pytest

from tiledmm import profile as tmprof

pytestmark = pytest.mark.skipif(not tmprof.available(),
                                reason="tiledmm._emu_profile not built (TILEDMM_NO_PROFILE=1?)")

RNG = np.random.default_rng(21)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- a divergent access: warp instructions keyed by the access's PC ----

def test_divergent_load_is_keyed_by_its_pc():
    # tiled, tile 8, A 8x12 @ B 12x8: one block of 8x8 threads = 2 warps (warp 0: ty 0..3,
    # warp 1: ty 4..7), two K phases. Per phase a thread loads A[row][tk+tx] if tk+tx < 12 and
    # B[tk+ty][col] if tk+ty < 12 (sectors below: bytes / 32 of the 4-byte elements).
    # phase 0: every lane loads both.
    #   A, warp 0: rows 0..3, cols 0..7 = bytes [48ty, 48ty+32): sectors 0 | 1,2 | 3 | 4,5 -> 6
    #   A, warp 1: rows 4..7: sectors 6 | 7,8 | 9 | 10,11                                 -> 6
    #   B, warp 0 / 1: rows 0..3 / 4..7 of 8 floats, 128 contiguous bytes                 -> 4 + 4
    # phase 1 (tk = 8): A only for tx < 4 (cols 8..11), B only for ty < 4 (rows 8..11).
    #   A, warp 0 (16 lanes): bytes 48ty+32..+47: sectors 1 | 2 | 4 | 5                   -> 4
    #   B, warp 0 (32 lanes): rows 8..11 = bytes 256..383                                 -> 4
    #   A, warp 1 (16 lanes): sectors 7 | 8 | 10 | 11                                     -> 4
    #   B, warp 1: no lane                                                                -> no request
    # Keyed by PC: 4 + 2 + 1 = 7 requests, 20 + 8 + 4 = 32 sectors. Keyed by "the k-th load of
    # each lane", warp 0's lanes tx >= 4 (which skip the A load) would put their B load into the
    # A instruction: {A of tx < 4} + {B of tx >= 4} = 8 sectors, then {B of tx < 4} = 4 sectors:
    # 36 sectors, the count this test must not give.
    p = tmprof.count("matmul", "tiled", rand(8, 12), rand(12, 8), tile=8)
    assert (p.global_load_requests, p.global_load_sectors) == (7, 32)
    assert (p.global_store_requests, p.global_store_sectors) == (2, 8)
    # Shared: per phase and warp one A_tile and one B_tile store (the `c ? load : 0` store stays
    # one store on lanes of both sides: -fno-thread-jumps keeps it one PC), and 8 k-steps of two
    # loads: 2 * 2 * 2 = 8 stores, 2 * 2 * 16 = 64 loads.
    assert (p.shared_store_requests, p.shared_load_requests) == (8, 64)
    # The phase-1 A load diverges in both warps (tx < 4); B's condition is uniform per warp.
    assert p.divergent_branches == 2


def test_divergent_loads_match_a_per_pc_model_at_an_odd_size():
    # The same rule over every block and phase of a 70x50 @ 50x90 tiled matmul (blocks at the
    # edges: lanes that load A but not B and the other way round).
    M, K, N = 70, 50, 90
    for T in (8, 16):
        req = sec = 0
        for by in range(-(-M // T)):
            for bx in range(-(-N // T)):
                for tk in range(0, K, T):
                    tids = [(tx, ty) for ty in range(T) for tx in range(T)]
                    for w in range(0, T * T, 32):
                        lanes = tids[w:w + 32]
                        a = {((by * T + ty) * K + tk + tx) * 4 // 32 for tx, ty in lanes
                             if by * T + ty < M and tk + tx < K}
                        b = {((tk + ty) * N + bx * T + tx) * 4 // 32 for tx, ty in lanes
                             if tk + ty < K and bx * T + tx < N}
                        for s in (a, b):
                            if s:
                                req, sec = req + 1, sec + len(s)
        p = tmprof.count("matmul", "tiled", rand(M, K), rand(K, N), tile=T)
        assert (p.global_load_requests, p.global_load_sectors) == (req, sec), T


# ---- divergent branches ----

@pytest.mark.parametrize("kernel, expected", [
    # block 128 = 4 warps, n = 128: one block, one launch.
    # interleaved_divergent: `if (tid % (2s) == 0)` for s = 1, 2, 4, 8, 16 splits every warp
    # (4 x 5 = 20); s = 32 (tid % 64 == 0) leaves one lane of warps 0 and 2 (2); s = 64 only
    # tid 0 (1); then `if (tid == 0) dst[...]` in warp 0 (1): 24.
    ("interleaved_divergent", 24),
    # interleaved_bank_conflicts: `2*s*tid < 128` is tid < 64, 32 (whole warps) for s = 1, 2,
    # then tid < 16, 8, 4, 2, 1 inside warp 0 (5); tid == 0 (1): 6.
    ("interleaved_bank_conflicts", 6),
    # sequential: `tid < half` for half = 64, 32 whole warps; 16, 8, 4, 2, 1 in warp 0; + 1.
    ("sequential", 6),
    # unroll_last_warp: half = 64 only (then the last warp, all 32 lanes); tid == 0: 1.
    ("unroll_last_warp", 1),
])
def test_divergent_branches_of_the_reduction_ladder(kernel, expected):
    p = tmprof.count("reduce", kernel, rand(128), block=128)
    assert (p.launches, p.blocks) == (1, 1)
    assert p.divergent_branches == expected


def test_divergence_lesson_is_visible():
    # 2^16 elements, block 256 (8 warps): 256 blocks, then one block over the 256 partials.
    # interleaved_divergent per block: s = 1..16 split all 8 warps (40), s = 32 four warps,
    # s = 64 two, s = 128 one, tid == 0 one: 48. sequential: half = 16..1 in warp 0 (5) + 1.
    x = rand(1 << 16)
    div = tmprof.count("reduce", "interleaved_divergent", x, block=256)
    seq = tmprof.count("reduce", "sequential", x, block=256)
    assert div.blocks == seq.blocks == 257
    assert (div.divergent_branches, seq.divergent_branches) == (257 * 48, 257 * 6)


def test_no_divergence_counted_without_divergence():
    # naive and tiled at multiples of the tile: every lane takes the same path.
    A, B = rand(64, 64), rand(64, 64)
    assert tmprof.count("matmul", "tiled", A, B, tile=16).divergent_branches == 0
    assert tmprof.count("matmul", "naive", A, B, block=16).divergent_branches == 0


# ---- cp.async (fast configs 6 and 7) ----

def test_cp_async_counts_as_ldgsts():
    # fast config 6: 128 x 256 tiles, BK 32, 256 threads (8 warps). A 128x64 @ B 64x256: one
    # block, two K steps. B goes global -> shared by cp.async, 16 bytes a call: per K step
    # BK*BN/4/256 = 8 calls per thread, thread t's e-th at tile row f / 64, quad f % 64
    # (f = t + 256e), so a warp's call copies 512 contiguous bytes = 16 sectors.
    # ldgsts: 8 warps x 8 x 2 steps = 128 requests, 2048 sectors. B is neither a global load
    # nor a shared store.
    # A goes through registers: per K step 4 float4 loads per thread (rows f / 8, quads f % 8:
    # a warp reads 4 rows x 128 bytes = 16 sectors), stored transposed as 4 scalar shared stores
    # each: loads 8 x 4 x 2 = 64 requests, 1024 sectors; shared stores 8 x 16 x 2 = 256.
    p = tmprof.count("matmul", "fast", rand(128, 64), rand(64, 256), config=6)
    assert (p.global_ldgsts_requests, p.global_ldgsts_sectors) == (128, 2048)
    assert (p.global_load_requests, p.global_load_sectors) == (64, 1024)
    assert p.shared_store_requests == 256


@pytest.mark.parametrize("k", [64, 128])
def test_cp_async_counts_of_the_cutlass_structured_config(k):
    # fast config 7 (CUTLASS's SIMT structure): 128 x 256 tiles, BK 8, 4 shared stages, both
    # operands by cp.async. Per K step A's 128 x 8 floats go as 4-byte copies (transposed into
    # shared memory: 1,024 calls, 4 per thread, 4 x 8 warps = 32 requests; a row's 8 k are one
    # 32-byte sector: 128 sectors) and B's 8 x 256 as 16-byte copies (512 calls, 2 per thread,
    # 16 requests, 8 KB = 256 sectors): 48 requests and 384 sectors a step. The pipeline issues
    # 3 stages past the last K step with the predicate off (zero-filled: a request each, no
    # sectors), as CUTLASS's main loop does. Nothing goes through registers.
    p = tmprof.count("matmul", "fast", rand(128, k), rand(k, 256), config=7)
    steps = k // 8
    assert (p.global_ldgsts_requests, p.global_ldgsts_sectors) == (48 * (steps + 3), 384 * steps)
    assert (p.global_load_requests, p.shared_store_requests) == (0, 0)


def test_cp_async_zero_fill_reads_no_sectors():
    # N = 64 with 256-wide tiles: of each warp's 32 quads only columns < 64 are inside. Even
    # warps' calls have lanes 0..15 inside (256 bytes, 8 sectors), odd warps' none: the copy
    # zero-fills (cp.async with 0 source bytes), still one instruction (request) each, and no
    # sectors. 128 requests, 64 x 8 = 512 sectors.
    p = tmprof.count("matmul", "fast", rand(64, 64), rand(64, 64), config=6)
    assert (p.global_ldgsts_requests, p.global_ldgsts_sectors) == (128, 512)


def test_same_tiles_without_cp_async_load_b_through_registers():
    # config 4: the same tiles as 6, B loaded as float4 into registers and stored to shared:
    # 128 more global load requests (16 sectors each) and 128 more shared stores, no ldgsts.
    p = tmprof.count("matmul", "fast", rand(128, 64), rand(64, 256), config=4)
    assert (p.global_ldgsts_requests, p.global_ldgsts_sectors) == (0, 0)
    assert (p.global_load_requests, p.global_load_sectors) == (64 + 128, 1024 + 2048)
    assert p.shared_store_requests == 256 + 128


def test_atomic_retries_count_no_divergence():
    # atomic_per_element: every thread atomicAdds its element to one float. The emulator's float
    # atomicAdd is a compare-and-swap loop whose retries depend on which OS thread wins; a GPU
    # runs one atomic instruction. 2^14 elements, block 256: every lane is in bounds, so no
    # divergent branch, however the swaps raced (before retries were taken out: 90-120).
    x = rand(1 << 14)
    for _ in range(3):
        p = tmprof.count("reduce", "atomic_per_element", x, block=256)
        assert p.global_atomics == 1 << 14
        assert p.divergent_branches == 0
