"""Splitting a kernel at its barriers (issue 34, design 1): the public entry points, for now
those of split_analysis (moved there by this commit; the next one splits analysis from text)."""
from .split_analysis import (MAX_FRAME, SplitPlan, _cindex, registry_source,  # noqa: F401
                             split_kernel)
