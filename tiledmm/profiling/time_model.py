"""The time model of profile mode: a predicted GPU kernel time from counted traffic.

Profile.predict(device) calls predict() here. Per resource (DRAM, L2, L1/shared memory, FP32
issue or, for the tensor-core rungs, the tensor cores' peak, same-address atomics,
latency/occupancy, launch overhead) a time from the counters of a Profile
(tiledmm/profiling/counters.py) and the device preset in tiledmm/profiling/devices.py
(tm.occupancy.PRESETS); the prediction is the 2-norm of those times plus the launch overhead.
docs/profile.md explains each term and lists
predicted beside measured H100 times. Occupancy counts registers per thread from the table nvcc
gives for the registry's kernels (tiledmm/profiling/kernel_registers.py).
"""
import math
from dataclasses import dataclass
from typing import Dict

from .. import _backend, _device, _registry
from .devices import MODEL_KEYS, MODEL_PRESETS, PRESETS, device_limits, preset_for
from .kernel_registers import FAST_LAUNCH_SHAPES, REGISTERS
from .occupancy_calculator import compute as occupancy

# The registry kernels whose multiply-adds run on tensor cores, not as FP32 FFMAs: the preset's
# dense peak that bounds them (tiledmm/profiling/devices.py) and how many tensor-core products
# each multiply-add costs. wmma's `precision` parameter picks TF32 (0) or FP16 (1) inputs
# (cuda/registry.cu, cuda/matmul_wmma.cu); tf32x3 makes three TF32 products per multiply-add
# (big*big + big*small + small*big, cuda/matmul_tf32x3.cu), so its roof is a third of TF32's.
_TENSOR_PIPES = {
    ("wmma", 0): ("tensor_tf32_gflops", 1, "TF32 tensor cores"),
    ("wmma", 1): ("tensor_fp16_gflops", 1, "FP16 tensor cores"),
    ("tf32x3", None): ("tensor_tf32_gflops", 3, "TF32 tensor cores"),
}


def _pipe_key(pipe):
    return next(key for key, _, name in _TENSOR_PIPES.values() if name == pipe)


def compute_roof(kernel, params, limits):
    """(pipe, peak GFLOP/s) that bounds a registry matmul kernel's arithmetic on a device (its
    limits, a preset's dict): ("FP32", peak_gflops) for FFMA kernels; for the tensor-core rungs
    the preset's dense tensor-core peak of their input type ("FP16 tensor cores" or "TF32
    tensor cores"), tf32x3's divided by its three products. The peak is None where the device
    has no such tensor cores (a T4 has no TF32, the lectures' GPUs none) or its figure is
    unknown (the emulator)."""
    if not any(k == kernel for k, _ in _TENSOR_PIPES):
        return "FP32", limits.get("peak_gflops")
    spec = _registry.lookup(kernel, "matmul")
    precision = _registry.param_values(spec, params or {})[0] if spec.params else None
    key, products, pipe = _TENSOR_PIPES[(kernel, precision)]
    return pipe, None if limits.get(key) is None else limits[key] / products


@dataclass(frozen=True)
class Prediction:
    """A predicted GPU kernel time for the counted traffic (Profile.predict).

    `ms` is the predicted time of the call's launches, `bound` the resource that bounds it
    ("DRAM", "L2", "shared memory", "L1/LSU", "FP32 issue", "FP16 tensor cores" or "TF32
    tensor cores" for the tensor-core rungs, "atomics", "latency/occupancy" or "launch
    overhead"), `times_ms` each resource's own time, `device` the preset used, and
    `occupancy` the resident blocks per SM the model assumed. `device_chosen_because` says why
    that preset, when predict() was given none."""
    ms: float
    bound: str
    times_ms: Dict[str, float]
    device: str
    occupancy: object
    device_chosen_because: str = ""

    def __repr__(self):
        why = f" ({self.device_chosen_because})" if self.device_chosen_because else ""
        return f"<Prediction {self.ms:.4g} ms on {self.device}{why}, bound by {self.bound}>"


DEFAULT_DEVICE = "H100"   # without a GPU: the lectures' measured GPU


def default_device():
    """(preset, why) for predict() with no device: on a GPU the running GPU's preset, matched by
    name and compute capability; without one, or where no preset matches, the H100's."""
    if _backend.cuda_device_count() > 0:
        info = _device.device_info("cuda")
        cc = tuple(info["compute_capability"])
        key = preset_for(info["name"], cc)
        if key is not None:
            return key, f"the running GPU, {info['name']}"
        return DEFAULT_DEVICE, (f"no preset matches the running GPU, {info['name']} (cc "
                                f"{cc[0]}.{cc[1]}); pass device= to choose one")
    return DEFAULT_DEVICE, "no GPU here; pass device= to choose another preset"


def registers_per_thread(p):
    """Registers per thread of the counted registry kernel as nvcc compiles it for the H100
    (sm_90; tiledmm/profiling/kernel_registers.py, made by benchmarks/kernel_registers.py; used for
    every preset), or None where the table has none (a user kernel): occupancy then ignores
    registers, as tm.occupancy does on the emulator."""
    if p.family == "user":
        return None
    dtype = {4: "float32", 8: "float64"}.get(p.itemsize)
    params = dict(p.params)
    if p.kernel == "fast" and params.get("config") == 0:   # chosen by size: the launch says
        shape = (p.threads_per_block, p.shared_bytes)
        params["config"] = next((c for c, s in FAST_LAUNCH_SHAPES.items() if s == shape), 0)
    regs = [r for k, sel, dt, r, _ in REGISTERS
            if k == p.kernel and dt == dtype and all(params.get(n) == v for n, v in sel)]
    return max(regs) if regs else None


