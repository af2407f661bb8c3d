"""Keeps runs apart: inputs of different runs are refused, and the same run given twice is read once.

xladev states a run's identity (host, pid, start) in its event log's header and its PT_XLA_DEBUG
end-of-run summary; metrics reports and PyTorch/XLA's own logs carry none, so they are taken as the
user gives them.
"""

from __future__ import annotations

import os

from xladev.report.model import SourceResult, UnreadableInputError
from xladev.schema import records as rec
from xladev.schema import record_wording


class DifferentRunsError(UnreadableInputError):
    """Inputs for the same rank come from different runs. The message is one line naming both."""


def _identify(source: SourceResult) -> None:
    """Fills a text input's run identity from xladev's end-of-run summary, when it has one."""
    if source.run_id is not None or source.debug is None or source.debug.run_summary is None:
        return
    run = source.debug.run_summary.get("run")
    if not run or run.count(":") < 2:
        return
    host, pid, started = run.rsplit(":", 2)
    source.run_id = run
    try:
        source.run_label = record_wording.run_label(host, int(pid), float(started))
    except ValueError:
        source.run_label = run


def reconcile(sources: list[SourceResult]) -> list[SourceResult]:
    """The inputs to read as one run.

    Args:
      sources: the inputs as read.

    Returns:
      The inputs without repeats: a file given twice, or a second event log of the same run, is dropped,
      and a debug log of the run an event log already describes keeps its lines but not its counts.

    Raises:
      DifferentRunsError: two inputs of the same rank come from different runs.
    """
    for source in sources:
        _identify(source)
    first_of: dict = {}
    for source in sources:
        if source.run_id is None:
            continue
        other = first_of.setdefault(source.rank, source)
        if other.run_id != source.run_id:
            raise DifferentRunsError(
                f"{other.name} and {source.name} are from different runs ({other.run_label} vs {source.run_label}): "
                "give the inputs of one run, or compare two runs with `xladev report --compare A B`")
    kept: list[SourceResult] = []
    paths: dict[str, SourceResult] = {}
    logs: dict[str, SourceResult] = {}
    for source in sources:
        real = os.path.realpath(source.path)
        if real in paths:
            paths[real].warn(0, f"{source.name} was given twice: read once", always=True)
            continue
        paths[real] = source
        if source.input_kind == "event-log" and source.run_id is not None:
            if source.run_id in logs:
                logs[source.run_id].warn(0, f"{source.name} is another event log of the same run: read once",
                                         always=True)
                continue
            logs[source.run_id] = source
        kept.append(source)
    for source in kept:
        log = logs.get(source.run_id) if source.input_kind != "event-log" else None
        if log is not None and source.debug is not None:
            # The event log holds every compile, execution and transfer this debug output describes.
            source.debug = None
            source.counted_in = log.name
            source.warn(0, f"the same run as {log.name}: its compiles and transfers are counted once, from "
                           "the event log", always=True)
    return kept
