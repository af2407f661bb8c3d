"""The runtime's warnings in a run, folded from their records: a graph growing without a barrier, memory that keeps
growing, torch.compile's graph breaks and TorchDynamo's recompilations.

An event log holds them as records. A PT_XLA_DEBUG log holds them as the lines the runtime printed
(`analysis.graph_growing_message` and its siblings): `record_of_line` lifts such a line to the record it was
written from, so both inputs fold into the same `RunWarnings` and one rule reads them.
"""

from __future__ import annotations

import dataclasses

from xladev.analysis.compile_rules import parse_dynamo_recompile_message, parse_graph_break_message
from xladev.analysis.general_rules import parse_graph_growing
from xladev.analysis.memory_rules import MEMORY_SPACES, parse_memory_growing
from xladev.schema import records as rec
from xladev.schema.units import parse_bytes

MAX_KEYS = 1_000  # distinct graph-break sites and failed guards kept


@dataclasses.dataclass
class Warned:
    """One warning as the run gave it, maybe many times.

    Attributes:
      first: the first record (the one the user saw on stderr), and `first_line` its input line.
      latest: the latest record (for a growth, the longest), and `latest_line` its input line.
      times: how many times it was given.
    """

    first: rec.Record
    first_line: int
    latest: rec.Record
    latest_line: int
    times: int = 1

    def again(self, record: rec.Record, line: int) -> None:
        self.latest, self.latest_line = record, line
        self.times += 1


class RunWarnings:
    """The runtime's warnings of one run.

    Attributes:
      graph_growing: the graph-growing warnings (None when none).
      memory_growing: the memory-growing warnings by memory (`MemoryGrowing.space`: device, host); a memory this
        reader does not know is left out (no finding rather than a wrong one).
      graph_breaks: torch.compile's graph breaks by (site, by, reason).
      dynamo_recompiles: TorchDynamo's recompilations by (function, failed guard).
    """

    def __init__(self) -> None:
        self.graph_growing: Warned | None = None
        self.memory_growing: dict[str, Warned] = {}
        self.graph_breaks: dict[tuple[str, str, str], Warned] = {}
        self.dynamo_recompiles: dict[tuple[str, str], Warned] = {}

    def __bool__(self) -> bool:
        return bool(self.graph_growing or self.memory_growing or self.graph_breaks or self.dynamo_recompiles)

    def fold(self, record: rec.GraphGrowing | rec.MemoryGrowing | rec.GraphBreak | rec.DynamoRecompile,
             line: int) -> None:
        """Folds one warning's record.

        Args:
          record: the record.
          line: its input line.
        """
        if isinstance(record, rec.GraphGrowing):
            if self.graph_growing is None:
                self.graph_growing = Warned(record, line, record, line)
            else:
                self.graph_growing.again(record, line)
        elif isinstance(record, rec.MemoryGrowing):
            if record.space in MEMORY_SPACES:
                _count(self.memory_growing, record.space, record, line)
        elif isinstance(record, rec.GraphBreak):
            _count(self.graph_breaks, (record.site or "", record.by, record.reason), record, line)
        else:
            _count(self.dynamo_recompiles, (record.function, record.guard), record, line)


def _count(table: dict, key, record: rec.Record, line: int) -> None:
    seen = table.get(key)
    if seen is not None:
        seen.again(record, line)
    elif len(table) < MAX_KEYS:
        table[key] = Warned(record, line, record, line)


def record_of_line(message: str) -> rec.GraphGrowing | rec.MemoryGrowing | rec.GraphBreak | rec.DynamoRecompile | None:
    """The record a runtime's warning line was written from (the line as PT_XLA_DEBUG holds it, its prefix cut).

    What a line does not print stays at the record's default: its time, and the step of a graph break or a
    recompilation; a byte count is as exact as its printed digits.

    Args:
      message: the line's message.

    Returns:
      The record, or None for a line that is none of these warnings.
    """
    if (found := parse_graph_growing(message)) is not None:
        return rec.GraphGrowing(step=found["step"], ops=found["ops"], site=found["site"])
    if (found := parse_memory_growing(message, parse_bytes)) is not None:
        return rec.MemoryGrowing(step=found["to_step"], from_step=found["from_step"], from_bytes=found["from_bytes"],
                                 to_bytes=found["to_bytes"], per_step_bytes=found["per_step_bytes"],
                                 holders=found["holders"], space=found["space"])
    if (found := parse_graph_break_message(message)) is not None:
        site, by, reason = found
        return rec.GraphBreak(by=by, reason=reason, site=site)
    if (found := parse_dynamo_recompile_message(message)) is not None:
        function, compiles, site, guard = found
        return rec.DynamoRecompile(function=function, guard=guard, compiles=compiles, site=site)
    return None
