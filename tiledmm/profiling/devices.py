"""Device presets: the per-SM limits of named GPUs (the lectures' and current ones) and the time
model's figures for them, or the running device's limits from tm.device_info().

tm.occupancy (PRESETS, preset, preset_for, device_limits) and the time model
(tiledmm/profiling/time_model.py) read them. Presets: the lectures' GPUs (G80, GM107, GM204:
limits from the lectures where they give them, the rest from the compute-capability tables of
the CUDA C Programming Guide, cc 1.0, 5.0 and 5.2) and current ones (V100 cc 7.0, T4 cc 7.5, A100 cc 8.0,
H100 and H200 cc 9.0, and the hosted notebooks' and desktops' L4 and RTX 4090 cc 8.9, A10G and
RTX 3090 cc 8.6). `peak_gflops` and `bandwidth_gbs` are the vendors' data-sheet figures of one
board of each chip (named in `board`), for the traffic model's rooflines; `tensor_fp16_gflops`
and `tensor_tf32_gflops` the dense tensor-core peaks, the tensor-core rungs' roofs.
"""
from typing import Dict

from .._device import device_info

__all__ = ["PRESETS", "MODEL_KEYS", "MODEL_PRESETS", "TENSOR_KEYS", "preset", "preset_for",
           "device_limits"]

_KB = 1024


def _preset(name, cc, board, sms, max_threads_per_block, max_threads_per_sm, max_blocks_per_sm,
            shared_per_sm, shared_per_block, regs_per_sm, regs_per_block, max_regs_per_thread,
            peak_gflops, bandwidth_gbs, reserved_shared=0, shared_unit=256, reg_unit=256,
            reg_granularity="warp", warp_granularity=4, source=""):
    return dict(name=name, compute_capability=cc, board=board, multiprocessors=sms,
                max_threads_per_block=max_threads_per_block,
                max_threads_per_multiprocessor=max_threads_per_sm,
                max_blocks_per_multiprocessor=max_blocks_per_sm,
                shared_mem_per_multiprocessor=shared_per_sm,
                shared_mem_per_block_optin=shared_per_block,
                regs_per_multiprocessor=regs_per_sm, regs_per_block=regs_per_block,
                max_registers_per_thread=max_regs_per_thread, warp_size=32,
                reserved_shared_mem_per_block=reserved_shared,
                shared_alloc_unit=shared_unit, reg_alloc_unit=reg_unit,
                reg_alloc_granularity=reg_granularity, warp_alloc_granularity=warp_granularity,
                peak_gflops=peak_gflops, bandwidth_gbs=bandwidth_gbs, source=source)


