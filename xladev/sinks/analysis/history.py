"""Compile history per trigger site, recompilation causes, and device→host transfer hot spots."""

from __future__ import annotations

import dataclasses
import threading

from xladev.events import FallbackOp, GraphCompiled, StepMarked, TransferFromDevice, bus
from xladev.sinks.analysis.frames import site_of
from xladev.sinks.analysis.graphdiff import GraphSummary, closest, differences, summarize


@dataclasses.dataclass
class Recompilation:
    """A compile at a site that had compiled before: what changed, and the site's totals."""

    site: str
    previous_hash: str
    new_hash: str
    changes: list[str]
    graphs_at_site: int
    compile_ns_at_site: int
    step: int

    def lines(self) -> list[str]:
        from xladev.report.units import format_time_ns

        return [f"compared with graph {self.previous_hash} from the same site:"] + [f"- {c}" for c in self.changes] + [
            f"{self.site} has compiled {self.graphs_at_site} graphs so far, "
            f"{format_time_ns(self.compile_ns_at_site)} compile time in total"]

    def headline(self) -> str:
        return self.changes[0] if self.changes else "graph changed"


@dataclasses.dataclass
class HotSpot:
    kind: str
    site: str
    count: int = 0
    nbytes: int = 0


class SiteHistory:
    """Every graph compiled in this process, by trigger site (one per process, fed from import on).

    Consumers (the debug analysis, `assert_no_recompiles`) read the Recompilation of an event here,
    so they compare against graphs compiled before they started.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sites: dict[str, list[GraphSummary]] = {}
        self.recompilations: list[Recompilation] = []
        self._latest: tuple = (None, None)  # (the latest GraphCompiled, its Recompilation or None)
        self.subscription = None

    def start(self) -> None:
        if self.subscription is None:
            self.subscription = bus.subscribe(self.result_for, GraphCompiled, wants_frames=True)

    def result_for(self, event: GraphCompiled) -> Recompilation | None:
        """What changed for this compile event (computed once per event, whoever asks first)."""
        with self.lock:
            # The latest event is kept itself, not its id(): an event freed after its step can leave its
            # address to the next one, which then read the old answer ("no recompilation").
            cached_event, cached = self._latest
            if cached_event is event:
                return cached
        summary = summarize(event.graph)
        summary.compile_ns = event.compile_ns
        site = site_of(event.frames)
        with self.lock:
            earlier = self.sites.setdefault(site, [])
            result = None
            if earlier:
                previous = closest(earlier, summary)
                result = Recompilation(site, previous.hash, summary.hash, differences(previous, summary),
                                       len(earlier) + 1, sum(g.compile_ns for g in earlier) + event.compile_ns,
                                       event.step)
                self.recompilations.append(result)
            earlier.append(summary)
            self._latest = (event, result)  # only the latest event is asked about again
        return result


site_history = SiteHistory()


class RunStats:
    """What one consumer saw since it started: steps, compiles, transfer hot spots, fallbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.recompilations: list[Recompilation] = []
        self.compile_sites: dict[str, tuple[int, int]] = {}
        self.transfers: dict[tuple[str, str], HotSpot] = {}
        self.fallbacks: dict[tuple[str, str], int] = {}
        self.steps = 0
        self.compiles = 0
        self.longest_compile_ns = 0
        self.longest_execute_ns = 0

    def on_compiled(self, event: GraphCompiled) -> Recompilation | None:
        recompilation = site_history.result_for(event)
        site = site_of(event.frames)
        with self.lock:
            self.compiles += 1
            self.longest_compile_ns = max(self.longest_compile_ns, event.compile_ns)
            count, ns = self.compile_sites.get(site, (0, 0))
            self.compile_sites[site] = (count + 1, ns + event.compile_ns)
            if recompilation is not None:
                self.recompilations.append(recompilation)
        return recompilation

    def on_transfer(self, event: TransferFromDevice) -> HotSpot:
        key = (event.kind, site_of(event.frames))
        with self.lock:
            spot = self.transfers.get(key)
            if spot is None:
                spot = self.transfers[key] = HotSpot(*key)
            spot.count += 1
            spot.nbytes += event.nbytes
        return spot

    def on_fallback(self, event: FallbackOp) -> None:
        key = (event.name, site_of(event.frames))
        with self.lock:
            self.fallbacks[key] = self.fallbacks.get(key, 0) + 1

    def on_step(self, event: StepMarked) -> None:
        self.steps += 1

    def hot_spots(self) -> list[HotSpot]:
        with self.lock:
            return sorted(self.transfers.values(), key=lambda s: (-s.count, s.site))

    def fallback_sites(self) -> list[tuple[str, str, int]]:
        with self.lock:
            return sorted(((op, site, n) for (op, site), n in self.fallbacks.items()), key=lambda t: (-t[2], t[0]))

    def compiles_per_site(self) -> list[tuple[str, int, int]]:
        with self.lock:
            return sorted(((site, n, ns) for site, (n, ns) in self.compile_sites.items()), key=lambda t: (-t[1], t[0]))
