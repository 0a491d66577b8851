"""Profile mode on emu (tiledmm.profile): counters against hand-computed values for small
launches, the issue's example figures at 256^3 (exact), and the predicted-time model's lesson
directions against the H100 figures in benchmarks/results/h100_all_families.csv."""

import numpy as np
import pytest

import tiledmm as tm
from tiledmm import profile as tmprof

pytestmark = pytest.mark.skipif(not tmprof.available(),
                                reason="tiledmm._emu_profile not built (TILEDMM_NO_PROFILE=1?)")


def counts(res):
    p = res.profile
    return {k: getattr(p, k) for k in (
        "global_load_requests", "global_load_sectors", "global_store_requests",
        "global_store_sectors", "shared_load_requests", "shared_load_bank_conflicts",
        "shared_store_requests", "shared_store_bank_conflicts")}


def test_coalesced_warp_load():
    # vec_add, 128 elements, one block of 128 threads = 4 warps. Each warp loads a[32w..32w+31]
    # and b[...]: 128 contiguous bytes of a 256-byte aligned allocation = 4 sectors per request.
    x = np.ones(128, np.float32)
    res = tm.vec_add(x, x, block=128, backend="emu", profile=True)
    assert counts(res) == dict(global_load_requests=8, global_load_sectors=32,
                               global_store_requests=4, global_store_sectors=16,
                               shared_load_requests=0, shared_load_bank_conflicts=0,
                               shared_store_requests=0, shared_store_bank_conflicts=0)
    assert res.profile.global_load_sectors_per_request == 4.0
    assert res.profile.launches == 1 and not res.profile.sampled


def test_strided_warp_load():
    # naive_uncoalesced, A 32x8 @ B 8x1, block 32x32: only the warp with threadIdx.y == 0 has a
    # column (col = threadIdx.y < N = 1); its lanes are rows 0..31. Per k: A[row*8 + k] is 32
    # bytes apart lane to lane (32 sectors), B[k] is one address (1 sector). 8 values of k:
    # 16 requests, 8*32 + 8*1 = 264 sectors. C[row] for 32 rows: 1 request, 4 sectors.
    A = np.ones((32, 8), np.float32)
    B = np.ones((8, 1), np.float32)
    res = tm.matmul(A, B, kernel="naive_uncoalesced", block=32, backend="emu", profile=True)
    c = counts(res)
    assert (c["global_load_requests"], c["global_load_sectors"]) == (16, 264)
    assert (c["global_store_requests"], c["global_store_sectors"]) == (1, 4)
    assert res.profile.warps_profiled == 32


def test_two_way_and_32_way_bank_conflicts():
    # interleaved_bank_conflicts: partial[2*s*tid] += partial[2*s*tid + s] for s = 1, 2, 4, ...
    # for tid < blockDim/(2s). Lanes are 2s words apart: the words of one bank among L active
    # lanes of a warp are L / (32 / gcd(2s, 32)) (at least 1), the conflicts of each of the two
    # loads and of the store are that minus 1.
    # block 128 (n = 128, one block, one launch):
    #   s      1      2     4     8     16    32    64
    #   warps  2      1     1     1     1     1     1
    #   lanes  32     32    16    8     4     2     1
    #   ways   2      4     4     4     4     2     1     -> conflicts per access 2+3+3+3+3+1 = 15
    # loads: 2 per active warp and step (16) + partial[0] by thread 0 (1) = 17, conflicts 30;
    # stores: the first partial[tid] (4 warps) + 8 = 12, conflicts 15.
    res = tm.reduce(np.ones(128, np.float32), kernel="interleaved_bank_conflicts", block=128,
                    backend="emu", profile=True)
    c = counts(res)
    assert (c["shared_load_requests"], c["shared_load_bank_conflicts"]) == (17, 30)
    assert (c["shared_store_requests"], c["shared_store_bank_conflicts"]) == (12, 15)
    # block 1024: s = 1 is a 2-way conflict over 16 warps; s = 16 has 32 lanes 32 words apart,
    # all in one bank: one 32-way conflict (31 per access).
    #   s      1   2   4   8   16  32  64  128 256 512
    #   warps  16  8   4   2   1   1   1   1   1   1
    #   ways   2   4   8   16  32  16  8   4   2   1
    # conflicts per access: 16*1 + 8*3 + 4*7 + 2*15 + 31 + 15 + 7 + 3 + 1 = 155
    res = tm.reduce(np.ones(1024, np.float32), kernel="interleaved_bank_conflicts", block=1024,
                    backend="emu", profile=True)
    c = counts(res)
    assert (c["shared_load_requests"], c["shared_load_bank_conflicts"]) == (2 * 36 + 1, 2 * 155)
    assert (c["shared_store_requests"], c["shared_store_bank_conflicts"]) == (32 + 36, 155)