PRESETS: Dict[str, dict] = {
    # Lecture 003 ("G80 Shared Memory and Threading"): 16 KB shared memory per SM, 16 SMs,
    # 512 threads per block, 86.4 GB/s, "~340 GFLOPS"; the rest from the cc 1.0 table.
    "G80": _preset("G80", (1, 0), "GeForce 8800 GTX", 16, 512, 768, 8, 16 * _KB, 16 * _KB,
                   8192, 8192, 124, 340.0, 86.4, shared_unit=512, reg_unit=256,
                   reg_granularity="block", warp_granularity=2,
                   source="lecture 003; CUDA C Programming Guide, compute capability 1.0"),
    # Lecture 000 ("Shared Memory and Threading"): 64 KB shared memory per SM, 48 KB per block,
    # 2,048 threads per SM; the rest from the cc 5.0 table.
    "GM107": _preset("GM107", (5, 0), "GeForce GTX 750 Ti", 5, 1024, 2048, 32, 64 * _KB,
                     48 * _KB, 65536, 65536, 255, 1306.0, 86.4,
                     source="lecture 000; CUDA C Programming Guide, compute capability 5.0"),
    # The worksheet's GPU (lecture 000, "Maxwell GM204 used in Lab3"): cc 5.2 table.
    "GM204": _preset("GM204", (5, 2), "GeForce GTX 980", 16, 1024, 2048, 32, 96 * _KB,
                     48 * _KB, 65536, 65536, 255, 4612.0, 224.0,
                     source="CUDA C Programming Guide, compute capability 5.2"),
    # The first GPU with tensor cores (cc 7.0): the cc 7.0 table; FP32 peak and bandwidth from
    # the V100 data sheet (SXM2).
    "V100": _preset("V100", (7, 0), "Tesla V100-SXM2-16GB", 80, 1024, 2048, 32, 96 * _KB,
                    96 * _KB, 65536, 65536, 255, 15700.0, 900.0,
                    source="CUDA C Programming Guide, compute capability 7.0; V100 data sheet"),
    "T4": _preset("T4", (7, 5), "Tesla T4", 40, 1024, 1024, 16, 64 * _KB, 64 * _KB, 65536,
                  65536, 255, 8141.0, 320.0,
                  source="CUDA C Programming Guide, compute capability 7.5"),
    "A100": _preset("A100", (8, 0), "A100-SXM4-40GB", 108, 1024, 2048, 32, 164 * _KB,
                    163 * _KB, 65536, 65536, 255, 19500.0, 1555.0, reserved_shared=1 * _KB,
                    shared_unit=128,
                    source="CUDA C Programming Guide, compute capability 8.0"),
    "H100": _preset("H100", (9, 0), "H100 SXM5 80GB", 132, 1024, 2048, 32, 228 * _KB,
                    227 * _KB, 65536, 65536, 255, 66900.0, 3350.0, reserved_shared=1 * _KB,
                    shared_unit=128,
                    source="CUDA C Programming Guide, compute capability 9.0"),
    # The GPU tiledmm's benchmarks run on: the H100's SM (cc 9.0, 132 SMs, by
    # cudaGetDeviceProperties) with 141 GB of HBM3e at 4.8 TB/s (data sheet).
    "H200": _preset("H200", (9, 0), "H200 SXM 141GB", 132, 1024, 2048, 32, 228 * _KB,
                    227 * _KB, 65536, 65536, 255, 66900.0, 4800.0, reserved_shared=1 * _KB,
                    shared_unit=128,
                    source="CUDA C Programming Guide, compute capability 9.0; H200 data sheet"),
    # Hosted notebooks' GPUs (Colab, cloud notebooks) and the common desktop boards:
    # cc 8.6 and 8.9 tables (1,536 threads and 100 KB of shared memory per SM; 16 or 24
    # blocks), FP32 peak and bandwidth from each board's data sheet.
    "L4": _preset("L4", (8, 9), "NVIDIA L4", 58, 1024, 1536, 24, 100 * _KB, 99 * _KB, 65536,
                  65536, 255, 30300.0, 300.0, reserved_shared=1 * _KB, shared_unit=128,
                  source="CUDA C Programming Guide, compute capability 8.9; L4 data sheet"),
    "A10G": _preset("A10G", (8, 6), "NVIDIA A10G", 80, 1024, 1536, 16, 100 * _KB, 99 * _KB,
                    65536, 65536, 255, 31200.0, 600.0, reserved_shared=1 * _KB,
                    shared_unit=128,
                    source="CUDA C Programming Guide, compute capability 8.6; A10G data sheet"),
    "RTX4090": _preset("RTX4090", (8, 9), "GeForce RTX 4090", 128, 1024, 1536, 24, 100 * _KB,
                       99 * _KB, 65536, 65536, 255, 82600.0, 1008.0, reserved_shared=1 * _KB,
                       shared_unit=128,
                       source="CUDA C Programming Guide, compute capability 8.9; RTX 4090 "
                              "data sheet"),
    "RTX3090": _preset("RTX3090", (8, 6), "GeForce RTX 3090", 82, 1024, 1536, 16, 100 * _KB,
                       99 * _KB, 65536, 65536, 255, 35600.0, 936.0, reserved_shared=1 * _KB,
                       shared_unit=128,
                       source="CUDA C Programming Guide, compute capability 8.6; RTX 3090 "
                              "data sheet"),
}


