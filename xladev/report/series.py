"""A bounded, compact per-step series of the numbers the diagnoses need.

An XLA_METRICS_FILE holds one full report per step, so a long run has millions of reports. The
reader keeps, per report, only a few canonical numbers (steps, compiles, transfers, ...) and the
``aten::`` fallback counters, in `array` columns. When the series reaches ``max_rows`` rows it
drops every other row and keeps one report in two from then on, so memory stays flat however
long the file is. The exact facts the diagnoses need (the numbers at the end of warm-up, how many
reports after warm-up compiled, the last one that did) are tracked on every report, so thinning
the stored rows never changes a diagnosis.
"""

from __future__ import annotations

import math
from array import array

from xladev.analysis import SETUP_STEPS, WARMUP_STEPS

DEFAULT_MAX_ROWS = 8192

# Columns whose increases after warm-up are counted exactly.
TRACKED_INCREASES = ("compiles", "transfers_from_device", "item_calls", "fallback_calls", "cache_misses",
                     "executions")


class StepSeries:
    """Per-report numbers of one input, thinned to at most ``max_rows`` stored rows.

    Each appended row is a dict of floats with at least ``snapshot`` (0-based report index),
    ``step`` (N of ``[MetricsData; step=N]`` or nan) and ``steps`` (steps completed). Columns that
    first appear later are 0 in earlier rows, as a counter is 0 before its first increment.

    Attributes:
      warmup_steps: steps allowed to compile freely.
      at_warmup: the last row whose ``steps`` is within warm-up (None if no such row).
      at_setup: the last row whose ``steps`` is within set-up (`xladev.analysis.SETUP_STEPS`; None if no such row).
      first: the first row appended.
      last: the last row appended.
      increases_after_warmup: tracked column -> reports after warm-up in which it grew.
      last_increase_steps: tracked column -> ``steps`` of the last report in which it grew.
      first_increase: tracked column -> (``steps``, input line) of the first report after warm-up
        in which it grew.
      last_increase_lines: tracked column -> input line of the last report in which it grew.
      graph_nodes_per_sync: (first after warm-up, last) mean IR nodes per synced graph.
      graph_nodes_range_after_warmup: (min, max) of the per-report mean graph size after warm-up.
    """

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS, warmup_steps: int = WARMUP_STEPS):
        """Creates an empty series.

        Args:
          max_rows: rows stored before thinning (at least 2).
          warmup_steps: steps allowed to compile freely.
        """
        self._max_rows = max(2, max_rows)
        self._columns: dict[str, array] = {}
        self._stored = 0
        self._stride = 1
        self._appended = 0
        self.warmup_steps = warmup_steps
        self.at_warmup: dict[str, float] | None = None
        self.at_setup: dict[str, float] | None = None
        self.first: dict[str, float] | None = None
        self.last: dict[str, float] | None = None
        self.increases_after_warmup = {name: 0 for name in TRACKED_INCREASES}
        self.last_increase_steps: dict[str, float] = {}
        self.first_increase: dict[str, tuple[float, float]] = {}
        self.last_increase_lines: dict[str, float] = {}
        self.graph_nodes_per_sync: list[float | None] = [None, None]
        self.graph_nodes_range_after_warmup: list[float | None] = [None, None]

    def __len__(self) -> int:
        return self._appended

    @property
    def stride(self) -> int:
        """One stored row per ``stride`` appended rows."""
        return self._stride

    @property
    def stored_rows(self) -> int:
        """Rows currently stored."""
        return self._stored

    def append(self, row: dict[str, float]) -> None:
        """Adds the numbers of one report.

        Args:
          row: column name to value; must include ``steps``.
        """
        previous = self.last
        self._track(previous, row)
        if self.first is None:
            self.first = row
        self.last = row
        index = self._appended
        self._appended += 1
        if index % self._stride:
            return
        for name in row.keys() - self._columns.keys():
            self._columns[name] = array("d", bytes(8 * self._stored))
        for name, column in self._columns.items():
            column.append(row.get(name, 0.0))
        self._stored += 1
        if self._stored >= self._max_rows:
            for name, column in self._columns.items():
                self._columns[name] = column[::2]
            self._stored = len(next(iter(self._columns.values())))
            self._stride *= 2

    def _track(self, previous: dict[str, float] | None, row: dict[str, float]) -> None:
        steps = row.get("steps", 0.0)
        if steps <= SETUP_STEPS:
            self.at_setup = row
        if steps <= self.warmup_steps:
            self.at_warmup = row
            return
        if previous is None:
            return
        for name in TRACKED_INCREASES:
            if row.get(name, 0.0) > previous.get(name, 0.0):
                self.increases_after_warmup[name] += 1
                self.last_increase_steps[name] = steps
                self.last_increase_lines[name] = row.get("line", 0.0)
                if name not in self.first_increase:
                    self.first_increase[name] = (steps, row.get("line", 0.0))
        new_syncs = row.get("graph_syncs", 0.0) - previous.get("graph_syncs", 0.0)
        if new_syncs > 0:
            mean = (row.get("graph_nodes", 0.0) - previous.get("graph_nodes", 0.0)) / new_syncs
            if self.graph_nodes_per_sync[0] is None:
                self.graph_nodes_per_sync[0] = mean
            self.graph_nodes_per_sync[1] = mean
            low, high = self.graph_nodes_range_after_warmup
            self.graph_nodes_range_after_warmup = [mean if low is None else min(low, mean),
                                                   mean if high is None else max(high, mean)]

    def after_setup(self, column: str) -> tuple[int, int] | None:
        """How much `column` grew after set-up (from the last report within `SETUP_STEPS`, else the first
        report) up to the last report, and in how many steps; None with fewer than two reports.

        A metrics file writes a report at each barrier, so what happens after the last barrier (a final
        print) is not in it; an event log's series has a row per step record, the same.
        """
        base = self.at_setup if self.at_setup is not None else self.first
        last = self.last
        if base is None or last is None or base is last:
            return None
        return int(last.get(column, 0.0) - base.get(column, 0.0)), int(last.get("steps", 0.0) - base.get("steps", 0.0))

    def columns(self) -> dict[str, list[float]]:
        """The stored rows as columns, with the last appended row added when thinning skipped it.

        Returns:
          Column name to list of values, all the same length.
        """
        columns = {name: column.tolist() for name, column in self._columns.items()}
        last = self.last
        if last is not None and (self._appended - 1) % self._stride:
            stored = self._stored
            for name in last.keys() - columns.keys():
                columns[name] = [0.0] * stored
            for name, values in columns.items():
                values.append(last.get(name, 0.0))
        return columns

    def stable_graph_size(self, tolerance: float = 0.05) -> bool | None:
        """True when every report after warm-up traced graphs of about the same mean size.

        Args:
          tolerance: the relative spread allowed between the smallest and largest mean.

        Returns:
          True or False, or None when there is no report with a sync after warm-up.
        """
        low, high = self.graph_nodes_range_after_warmup
        if low is None or high is None or math.isnan(low) or math.isnan(high):
            return None
        return high - low <= tolerance * max(abs(high), 1.0)
