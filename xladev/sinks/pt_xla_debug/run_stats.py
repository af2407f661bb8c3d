"""What the debug analysis saw of a run: compiles per site, recompilations, transfer hot spots, fallbacks."""

from __future__ import annotations

import dataclasses
import threading
import time

from xladev import analysis
from xladev.analysis import wall_time

from xladev.events import Fallback, Compile, Recompile, Step, TransferFromDevice
from xladev.schema.sites import site_of


@dataclasses.dataclass
class HotSpot:
    kind: str
    site: str
    count: int = 0
    nbytes: int = 0


class RunStats:
    """What one consumer saw since it started: steps, compiles, transfer hot spots, fallbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.recompilations: list[Recompile] = []
        self.compile_sites: dict[str, tuple[int, int]] = {}
        self.transfers: dict[tuple[str, str], HotSpot] = {}
        self.fallbacks: dict[tuple[str, str], int] = {}
        self.steps = 0
        # Device->host reads in set-up (analysis.SETUP_STEPS) and after it, and those of the latest step that read:
        # the reads after the last barrier (a final print) are one-time too, known once the run ends.
        self.setup_reads = 0
        self.later_reads = 0
        self.latest_read_step = -1
        self.latest_step_reads = 0
        self.compiles = 0
        self.longest_compile_ns = 0
        self.longest_execute_ns = 0
        # Where the time went (`xladev.analysis.wall_time.PARTS`), since `started_ns`.
        self.started_ns = time.perf_counter_ns()
        self.times: dict[str, int] = dict.fromkeys(wall_time.PARTS, 0)

    def spent(self, part: str, ns: int) -> None:
        """Adds `ns` to a part of the run's time."""
        with self.lock:
            self.times[part] += ns

    def time_breakdown(self) -> wall_time.TimeBreakdown:
        """The run's time so far, by part."""
        with self.lock:
            parts = {part: float(ns) for part, ns in self.times.items() if ns or part != "fallback"}
            return wall_time.TimeBreakdown(parts=parts, wall_ns=float(time.perf_counter_ns() - self.started_ns),
                                           steps=self.steps, exact=True, basis="measured by the debug analysis")

    def on_recompiled(self, event: Recompile) -> None:
        with self.lock:
            self.recompilations.append(event)

    def on_compiled(self, event: Compile) -> None:
        site = site_of(event.frames)
        with self.lock:
            self.compiles += 1
            self.times["compile"] += event.compile_ns
            self.longest_compile_ns = max(self.longest_compile_ns, event.compile_ns)
            count, ns = self.compile_sites.get(site, (0, 0))
            self.compile_sites[site] = (count + 1, ns + event.compile_ns)

    def on_transfer(self, event: TransferFromDevice) -> HotSpot:
        key = (event.kind, site_of(event.frames))
        with self.lock:
            self.times["from_device"] += event.duration_ns
            spot = self.transfers.get(key)
            if spot is None:
                spot = self.transfers[key] = HotSpot(*key)
            spot.count += 1
            spot.nbytes += event.nbytes
            if event.step < analysis.SETUP_STEPS:
                self.setup_reads += 1
            else:
                self.later_reads += 1
            if event.step != self.latest_read_step:
                self.latest_read_step, self.latest_step_reads = event.step, 0
            self.latest_step_reads += 1
        return spot

    def steady_reads(self) -> tuple[int, int]:
        """(device->host reads, steps) after set-up up to the last barrier, as `analysis.host_transfer_finding`
        judges them."""
        with self.lock:
            after_end = self.latest_step_reads if self.latest_read_step >= max(self.steps, analysis.SETUP_STEPS) else 0
            return self.later_reads - after_end, max(0, self.steps - analysis.SETUP_STEPS)

    def on_fallback(self, event: Fallback) -> None:
        key = (event.name, site_of(event.frames))
        with self.lock:
            self.times["fallback"] += event.cpu_ns
            self.fallbacks[key] = self.fallbacks.get(key, 0) + 1

    def on_step(self, event: Step) -> None:
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