# Tensor-core peaks, dense (no 2:4 sparsity), in GFLOP/s, for the time model's and tm.model's
# bounds of the tensor-core rungs (wmma, tf32x3): FP16/BF16 inputs with FP32 accumulation, and
# TF32 inputs. None: the chip has no such tensor cores (V100 and T4 predate TF32 and BF16; the
# lectures' GPUs have none). From each board's data sheet, halving the "with sparsity" figures
# where the sheet gives only those: V100 SXM2 ("Tensor Performance" 125 TFLOPS), T4 ("Mixed
# Precision (FP16/FP32)" 65), A100 SXM4 (FP16/BF16 312, TF32 156), H100 SXM5 and H200 SXM (FP16/
# BF16 1,979 and TF32 989 with sparsity), L4 (FP16/BF16 242 and TF32 120 with sparsity), A10G as
# the A10's sheet (125 and 62.5), and the GeForce boards from NVIDIA's architecture white papers
# (Ada: RTX 4090 "FP16 Tensor TFLOPS with FP32 Accumulate" 165.2, TF32 82.6; Ampere GA102: RTX
# 3090 71 and 35.6; GeForce boards run FP32 accumulation at half the FP16-accumulate rate).
TENSOR_KEYS = ("tensor_fp16_gflops", "tensor_tf32_gflops")
_TENSOR_PEAKS = {
    "V100": (125000.0, None),
    "T4": (65000.0, None),
    "A100": (312000.0, 156000.0),
    "H100": (989500.0, 494700.0),
    "H200": (989500.0, 494700.0),
    "L4": (121000.0, 60000.0),
    "A10G": (125000.0, 62500.0),
    "RTX4090": (165200.0, 82600.0),
    "RTX3090": (71000.0, 35600.0),
}
for _name, _limits in PRESETS.items():
    _limits.update(zip(TENSOR_KEYS, _TENSOR_PEAKS.get(_name, (None, None))))


# What tm.profile's time model (Profile.predict, docs/profile.md) needs beyond the occupancy
# limits. Clocks, L2 sizes and FP32 issue from the vendors' data sheets; L2 bandwidth and
# latencies are round figures of published microbenchmarks (Chips and Cheese; Luo et al.,
# "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture", 2024); the same-address
# atomic rate and the launch overhead are what tiledmm's atomic_per_element and per_level
# kernels show on the H100 (benchmarks/results/h100_all_families.csv). The call overhead is
# the floor of one event-timed call there (the fastest 2^20 reductions take 8.5-12 us, of
# which DRAM needs 1.3 us and the launch 3 us); warps_to_fill_scheduler is the common rule that
# a scheduler hides its instructions' dependent latency with about four warps to choose from.
MODEL_KEYS = ("clock_ghz", "l2_bytes", "l2_bandwidth_gbs", "l2_latency_ns", "dram_latency_ns",
              "issue_per_clock_per_sm", "memory_parallelism", "same_address_atomics_per_s",
              "launch_overhead_us", "call_overhead_us", "warps_to_fill_scheduler")
_MODEL_FIGURES = {
    "H100": dict(clock_ghz=1.98, l2_bytes=50 * _KB * _KB, l2_bandwidth_gbs=5500.0,
                 l2_latency_ns=140.0, dram_latency_ns=500.0, issue_per_clock_per_sm=4,
                 memory_parallelism=4.0, same_address_atomics_per_s=5.7e8,
                 launch_overhead_us=3.0, call_overhead_us=6.0, warps_to_fill_scheduler=4),
    "A100": dict(clock_ghz=1.41, l2_bytes=40 * _KB * _KB, l2_bandwidth_gbs=4000.0,
                 l2_latency_ns=200.0, dram_latency_ns=550.0, issue_per_clock_per_sm=4,
                 memory_parallelism=4.0, same_address_atomics_per_s=4.5e8,
                 launch_overhead_us=3.0, call_overhead_us=6.0, warps_to_fill_scheduler=4),
}
# The other presets' model figures: clock and L2 size from the data sheets (the H200's L2 as
# cudaGetDeviceProperties gives it, 62,914,560 B), L2 bandwidth and latencies round figures of
# the same microbenchmark sources for Ampere and Ada; the same-address atomic rate and the
# overheads are the H100's, the atomic rate scaled by the clock. Leads, not measurements: only
# the H100's and H200's predictions have been set beside measured times.


def _model(clock_ghz, l2_mib, l2_bandwidth_gbs, l2_latency_ns, dram_latency_ns):
    h100 = _MODEL_FIGURES["H100"]
    return dict(h100, clock_ghz=clock_ghz, l2_bytes=int(l2_mib * _KB * _KB),
                l2_bandwidth_gbs=l2_bandwidth_gbs, l2_latency_ns=l2_latency_ns,
                dram_latency_ns=dram_latency_ns,
                same_address_atomics_per_s=h100["same_address_atomics_per_s"] * clock_ghz
                / h100["clock_ghz"])


