"""The speed part, graded on the cuda backend only: the submission and the assignment's
reference kernel (tiledmm's own, from its registry) timed in the same run on the same inputs,
each launch alone (warmup=0, repeat=1) with the L2 cache flushed before every timed launch, and
the medians compared. The points follow Speed.fraction: full points while the submission takes
at most `full_within` (1.2) times the reference's time, the CMU 15-418/CS149 checkers' rule,
then linearly less down to `floor` at `zero_at` times."""
import statistics

import numpy as np

from .. import _core
from .._device_array import to_device

__all__ = ["grade_speed", "L2_FLUSH_BYTES", "EMU_NOTE"]

EMU_NOTE = ("emu: CPU times of an emulator say nothing about a GPU; grade speed with "
            "--backend cuda")

L2_FLUSH_BYTES = 256 << 20   # more than any GPU's L2 (H100: 50 MB)


class _Flusher:
    """Writes a buffer larger than the L2 cache on the device (tm.vec_add on device arrays)."""

    def __init__(self):
        n = L2_FLUSH_BYTES // 4 // 2
        self.a = to_device(np.zeros(n, np.float32), backend="cuda")
        self.b = to_device(np.zeros(n, np.float32), backend="cuda")

    def __call__(self):
        _core.vec_add(self.a, self.b, backend="cuda", warmup=0, repeat=1)


def _median_ms(run, flush, warmup, repeat):
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(repeat):
        if flush is not None:
            try:
                flush()
            except Exception:   # noqa: BLE001 - the flush is best effort; the note says so
                flush = None
        samples.append(float(run().timing.kernel_ms))
    return statistics.median(samples)


def grade_speed(speed, launch_submission, values, backend):
    """A dict for report.speed. `launch_submission()` launches the submission once on the
    speed case's inputs and returns its Result; `values` are those inputs by argument name."""
    if speed is None:
        return {"graded": False, "note": "the assignment has no speed part"}
    if backend != "cuda":
        return {"graded": False, "note": EMU_NOTE}
    try:
        flush = _Flusher()
        note = "L2 flushed before each timed launch"
    except Exception as exc:   # noqa: BLE001 - timing without the flush is still a measurement
        flush, note = None, f"L2 not flushed ({type(exc).__name__}: {exc})"
    sub_ms = _median_ms(launch_submission, flush, speed.warmup, speed.repeat)
    ref_ms = _median_ms(lambda: speed.reference(**values), flush, speed.warmup, speed.repeat)
    ratio = sub_ms / ref_ms if ref_ms > 0 else float("inf")
    fraction = speed.fraction(ratio)
    return {"graded": True, "note": note, "submission_ms": sub_ms, "reference_ms": ref_ms,
            "ratio": ratio, "reference": speed.label or getattr(speed.reference, "__name__", "?"),
            "case": dict(speed.case), "points": speed.points,
            "score": round(speed.points * fraction, 6),
            "policy": f"full within {speed.full_within:g}x the reference's time, linear to "
                      f"{speed.floor:g} of the points at {speed.zero_at:g}x"}
