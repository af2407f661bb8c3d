"""`xm.RateTracker`: items per second of a training loop, as PyTorch/XLA's (`torch_xla.core.xla_model` exports it)."""

from __future__ import annotations

import os
import time

_clock = time.time  # RateTracker's clock, wall time as PyTorch/XLA's; a module name so a test can fix it


class RateTracker:
    """Items per second of a loop: a smoothed recent rate and the rate since creation, as PyTorch/XLA's.

    `add(n)` counts items; `rate()` is the rate since the previous `rate()` call, blended with the previous
    answer by the smoothing factor (0.4 by default, or `RATE_TRACKER_SMOOTHING`): 0 gives the raw rate, values
    near 1 change slowly. `global_rate()` is every item over the time since creation.

    Args:
      smooth_factor: the weight of the previous rate in `rate()`.
    """

    def __init__(self, smooth_factor: float | None = None) -> None:
        if smooth_factor is None:
            smooth_factor = float(os.environ.get("RATE_TRACKER_SMOOTHING", "0.4"))
        self._smooth_factor = smooth_factor
        self._start_time = self._last_time = _clock()
        self._counted = 0.0  # items before the last `rate()` call
        self._pending = 0.0  # items since it
        self._last_rate: float | None = None

    def add(self, count: float) -> None:
        """Counts `count` more items."""
        self._pending += count

    def rate(self) -> float:
        """The smoothed rate of the items added since the last call (0.0 when no time has passed)."""
        now = _clock()
        elapsed = now - self._last_time
        if elapsed <= 0:
            return 0.0
        current = self._pending / elapsed
        if self._last_rate is not None:
            current = (1 - self._smooth_factor) * current + self._smooth_factor * self._last_rate
        self._counted += self._pending
        self._pending = 0.0
        self._last_time, self._last_rate = now, current
        return current

    def global_rate(self) -> float:
        """Every item added over the seconds since the tracker was made."""
        elapsed = _clock() - self._start_time
        return (self._counted + self._pending) / elapsed if elapsed > 0 else 0.0
