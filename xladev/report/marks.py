"""What happened on which step: the marks of the report's step timeline, and the numbers per graph.

An event log says, for every compile, device→host read, CPU fallback and graph break, the step it
happened in and the user's line that caused it. `MarkLog` keeps them as marks, one per (step, kind,
site, cause) with a count, bounded: when it holds ``max_marks`` marks it merges them into buckets of
twice as many steps (as `xladev.report.series.StepSeries` thins its rows), so a run of any length
costs the same memory, and a mark always says which steps it covers.
"""

from __future__ import annotations

import dataclasses

# The kinds of mark, in the order the timeline draws their rows.
KINDS = ("compile", "transfer", "fallback", "graph-break")
LABELS = {"compile": "compile", "transfer": "device→host read", "fallback": "CPU fallback",
          "graph-break": "graph break"}
DEFAULT_MAX_MARKS = 20_000


@dataclasses.dataclass
class StepMark:
    """Events of one kind from one site with one cause, in one step (or bucket of steps).

    Attributes:
      step: the first step it covers (0-based, as the event log counts).
      steps: how many steps it covers (1 unless the log was bucketed).
      kind: one of `KINDS`.
      site: the user's line, ``file:line (function)``; "" when the input does not say.
      cause: why: the compile's cause, the read's kind (``.item()``), the op run on the CPU, the break's reason.
      count: events merged into it.
      line: the input line of the first of them.
      ns: time they took (compile time, transfer time, CPU time), 0 when not measured.
    """

    step: int
    steps: int
    kind: str
    site: str
    cause: str
    count: int = 1
    line: int = 0
    ns: float = 0.0


class MarkLog:
    """Bounded marks of one input, merged into buckets of steps when there are too many."""

    def __init__(self, max_marks: int = DEFAULT_MAX_MARKS):
        """Creates an empty log.

        Args:
          max_marks: the most marks kept before merging into wider buckets (at least 1).
        """
        self._max = max(1, max_marks)
        self._marks: dict[tuple[int, str, str, str], StepMark] = {}
        self.stride = 1

    def __len__(self) -> int:
        return len(self._marks)

    def add(self, step: int, kind: str, site: str, cause: str, line: int, ns: float = 0.0, count: int = 1) -> None:
        """Records `count` events of `kind` at `site` in `step`.

        Args:
          step: the step they happened in (0-based).
          kind: one of `KINDS`.
          site: the user's line ("" when unknown).
          cause: why (see `StepMark.cause`).
          line: the input line of the record.
          ns: the time they took (0 when not measured).
          count: how many events.
        """
        bucket = max(0, step) // self.stride * self.stride
        key = (bucket, kind, site, cause)
        mark = self._marks.get(key)
        if mark is None:
            if len(self._marks) >= self._max:
                self._widen()
                self.add(step, kind, site, cause, line, ns, count)
                return
            self._marks[key] = StepMark(bucket, self.stride, kind, site, cause, count, line, float(ns))
        else:
            mark.count += count
            mark.ns += ns

    def _widen(self) -> None:
        """Doubles the bucket width and merges the marks that fall in the same bucket."""
        self.stride *= 2
        merged: dict[tuple[int, str, str, str], StepMark] = {}
        for mark in self._marks.values():
            bucket = mark.step // self.stride * self.stride
            key = (bucket, mark.kind, mark.site, mark.cause)
            into = merged.get(key)
            if into is None:
                merged[key] = dataclasses.replace(mark, step=bucket, steps=self.stride)
            else:
                into.count += mark.count
                into.ns += mark.ns
                into.line = min(into.line, mark.line)
        self._marks = merged

    def marks(self) -> list[StepMark]:
        """The marks kept.

        Returns:
          New list of them in step order, then kind (in `KINDS` order), then input line.
        """
        order = {kind: i for i, kind in enumerate(KINDS)}
        return sorted(self._marks.values(), key=lambda m: (m.step, order.get(m.kind, len(order)), m.line))
