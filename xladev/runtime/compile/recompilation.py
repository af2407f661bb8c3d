"""Recompilations, published once: each compile is compared with the earlier graphs of its site.

Every graph compiled in this process is summarised by trigger site (summaries only, no device
buffers). When a site that compiled before compiles a different graph, the runtime publishes one
`Recompile` event saying what changed, just before that graph's `Compile`. Consumers (the
debug analysis, the event log, `assert_no_recompiles`) subscribe to it; none computes it again.
"""

from __future__ import annotations

import threading
import time

from xladev.events import Frame, Recompile, bus
from xladev.graphdiff import GraphSummary, closest, differences
from xladev.runtime.compile.graph_info import RuntimeGraphInfo
from xladev.schema.sites import site_of


class SiteHistory:
    """The graphs compiled at each trigger site, in compile order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # By (site, graph name): a compiled region's two syncs share the caller's line but are different
        # barriers (`<name>_clear_pending` and `<name>`), never one graph recompiled.
        self.sites: dict[tuple[str, str | None], list[GraphSummary]] = {}

    def record(self, info: RuntimeGraphInfo, compile_ns: int, frames: tuple[Frame, ...], step: int,
               name: str | None = None) -> Recompile | None:
        """Adds a compiled graph; returns the `Recompile` event when its site had compiled before.

        Args:
          info: the compiled graph.
          compile_ns: how long it took to compile.
          frames: the Python stack of the barrier that compiled it (innermost first).
          step: the step being recorded.
          name: the graph name it compiled under (a compiled region's), if any.

        Returns:
          The event to publish, or None for a site's first graph.
        """
        summary = info.summary()
        summary.compile_ns = compile_ns
        site = site_of(frames)
        with self._lock:
            earlier = self.sites.setdefault((site, name), [])
            result = None
            if earlier:
                previous = closest(earlier, summary)
                result = Recompile(time.perf_counter_ns(), step, summary.hash, previous.hash, site,
                                    tuple(differences(previous, summary)), len(earlier) + 1,
                                    sum(g.compile_ns for g in earlier) + compile_ns)
            earlier.append(summary)
        return result

    def clear(self) -> None:
        with self._lock:
            self.sites.clear()


def publish(history: SiteHistory, info: RuntimeGraphInfo, compile_ns: int, frames, step: int,
            name: str | None = None) -> Recompile | None:
    """Records a compile and publishes its `Recompile` event when there is one. Never raises.

    A diff bug must not fail the user's step: it is reported on stderr and the compile goes on.

    Returns:
      The `Recompile` event (published or not: the profiler span shows its reason too), or None.
    """
    try:
        event = history.record(info, compile_ns, frames, step, name)
    except Exception as exc:  # pragma: no cover - a bug in the diff, not in the user's program
        import sys

        print(f"xladev: comparing graph {info.hash} with its site's earlier graphs failed: {exc!r}", file=sys.stderr)
        return None
    if event is not None and bus.active:
        bus.emit(event)
    return event
