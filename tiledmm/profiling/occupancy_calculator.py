"""The occupancy calculator's arithmetic: how many blocks of a shape fit on one SM of a device,
and which per-SM resource stops more (NVIDIA's occupancy calculator, allocation granularities
included). tm.occupancy is the public face (it reads a kernel's launch first); the time model
uses compute() for the residency it assumes.
"""
from dataclasses import dataclass, field
from typing import Dict, Optional

from .devices import device_limits

__all__ = ["RESOURCES", "Occupancy", "compute"]

# The four per-SM resources, in the order a tie is reported.
RESOURCES = ("threads", "blocks", "shared_memory", "registers")


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM and why. `limits` gives the block count each resource alone
    would allow (None: no limit from it, e.g. registers unknown on the emulator)."""
    device: str
    threads_per_block: int
    shared_bytes: int
    registers_per_thread: Optional[int]
    blocks_per_sm: int
    limited_by: str
    limits: Dict[str, Optional[int]] = field(repr=False)
    active_threads: int = 0
    max_threads_per_sm: int = 0
    kernel: Optional[str] = None
    params: Dict[str, int] = field(default_factory=dict, repr=False)
    reason: str = ""

    @property
    def occupancy(self):
        """Resident threads (in whole warps) over the SM's maximum."""
        return self.active_threads / self.max_threads_per_sm if self.max_threads_per_sm else 0.0

    @property
    def active_warps(self):
        return self.active_threads // 32

    @property
    def tied(self):
        """Every per-SM resource that allows exactly blocks_per_sm blocks."""
        return tuple(r for r in RESOURCES if self.limits.get(r) == self.blocks_per_sm)

    def as_dict(self):
        row = dict(device=self.device, kernel=self.kernel, **self.params,
                   threads_per_block=self.threads_per_block, shared_bytes=self.shared_bytes,
                   registers_per_thread=self.registers_per_thread,
                   blocks_per_sm=self.blocks_per_sm, occupancy=self.occupancy,
                   limited_by=self.limited_by)
        for r in RESOURCES:
            row[f"by_{r}"] = self.limits.get(r)
        return row

    def __str__(self):
        what = self.kernel or "block"
        if self.params:
            what += " " + " ".join(f"{k}={v}" for k, v in self.params.items())
        head = (f"{what} on {self.device}: {self.threads_per_block} threads, "
                f"{self.shared_bytes:,} B shared")
        if self.registers_per_thread:
            head += f", {self.registers_per_thread} registers/thread"
        if self.blocks_per_sm == 0:
            return f"{head} -> does not fit: {self.reason}"
        per = ", ".join(f"{r.replace('_', ' ')} {'-' if v is None else v}"
                        for r, v in self.limits.items())
        return (f"{head} -> {self.blocks_per_sm} blocks/SM ({self.active_threads} threads, "
                f"occupancy {self.occupancy:.0%}), limited by {self.limited_by.replace('_', ' ')}"
                f" [blocks allowed by {per}]")


def _round_up(x, unit):
    return -(-x // unit) * unit if unit > 1 else x


def compute(threads_per_block, shared_bytes=0, registers_per_thread=None, device=None,
            backend=None, kernel=None, params=None):
    """Occupancy of a block shape on a device (see the module docstring)."""
    lim = device_limits(device, backend)
    threads = int(threads_per_block)
    shared = int(shared_bytes or 0)
    regs = int(registers_per_thread) if registers_per_thread else None
    if threads < 1:
        raise ValueError(f"threads_per_block must be >= 1, got {threads_per_block!r}")
    warp = lim["warp_size"]
    warps = -(-threads // warp)
    common = dict(device=lim["name"], threads_per_block=threads, shared_bytes=shared,
                  registers_per_thread=regs, max_threads_per_sm=lim["max_threads_per_multiprocessor"],
                  kernel=kernel, params=dict(params or {}))

    def none_fit(resource, reason):
        return Occupancy(blocks_per_sm=0, limited_by=resource, reason=reason,
                         limits={r: (0 if r == resource.split("_per_")[0] else None)
                                 for r in RESOURCES}, **common)

    if threads > lim["max_threads_per_block"]:
        return none_fit("threads_per_block",
                        f"{threads} threads per block > the limit of {lim['max_threads_per_block']}")
    if shared > lim["shared_mem_per_block_optin"]:
        return none_fit("shared_memory_per_block",
                        f"{shared:,} B shared per block > the limit of "
                        f"{lim['shared_mem_per_block_optin']:,} B")
    if regs and regs > lim["max_registers_per_thread"]:
        return none_fit("registers_per_thread",
                        f"{regs} registers per thread > the limit of "
                        f"{lim['max_registers_per_thread']}")

    limits = {}
    limits["threads"] = lim["max_threads_per_multiprocessor"] // (warps * warp)
    limits["blocks"] = lim["max_blocks_per_multiprocessor"]
    if shared > 0:
        per_block = _round_up(shared + lim["reserved_shared_mem_per_block"], lim["shared_alloc_unit"])
        limits["shared_memory"] = lim["shared_mem_per_multiprocessor"] // per_block
    else:
        limits["shared_memory"] = None
    if regs:
        if lim["reg_alloc_granularity"] == "block":   # cc 1.x: registers allocated per block
            per_block = _round_up(_round_up(warps, lim["warp_alloc_granularity"]) * warp * regs,
                                  lim["reg_alloc_unit"])
            limits["registers"] = (lim["regs_per_multiprocessor"] // per_block
                                   if per_block <= lim["regs_per_block"] else 0)
        else:                                         # cc >= 2: per warp
            per_warp = _round_up(regs * warp, lim["reg_alloc_unit"])
            if per_warp * warps > lim["regs_per_block"]:
                limits["registers"] = 0
            else:
                warps_by_regs = lim["regs_per_block"] // per_warp
                warps_by_regs -= warps_by_regs % lim["warp_alloc_granularity"]
                limits["registers"] = ((warps_by_regs // warps)
                                       * (lim["regs_per_multiprocessor"] // lim["regs_per_block"]))
    else:
        limits["registers"] = None
    blocks = min(v for v in limits.values() if v is not None)
    limited_by = next(r for r in RESOURCES if limits[r] == blocks)
    reason = ""
    if blocks == 0:
        reason = f"the block's {limited_by.replace('_', ' ')} exceed one SM's"
    return Occupancy(blocks_per_sm=blocks, limited_by=limited_by, limits=limits, reason=reason,
                     active_threads=blocks * warps * warp, **common)