def test_broadcast_is_not_a_conflict():
    # tiled, tile 32, 32x32 @ 32x32: one block of 32 warps, one tile step. A_tile[ty][k]: all 32
    # lanes of a warp (one row ty) read the same word: a broadcast, one wavefront. B_tile[k][tx]:
    # 32 consecutive words. 32 warps * 32 k * 2 loads = 2048 requests, no conflicts.
    A = np.ones((32, 32), np.float32)
    res = tm.matmul(A, A, kernel="tiled", tile=32, backend="emu", profile=True)
    c = counts(res)
    assert (c["shared_load_requests"], c["shared_load_bank_conflicts"]) == (2048, 0)
    assert res.profile.shared_load_wavefronts == 2048
    assert (c["shared_store_requests"], c["shared_store_bank_conflicts"]) == (64, 0)
    assert (c["global_load_requests"], c["global_load_sectors"]) == (64, 256)
    assert res.profile.barriers == 2 * 32


@pytest.mark.parametrize("kernel, params, requests, per_request", [
    ("naive", dict(block=16), 1_048_576, 2.00),
    ("naive_uncoalesced", dict(block=16), 1_048_576, 8.50),
    ("tiled", dict(tile=16), 65_536, 4.00),
])
def test_issue_example_figures_256(kernel, params, requests, per_request):
    # ncu on the H100 at 256^3 (issue 21); profiled in full at this size.
    A = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    res = tm.matmul(A, A, kernel=kernel, backend="emu", profile=True, **params)
    p = res.profile
    assert not p.sampled and p.blocks_profiled == p.blocks
    assert p.global_load_requests == requests
    assert p.global_load_sectors == per_request * requests
    assert p.global_load_sectors_per_request == per_request
    np.testing.assert_allclose(res.out, A @ A, rtol=1e-4)   # the normal run's output


def test_atomics_and_same_address():
    x = np.ones(4096, np.float32)
    p = tm.reduce(x, kernel="atomic_per_element", block=256, backend="emu", profile=True).profile
    assert p.global_atomics == 4096 and p.global_atomic_max_same_address == 4096
    assert p.global_atomic_requests == 4096 // 32


def test_sampling_above_validation_size_says_so():
    A = np.ones((512, 512), np.float32)
    res = tm.matmul(A, A, kernel="tiled", tile=16, backend="emu", profile=True)
    p = res.profile
    assert p.sampled and p.sample_stride == 8 and p.blocks_profiled < p.blocks
    assert "sampled" in repr(p)
    # counts per block are uniform here, so the scaled estimate is exact
    assert p.global_load_requests == pytest.approx(2 * (512 ** 3) / (32 * 16))
    assert float(res.out[0, 0]) == 512.0


def test_profile_absent_by_default():
    # (profile=True on cuda reads Nsight Compute: tests/test_profile_ncu.py)
    x = np.ones(128, np.float32)
    assert tm.vec_add(x, x, block=128, backend="emu").profile is None


