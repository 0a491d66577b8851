"""tm.device_info(): the lecture's device query plus the peaks a roofline needs."""
from . import _backend

# FP32 lanes per multiprocessor by compute capability (CUDA C Programming Guide, "Arithmetic
# Instructions" throughput table: 32-bit floating-point add, multiply, multiply-add).
_FP32_LANES_PER_SM = {(7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
                      (9, 0): 128, (10, 0): 128, (10, 3): 128, (12, 0): 128, (12, 1): 128}


# CUDA encodes versions as 1000 * major + 10 * minor (cudaDriverGetVersion): 13000 is 13.0.
_CUDA_VERSIONS = ("driver_version", "runtime_version")


class DeviceInfo(dict):
    """A dict of device properties that prints like the lecture's device query."""

    def __str__(self):
        width = max(map(len, self)) + 1
        lines = []
        for key, value in self.items():
            if key in _CUDA_VERSIONS and isinstance(value, int) and value > 0:
                value = f"{value // 1000}.{value % 1000 // 10}"
            elif isinstance(value, float):
                value = f"{value:,.1f}"
            elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10000:
                value = f"{value:,}"
            lines.append(f"{key + ':':<{width}} {value}")
        return "\n".join(lines)


def device_info(backend=None):
    """Properties of the device `backend` runs on (default: the current backend).

    On `cuda`: name, compute capability, multiprocessors, shared memory per block and per SM,
    registers, thread and grid limits, warp size, clocks, memory, and the peaks derived from
    them: `peak_fp32_tflops` (SMs x FP32 lanes x 2 x clock) and `peak_bandwidth_gbs`
    (2 x memory clock x bus width, double data rate). On `emu`: the emulated device, honestly:
    its limits are the emulator's, clocks are unknown (0) and there are no peaks (None).
    The dict prints as the lecture's device query, one property a line.

    >>> info = tm.device_info(backend="emu")
    >>> info["backend"], info["warp_size"], info["max_threads_per_block"], info["peak_fp32_tflops"]
    ('emu', 32, 1024, None)
    """
    mod, name = _backend.resolve(backend)
    info = DeviceInfo(backend=name, **mod.device_properties())
    cc = tuple(info["compute_capability"])
    lanes = _FP32_LANES_PER_SM.get(cc)
    info["fp32_lanes_per_multiprocessor"] = lanes
    if name == "cuda" and lanes and info["clock_khz"]:
        info["peak_fp32_tflops"] = info["multiprocessors"] * lanes * 2 * info["clock_khz"] * 1e3 / 1e12
    else:
        info["peak_fp32_tflops"] = None
    if name == "cuda" and info["memory_clock_khz"]:
        info["peak_bandwidth_gbs"] = (2 * info["memory_clock_khz"] * 1e3
                                      * info["memory_bus_width_bits"] / 8 / 1e9)
    else:
        info["peak_bandwidth_gbs"] = None
    return info


def mem_info(backend=None):
    """(free_bytes, total_bytes) of device memory (on emu: of the emulated device's budget).

    On cuda, device memory that tiledmm keeps between calls (its pool of per-call buffers) is
    given back to the driver first, so it counts as free.

    >>> free, total = tm.mem_info(backend="emu")
    >>> 0 < free <= total
    True
    """
    mod, _ = _backend.resolve(backend)
    return mod.mem_info()