def predict(p, device=None):
    why = ""
    if device is None:
        device, why = default_device()
    lim = device_limits(device)
    missing = [k for k in MODEL_KEYS if lim.get(k) is None]
    if missing:
        raise ValueError(f"device {lim['name']!r} lacks the time model's figures {missing}; "
                         f"presets with them: {', '.join(MODEL_PRESETS)}")
    sms = lim["multiprocessors"]
    clock = lim["clock_ghz"] * 1e9
    o = occupancy(max(1, p.threads_per_block), p.shared_bytes, registers_per_thread(p),
                    device=device)
    blocks_per_sm = max(1, o.blocks_per_sm)
    warps_per_block = -(-max(1, p.threads_per_block) // 32)
    launches = max(1, p.launches)
    # Per-SM resources are spread over the SMs that get blocks: a launch with fewer blocks than
    # SMs leaves the others idle.
    blocks_per_launch = p.blocks / launches
    sms_used = max(1.0, min(sms, blocks_per_launch))
    t = {}
    # DRAM: the compulsory traffic (inputs read once, output written once).
    t["DRAM"] = p.min_bytes / (lim["bandwidth_gbs"] * 1e9)
    # L2: the sectors L1 does not keep. L1's estimate: a block's warps share the sectors of
    # the same (k-th) load; stores go through.
    l2_sectors = p.global_load_sectors_block_merged + p.global_store_sectors
    t["L2"] = 32.0 * l2_sectors / (lim["l2_bandwidth_gbs"] * 1e9)
    # L1 / shared memory: one pipe per SM; per clock it handles one shared wavefront or one
    # 128-byte line of a global request (a warp's scattered lines are looked up one by one).
    shared = p.shared_load_wavefronts + p.shared_store_wavefronts
    glob = p.global_load_lines + p.global_store_lines + p.global_atomic_requests
    t_pipe = (shared + glob) / (sms_used * clock)
    t["shared memory" if shared >= glob else "L1"] = t_pipe
    # Instruction issue: the FFMAs (2 flops each, one warp instruction per 32) and the counted
    # memory instructions, barriers and warp operations, 4 warp instructions per clock per SM.
    # A scheduler (4 per SM) needs warps to choose from: with fewer than
    # `warps_to_fill_scheduler` resident, an instruction waiting for its operand (an FFMA for
    # its shared load) leaves issue slots empty, and the rate falls in proportion. The warps an
    # SM holds are the launch's blocks spread over the SMs, at most tm.occupancy's residency
    # (registers included: regtile dims=2's 194 registers per thread fit one 8-warp block).
    # The tensor-core rungs issue one mma per many multiply-adds: their arithmetic is bounded by
    # the preset's tensor-core peak (compute_roof) over the SMs used and the share of each SM's
    # four tensor cores (one per scheduler) that has a warp; only their other instructions
    # count as issue.
    pipe, roof = compute_roof(p.kernel, p.params, lim) if p.family == "matmul" else ("FP32", 0)
    if roof is None:
        raise ValueError(f"{p.kernel} runs on {pipe}, which device {lim['name']!r} lacks; "
                         "presets with them: "
                         f"{', '.join(n for n, d in PRESETS.items() if d.get(_pipe_key(pipe)))}")
    ffma = p.flops / 2 / 32 if pipe == "FP32" else 0.0
    issued = (ffma + p.global_load_requests + p.global_store_requests
              + p.shared_load_requests + p.shared_store_requests + p.barriers + p.warp_ops)
    schedulers = lim["issue_per_clock_per_sm"]
    warps_per_sm = min(blocks_per_launch / sms_used, blocks_per_sm) * warps_per_block
    issue_rate = min(1.0, warps_per_sm / schedulers / lim["warps_to_fill_scheduler"])
    t["FP32 issue"] = issued / (schedulers * issue_rate * sms_used * clock)
    if pipe != "FP32":
        tensor_share = min(1.0, warps_per_sm / schedulers)
        t[pipe] = p.flops / (roof * 1e9 * sms_used / sms * tensor_share)
    # Same-address atomics serialise at one L2 slice.
    t["atomics"] = p.global_atomic_max_same_address / lim["same_address_atomics_per_s"]
    # Latency/occupancy (Little's law): each resident warp keeps `memory_parallelism` global
    # requests in flight, each waiting one latency; residency from tm.occupancy.
    concurrent_warps = min(blocks_per_launch, blocks_per_sm * sms) * warps_per_block
    latency = (lim["l2_latency_ns"] if p.min_bytes <= lim["l2_bytes"]
               else lim["dram_latency_ns"]) * 1e-9
    requests = p.global_load_requests + p.global_atomic_requests
    t["latency/occupancy"] = (requests * latency
                              / (max(1.0, concurrent_warps) * lim["memory_parallelism"]))
    # Each launch costs the front end a few microseconds, and a call timed alone never takes
    # less than the GPU's floor for one call (its first launch and the events around it).
    t["launch overhead"] = (launches * lim["launch_overhead_us"]
                            + lim["call_overhead_us"]) * 1e-6
    # Resources overlap, but not perfectly: a 2-norm of the resource times is the largest when
    # one dominates and grows when several are comparable. Launch overhead adds.
    overlap = math.sqrt(sum(v * v for k, v in t.items() if k != "launch overhead"))
    total = overlap + t["launch overhead"]
    bound = max(t, key=t.get)
    return Prediction(ms=total * 1e3, bound=bound, times_ms={k: v * 1e3 for k, v in t.items()},
                      device=lim["name"], occupancy=o, device_chosen_because=why)