_MODEL_FIGURES.update(
    H200=_model(1.98, 60, 5500.0, 140.0, 500.0),
    L4=_model(2.04, 48, 1600.0, 230.0, 600.0),
    A10G=_model(1.71, 6, 2000.0, 200.0, 550.0),
    RTX4090=_model(2.52, 72, 5000.0, 150.0, 550.0),
    RTX3090=_model(1.695, 6, 2500.0, 200.0, 550.0),
)
for _name, _figures in _MODEL_FIGURES.items():
    PRESETS[_name].update(_figures)
MODEL_PRESETS = tuple(_MODEL_FIGURES)


def _key(name):
    return str(name).lower().replace(" ", "").replace("-", "").replace("_", "")


def preset(name):
    """The limits of a named GPU (case, spaces and dashes ignored: "RTX 4090" is RTX4090): one
    of PRESETS' keys."""
    for key, value in PRESETS.items():
        if _key(key) == _key(name):
            return dict(value)
    raise ValueError(f"unknown device preset {name!r}; choose one of {', '.join(PRESETS)} "
                     "(or None for the current device, or a dict of limits)")


def preset_for(device_name, compute_capability):
    """The preset of a real GPU, matched by its name (cudaGetDeviceProperties' "NVIDIA H200",
    "NVIDIA GeForce RTX 4090", ...) and its compute capability, or None. Longer preset names
    are tried first, so that "A100" is not taken for an "A10"."""
    name = _key(device_name)
    for key in sorted(PRESETS, key=len, reverse=True):
        if _key(key) in name and tuple(PRESETS[key]["compute_capability"]) == \
                tuple(compute_capability):
            return key
    return None


def device_limits(device=None, backend=None):
    """Per-SM limits as a dict: a preset's (device='GM204'), a dict given as is (missing keys
    taken from H100), or the current device's from tm.device_info() (device=None)."""
    if isinstance(device, dict):
        limits = dict(PRESETS["H100"], name="custom", peak_gflops=None, bandwidth_gbs=None,
                      **dict.fromkeys(TENSOR_KEYS))
        limits.update(device)
        return limits
    if device is not None:
        return preset(device)
    info = device_info(backend=backend)
    cc = tuple(info["compute_capability"])
    emu = info["backend"] == "emu"
    # cc 8.0 and newer reserve 1 KB of shared memory per block for the system; the emulator's
    # occupancy API counts the same (it emulates an H100-sized SM).
    reserved = 1 * _KB if emu or cc >= (8, 0) else 0
    limits = dict(
        name=info["name"], compute_capability=cc, board=info["name"],
        multiprocessors=info["multiprocessors"],
        max_threads_per_block=info["max_threads_per_block"],
        max_threads_per_multiprocessor=info["max_threads_per_multiprocessor"],
        max_blocks_per_multiprocessor=info["max_blocks_per_multiprocessor"],
        shared_mem_per_multiprocessor=info["shared_mem_per_multiprocessor"],
        shared_mem_per_block_optin=max(info["shared_mem_per_block_optin"],
                                       info["shared_mem_per_block"]),
        regs_per_multiprocessor=info["regs_per_multiprocessor"],
        regs_per_block=info["regs_per_block"], max_registers_per_thread=255,
        warp_size=info["warp_size"], reserved_shared_mem_per_block=reserved,
        # The emulator allocates exactly; real GPUs round up (128 B shared from cc 8.0 on).
        shared_alloc_unit=1 if emu else (128 if cc >= (8, 0) else 256),
        reg_alloc_unit=256, reg_alloc_granularity="warp", warp_alloc_granularity=4,
        peak_gflops=(info["peak_fp32_tflops"] * 1e3 if info.get("peak_fp32_tflops") else None),
        bandwidth_gbs=info.get("peak_bandwidth_gbs"), source=f"tm.device_info() ({info['backend']})")
    # The device query has no tensor-core figures: the matching preset's, where one matches.
    known = None if emu else preset_for(info["name"], cc)
    limits.update({k: PRESETS[known][k] if known else None for k in TENSOR_KEYS})
    return limits
