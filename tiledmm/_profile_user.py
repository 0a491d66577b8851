"""profile=True on a tm.compile kernel (emu): the Profile of its counted launch.

The counters come from the kernel's profile build (tiledmm/_compile_emu.py, with the flags of
tiledmm/_profile_build.py), counted exactly as tiledmm._emu_profile counts the registry's
kernels. What the counters cannot know is the kernel's arithmetic: `flops=` on the launch
gives it, and `min_bytes=` the compulsory DRAM traffic (default: every array argument's
bytes once). Without `flops=`, predict() refuses rather than model a time with no FP32
instructions in it (pass flops=0 for a kernel that does no arithmetic)."""
from .profile import Profile, _make_profile


class UserKernelProfile(Profile):
    """The Profile of a user kernel's launch made without `flops=`: the counters as for any
    profile; predict() raises ValueError, saying what it needs."""

    def predict(self, device="H100"):
        raise ValueError(
            f"predict() needs the floating-point operations of kernel '{self.kernel}', which "
            "tiledmm cannot know for a tm.compile kernel: pass flops= (operations per launch, "
            "e.g. flops=2 * M * N * K for a matmul; flops=0 if it does no arithmetic) with "
            "profile=True, and min_bytes= for its compulsory DRAM traffic if that is not every "
            "array argument's bytes once")


def make_profile(counts, result, flops_given):
    """A Profile from the counted launch's counters and the launch's Result (its flops and
    min_bytes); without flops_given, a UserKernelProfile whose predict() says what is missing."""
    p = _make_profile(counts, 1, result)
    if flops_given:
        return p
    return UserKernelProfile(**{name: getattr(p, name) for name in p.__dataclass_fields__})
