"""One run's inputs and their diagnosis, without pandas: what the live TUI and `xladev report` both diagnose.

`RunInputs` groups the inputs of one run by rank, picks each group's metrics input and holds the findings and
the verdict, which the shared rules (`xladev.report.run_findings`) compute from the inputs' run states and
reports. `xladev.report.loader.Report` is a `RunInputs` with the tables (pandas DataFrames) on top. This module
imports neither pandas nor the renderers, so a live reader diagnoses at once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TypeVar

from xladev.report.model import BINARY_DATA, EMPTY_FILE, NoCompleteRecordError, ParseWarning, SourceResult
from xladev.report.names import canonical_numbers
from xladev.report.run_identity import reconcile

Inputs = TypeVar("Inputs", bound="RunInputs")


class RunInputs:
    """One run read from one or more inputs, and its diagnosis (`xladev.report.loader.Report` adds the tables).

    Attributes:
      sources: what was read from each input, in the order given.
    """

    def __init__(self, sources: list[SourceResult]):
        """Wraps already-read sources (use `load` to read files).

        Args:
          sources: one result per input.
        """
        self.sources = sources

    # ------------------------------------------------------------ grouping

    @property
    def name(self) -> str:
        """The inputs' names joined with ``+``."""
        return " + ".join(source.name for source in self.sources)

    @property
    def warnings(self) -> list[ParseWarning]:
        """Warnings of all inputs (the stored ones; see ``warning_count``)."""
        return [warning for source in self.sources for warning in source.warnings]

    @property
    def warning_count(self) -> int:
        """All warnings of all inputs, including those not stored."""
        return sum(source.warning_count for source in self.sources)

    @property
    def has_record(self) -> bool:
        """True when some input holds a complete record; False when nothing can be judged."""
        return any(source.has_record for source in self.sources)

    def ranks(self) -> dict[int | None, list[SourceResult]]:
        """Inputs grouped by rank (None for inputs without a ``.N`` suffix), ranks in order."""
        groups: dict[int | None, list[SourceResult]] = {}
        for source in sorted(self.sources, key=lambda s: (s.rank is not None, s.rank or 0)):
            groups.setdefault(source.rank, []).append(source)
        return groups

    @staticmethod
    def primary_metrics(sources: Iterable[SourceResult]) -> SourceResult | None:
        """The input whose metrics speak for a group: the most reports, then the most steps."""
        with_metrics = [source for source in sources if source.has_metrics]
        if not with_metrics:
            return None
        return max(with_metrics, key=lambda s: (s.snapshots, s.final.counters.get("MarkStep", 0)))

    def final_numbers(self, source: SourceResult) -> dict[str, float]:
        """The canonical numbers (steps, compiles, ...) of an input's last report."""
        final = source.final
        if final is None:
            return {}
        samples = {name: block.total_samples for name, block in final.metrics.items()
                   if block.total_samples is not None}
        accumulators = {name: block.accumulator for name, block in final.metrics.items()
                        if block.accumulator is not None}
        return canonical_numbers(final.counters, samples, accumulators)

    @functools.cached_property
    def findings(self):
        """The diagnosis: a list of `xladev.analysis.Finding`, most severe first."""
        from xladev.report.run_findings import diagnose

        return diagnose(self)

    def verdict(self) -> str:
        """``healthy``, ``info``, ``warning`` or ``error``: the most severe finding; ``unknown`` when no input
        holds a complete record, or when the input cannot show whether the run is healthy (no step
        count) and nothing worse was found."""
        from xladev.analysis import ADVICE_RULES, INFO, SEVERITIES, UNKNOWN, severity_rank

        if not self.has_record:
            return UNKNOWN
        worst = max((severity_rank(f.severity) for f in self.findings
                     if f.rule != "healthy" and f.rule not in ADVICE_RULES), default=-1)
        if worst <= severity_rank(INFO) and any(f.rule == "not-enough-evidence" for f in self.findings):
            return UNKNOWN
        return "healthy" if worst < 0 else SEVERITIES[worst]


def inputs_from_sources(sources: list[SourceResult], kind: type[Inputs] = RunInputs) -> Inputs:
    """Makes one run of inputs already read, warning about inputs with nothing recognised.

    Args:
      sources: results of `xladev.report.inputs.read_source`.
      kind: what to make of them (`RunInputs`, or the pandas `Report`).

    Returns:
      The run's inputs.

    Raises:
      NoCompleteRecordError: when no input holds a complete record (its ``report`` has the verdict
        ``unknown`` and says why), or (`DifferentRunsError`) when inputs of the same rank come from
        different runs.
    """
    sources = reconcile(sources)
    for source in sources:  # judged again each time: a live reader (the TUI) asks again as its log grows
        source.problem = None if source.has_record else _why_empty(source)
    inputs = kind(sources)
    if not inputs.has_record:
        raise NoCompleteRecordError("; ".join(f"{source.name}: {source.problem}" for source in sources), inputs)
    for source in sources:
        if source.problem and not source.unreadable and not source.counted_in:  # e.g. a program's output
            source.warn(0, source.problem)
    return inputs


def _why_empty(source: SourceResult) -> str:
    """What an input without anything to diagnose holds instead, in the words a user can act on."""
    if source.problem == BINARY_DATA:  # read_source read nothing of it
        return source.problem
    if source.damage:
        return f"{source.damage}; no complete record before it"
    if source.size_bytes == 0 and source.lines == 0:
        return EMPTY_FILE
    if not source.lines:
        return "nothing in it once decompressed"
    if source.cut_report_line:
        return f"its only metrics report (line {source.cut_report_line}) is cut short: no complete report"
    if source.input_kind == "event-log":
        return ("an xladev event log with no events after its header: the run stopped before its first step, "
                "or is still starting (follow it live with `xladev tui`)")
    return "no PyTorch/XLA metrics report or PT_XLA_DEBUG output found"
