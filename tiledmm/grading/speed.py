"""The speed part, graded on the cuda backend only: the submission and the assignment's
reference kernel (tiledmm's own, from its registry) timed in the same run on the same inputs,
each launch alone (warmup=0, repeat=1) with the L2 cache flushed before every timed launch, and
the medians compared. The flush is the one every timed launch gets by default (csrc/launch_core.c,
Timing.l2), so the grader times as tm.matmul and a tm.compile kernel do. The points follow
Speed.fraction: full points while the submission takes at most `full_within` (1.2) times the
reference's time, the CMU 15-418/CS149 checkers' rule, then linearly less down to `floor` at
`zero_at` times."""
import statistics

__all__ = ["grade_speed", "EMU_NOTE"]

EMU_NOTE = ("emu: CPU times of an emulator say nothing about a GPU; grade speed with "
            "--backend cuda")


def _median_ms(run, warmup, repeat, l2_states):
    """The median kernel time of `repeat` calls of run() after `warmup`; adds what each timed
    call's Timing.l2 says to l2_states."""
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(repeat):
        timing = run().timing
        samples.append(float(timing.kernel_ms))
        l2_states.add(timing.l2)
    return statistics.median(samples)


def grade_speed(speed, launch_submission, values, backend):
    """A dict for report.speed. `launch_submission()` launches the submission once on the
    speed case's inputs and returns its Result; `values` are those inputs by argument name."""
    if speed is None:
        return {"graded": False, "note": "the assignment has no speed part"}
    if backend != "cuda":
        return {"graded": False, "note": EMU_NOTE}
    l2_states = set()
    sub_ms = _median_ms(launch_submission, speed.warmup, speed.repeat, l2_states)
    ref_ms = _median_ms(lambda: speed.reference(**values), speed.warmup, speed.repeat, l2_states)
    note = ("L2 flushed before each timed launch" if l2_states == {"flushed"} else
            f"L2 {' / '.join(sorted(l2_states))} at the timed launches")
    ratio = sub_ms / ref_ms if ref_ms > 0 else float("inf")
    fraction = speed.fraction(ratio)
    return {"graded": True, "note": note, "submission_ms": sub_ms, "reference_ms": ref_ms,
            "ratio": ratio, "reference": speed.label or getattr(speed.reference, "__name__", "?"),
            "case": dict(speed.case), "points": speed.points,
            "score": round(speed.points * fraction, 6),
            "policy": f"full within {speed.full_within:g}x the reference's time, linear to "
                      f"{speed.floor:g} of the points at {speed.zero_at:g}x"}
