"""Output comparisons for ops whose results are not unique or whose accuracy follows conditioning.

`OUTPUT_CHECKS` maps an OpInfo `full_name` to `check(actual, expected, sample)`: `actual` is the xla
result read back to the CPU, `expected` eager CPU's, `sample` the CPU SampleInput. It raises
AssertionError saying what differs. Factorisations are compared through what is unique about them
(a reconstruction, singular values, |columns|); solvers through their residual, with bounds derived
from float32 rounding and the problem's size and conditioning, never fitted to one machine.
"""

from __future__ import annotations

from typing import Callable

OUTPUT_CHECKS: dict[str, Callable] = {}
