"""Python's garbage collector kept from examining a lazy step over and over while it records.

A lazy step records its ops as Python objects (nodes, tensors, tuples) that all stay reachable until the
barrier runs the graph, then die by reference counting: 1.7 to 3 objects per graph node at the barrier on
the model zoo. CPython 3.11 and 3.12 examine their youngest generation every 700 net new objects, so a step
of a few hundred ops is examined several times while it records; nothing is freed (it is all reachable),
the survivors move to the older generations, and every 20 to 100 steps the full collection walks every
object of the process (480,000 in a transformers script, 230 to 280 ms). Measured lazily on this machine:
2.3 ms of a tiny GPT-2's 20 ms step, and 15.6 ms of T5's 59, went to the collector; with the youngest
threshold above what a step keeps alive, none did.

So each barrier raises the youngest threshold to `_PER_NODE` times the largest graph's node count (within
`_MOST`), never lowering it. Garbage in reference cycles is still collected, once that many objects have
accumulated, and before the device memory budget refuses a graph (memory_budget.py). A script that chose its own thresholds, or disabled the collector, is left alone, as is any
process with `XLADEV_GC_THRESHOLD_FIT=0`.
"""

from __future__ import annotations

import gc
import sys

from xladev._flags import config

# Objects a step keeps alive per graph node, with room for its transients (measured 1.7 to 3 at the barrier).
_PER_NODE = 10
# At most this many net new objects between examinations: a larger step is examined a few times, as before.
_MOST = 100_000
# The interpreter's own youngest threshold (700 up to 3.12; 3.13 moved to 2000 in some builds): any other value is
# the script's choice.
_INTERPRETER_DEFAULTS = (700, 2000) if sys.version_info >= (3, 13) else (700,)


class ThresholdFit:
    """Raises the collector's youngest threshold to fit the largest lazy step seen.

    Attributes:
      largest: the node count of the largest graph fitted so far.
      given_up: the script set thresholds of its own (or disabled the collector): never touched again.
    """

    def __init__(self) -> None:
        self.largest = 0
        self.given_up = False
        self._set: int | None = None  # the youngest threshold this fit last set

    def fit(self, nodes: int) -> None:
        """Called at each barrier with its graph's node count; cheap when the graph is no larger.

        Args:
          nodes: how many nodes the graph about to run holds.
        """
        if nodes <= self.largest or self.given_up:
            return
        self.largest = nodes
        if not config.gc_threshold_fit:
            return
        youngest, middle, oldest = gc.get_threshold()
        expected = _INTERPRETER_DEFAULTS if self._set is None else (self._set,)
        if not gc.isenabled() or youngest not in expected:
            self.given_up = True  # the script's own choice
            return
        wanted = max(youngest, min(_PER_NODE * nodes, _MOST))
        if wanted > youngest:
            gc.set_threshold(wanted, middle, oldest)
        self._set = wanted


# The process's one fit, which every barrier updates.
threshold = ThresholdFit()
