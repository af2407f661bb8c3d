"""The graphs of a run that failed, and its out-of-memory messages, folded from their records.

An event log holds each failure as a `compile_failed` or `execute_failed` record, the lines of xladev's
out-of-memory explainer after the message's first line. A PT_XLA_DEBUG log holds the lines the runtime printed
(`xladev.schema.debug_text.failure_lines`): its reader lifts them to the same records, and adds the explainer and
the saved HLO's path as their lines follow. Out-of-memory messages that are no failure's (XLA's own, as
PyTorch/XLA logs them) are told to `RunFailures.out_of_memory_seen`.
"""

from __future__ import annotations

import dataclasses

from xladev.analysis.memory_rules import add_out_of_memory, parse_out_of_memory
from xladev.schema import records as rec
from xladev.schema.debug_text import FAILURE_VERBS
from xladev.schema.sites import split_site

MAX_OUT_OF_MEMORY = 100  # distinct out-of-memory messages kept (PyTorch/XLA logs each one several times)


def failure_kind(record: rec.CompileFailed | rec.ExecuteFailed) -> str:
    """``compile`` or ``execute``: the kind of a failure's record."""
    return "compile" if isinstance(record, rec.CompileFailed) else "execute"


def failure_verb(record: rec.CompileFailed | rec.ExecuteFailed) -> str:
    """What happened to the graph, in the words PT_XLA_DEBUG prints (`failed to compile`)."""
    return FAILURE_VERBS[failure_kind(record)]


@dataclasses.dataclass
class Failure:
    """One graph that failed.

    Attributes:
      record: its record (a reader may add to its message and HLO path as their lines follow).
      line: the input line it was read from.
      out_of_memory: its entry in `RunFailures.out_of_memory` when it ran out of memory, else None.
    """

    record: rec.CompileFailed | rec.ExecuteFailed
    line: int
    out_of_memory: dict | None = None

    @property
    def kind(self) -> str:
        """``compile`` or ``execute``."""
        return failure_kind(self.record)

    def facts(self) -> dict:
        """What `analysis.failure_finding` reads of it: hash, message (its first line), hlo_path, site."""
        return {"hash": self.record.hash, "message": self.record.message.split("\n", 1)[0],
                "hlo_path": self.record.hlo_path, "site": split_site(self.record.site)[0]}


class RunFailures:
    """The failed graphs of one run, and its out-of-memory messages.

    Args:
      limit: the most failures kept (all are counted).

    Attributes:
      graphs: the failures kept, oldest first.
      latest: the latest failure, kept or not.
      out_of_memory: one dict per distinct out-of-memory message (`analysis.add_out_of_memory`): ``count``,
        ``line`` (its first), and ``hash``, ``site``, ``details``, ``hlo_path`` where a failure names them.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.graphs: list[Failure] = []
        self.latest: Failure | None = None
        self.out_of_memory: list[dict] = []

    def __bool__(self) -> bool:
        return bool(self.graphs or self.out_of_memory)

    def fold(self, record: rec.CompileFailed | rec.ExecuteFailed, line: int) -> Failure:
        """Folds one failure's record.

        Args:
          record: the record.
          line: its input line.

        Returns:
          The failure (kept, or past the limit).
        """
        first, *details = record.message.split("\n")
        found = parse_out_of_memory(first)
        entry = None if found is None else self.out_of_memory_seen(
            line, found, hash=record.hash, site=split_site(record.site)[0], details=tuple(details),
            hlo_path=record.hlo_path)
        failure = self.latest = Failure(record, line, entry)
        if len(self.graphs) < self.limit:
            self.graphs.append(failure)
        return failure

    def out_of_memory_seen(self, line: int, found: dict, **known) -> dict | None:
        """Counts one sighting of an out-of-memory message (`analysis.add_out_of_memory`).

        Args:
          line: where it was read.
          found: what `analysis.parse_out_of_memory` read of it.
          **known: what the sighting knows of its graph (``hash``, ``site``, ``details``, ``hlo_path``).

        Returns:
          Its entry, or None past the bound.
        """
        return add_out_of_memory(self.out_of_memory, line, found, known, MAX_OUT_OF_MEMORY)

    def of_kind(self, kind: str) -> tuple[list[Failure], int]:
        """The failures of `kind` (``compile``/``execute``) that did not run out of memory, and how many did (the
        out-of-memory finding tells those)."""
        failed = [f for f in self.graphs if f.kind == kind]
        return [f for f in failed if f.out_of_memory is None], sum(f.out_of_memory is not None for f in failed)

