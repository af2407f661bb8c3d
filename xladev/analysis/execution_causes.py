"""The executions of a run by why they ran: (user site, cause, graph) -> how many, and the first one's line.

A graph that runs where a value is read (`.item()`, a print) rather than at a step barrier shows here by its cause
and line. An event log's `execute` records say both; a PT_XLA_DEBUG log's Execution Analysis blocks are lifted to
the same records by its reader, so both inputs fold here.
"""

from __future__ import annotations

from xladev.schema import records as rec
from xladev.schema.sites import split_site

MAX_KEYS = 50_000  # distinct (site, cause, graph) kept


class ExecutionCauses:
    """Executions by (user site `file:line`, cause as PT_XLA_DEBUG words it, graph hash).

    Attributes:
      by_key: (site, cause, graph hash) -> [count, first line, inputs, outputs].
    """

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str, str], list] = {}

    def fold(self, record: rec.Execute, line: int) -> None:
        """Folds one execution.

        Args:
          record: the record.
          line: its input line.
        """
        key = (split_site(record.site)[0], record.cause.get("text", ""), record.hash)
        entry = self.by_key.get(key)
        if entry is not None:
            entry[0] += 1
        elif len(self.by_key) < MAX_KEYS:
            self.by_key[key] = [1, line, record.inputs, record.outputs]