def test_sweep_and_bench_profile_columns(capsys):
    rows = tm.sweep("tiled", [32], tile=[8, 16], backend="emu", profile=True, as_frame=False,
                    progress=False)
    assert [r["global_load_sectors_per_request"] for r in rows] == [4.0, 4.0]
    assert all(r["predicted_ms"] > 0 and r["predicted_bound"] for r in rows)
    from tiledmm.__main__ import main
    assert main(["--backend", "emu", "bench", "--family", "reduce", "--sizes", "1024",
                 "--kernels", "sequential", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "sect/req" in out and "H100 ms (predicted)" in out


# ---- the time model: the issue's lesson pairs, predicted from emu counts vs measured H100 ----

_H100_CSV = __import__("pathlib").Path(__file__).resolve().parents[1] / \
    "benchmarks" / "results" / "h100_all_families.csv"


def _measured_ms(kernel, params, size):
    import csv
    text = ",".join(f"{k}={v}" for k, v in params.items())
    for r in csv.DictReader(open(_H100_CSV)):
        if r["kernel"] == kernel and r["params"] == text:
            if r["family"] == "matmul" and r["M"] == str(size):
                return float(r["ms"])
            if r["family"] == "reduce" and r["n"] == str(size):
                return 4 * size / float(r["gbps"]) / 1e6
    raise LookupError((kernel, params, size))


_PAIRS = tmprof.LESSON_PAIRS
_profiles = {}


def _predicted_ms(family, kernel, params, device="H100"):
    key = (family, kernel, tuple(params.items()))
    if key not in _profiles:
        if family == "matmul":   # 1024^3, sampled (1 block in 64)
            A = np.ones((1024, 1024), np.float32)
            inputs = (A, A)
        else:                    # 2^20 elements, in full (2^24 takes 3-9 s per kernel here)
            inputs = (np.ones(2 ** 20, np.float32),)
        _profiles[key] = tmprof.count(family, kernel, *inputs, **params)
    return _profiles[key].predict(device).ms


_H200_MATMUL_CSV = _H100_CSV.parent / "h200_lessons_matmul.csv"


def _h200_measured_ms(kernel, params):
    import csv
    text = ",".join(f"{k}={v}" for k, v in params.items())
    for r in csv.DictReader(open(_H200_MATMUL_CSV)):
        if r["kernel"] == kernel and r["params"] == text and r["M"] == "1024":
            return float(r["ms"])
    raise LookupError((kernel, params))


@pytest.mark.parametrize("family, slow, fast", [p for p in _PAIRS if p[0] == "matmul"])
def test_lesson_pair_on_the_h200(family, slow, fast):
    # Issue 28: the H200 preset against the H200's own bench (benchmarks/gpu_run.sh lessons,
    # 1024^3, CUDA events): the same direction and 2x band as on the H100.
    measured = _h200_measured_ms(*slow) / _h200_measured_ms(*fast)
    predicted = _predicted_ms(family, *slow, "H200") / _predicted_ms(family, *fast, "H200")
    if not 1 / 1.2 <= measured <= 1.2:
        assert (predicted > 1) == (measured > 1), (predicted, measured)
    assert 0.5 <= predicted / measured <= 2, (predicted, measured)


@pytest.mark.parametrize("family, slow, fast", _PAIRS)
def test_lesson_pair_direction_and_ratio(family, slow, fast):
    # Issue 21: the predicted ratio has the H100's direction and is within 2x of the measured
    # one; where the H100's ratio is within 1.2x of even, only the 2x band applies.
    size = 1024 if family == "matmul" else 2 ** 20
    measured = _measured_ms(*slow, size) / _measured_ms(*fast, size)
    predicted = _predicted_ms(family, *slow) / _predicted_ms(family, *fast)
    if not 1 / 1.2 <= measured <= 1.2:
        assert (predicted > 1) == (measured > 1), (predicted, measured)
    assert 0.5 <= predicted / measured <= 2, (predicted, measured)


@pytest.mark.parametrize("slow, fast", [(("regtile", dict(dims=1)), ("regtile", dict(dims=2))),
                                        (("regtile", dict(dims=2)), ("fast", dict(config=0)))])
def test_register_tiling_pairs_at_2048(slow, fast):
    # At 1024^3 regtile dims=2's 64 blocks leave half the SMs idle; at 2048^3 (256 blocks) it is
    # the H100's faster one (1.33x), and what still holds it back is its 194 registers per
    # thread: one 8-warp block per SM (tiledmm/profiling/kernel_registers.py). Without registers the
    # model predicted dims=2 2.9x faster and 1.1x of fast (measured 2.4x).
    A = np.ones((2048, 2048), np.float32)
    slow_ms, fast_ms = (tmprof.count("matmul", k, A, A, **params).predict("H100").ms
                        for k, params in (slow, fast))
    measured = _measured_ms(*slow, 2048) / _measured_ms(*fast, 2048)
    predicted = slow_ms / fast_ms
    assert (predicted > 1) == (measured > 1), (predicted, measured)
    assert 0.5 <= predicted / measured <= 2, (predicted, measured)


def test_prediction_names_the_bound():
    A = np.ones((256, 256), np.float32)
    pred = tmprof.count("matmul", "naive_uncoalesced", A, A, block=32).predict("H100")
    assert pred.bound == "L1" and pred.ms > 0 and pred.device == "H100"
    # 2^16 same-address atomics (115 us) outweigh the call's fixed overhead (9 us); 4,096
    # would not, and the bound would be "launch overhead", rightly.
    pred = tmprof.count("reduce", "atomic_per_element", np.ones(1 << 16, np.float32),
                        block=256).predict()
    assert pred.bound == "atomics"
    pred = tmprof.count("reduce", "atomic_per_element", np.ones(1 << 10, np.float32),
                        block=256).predict()
    assert pred.bound == "launch overhead"
    with pytest.raises(ValueError, match="lacks the time model"):
        tmprof.count("matmul", "tiled", A, A, tile=16).predict("GM204")
