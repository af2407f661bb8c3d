"""The parts of a run's state (`xladev.analysis.run_state.RunState`): one graph, the compiles of one trigger site,
a recompilation, one compile as it was read, and the device→host reads at one line. Plain data, filled by the
state's folds."""

from __future__ import annotations

import dataclasses

from xladev.schema import memory as memory_sizes, records as rec
from xladev.schema.record_wording import change_headline
from xladev.schema.sites import split_site


@dataclasses.dataclass
class Recompilation:
    """A site that had compiled before compiled a different graph (a compile record's `recompile`).

    Attributes:
      step, site, graph_hash: where and which graph.
      previous: the graph of the site it was compared with.
      changes: what differs, most telling first.
      cause: the compile's cause, in words.
      graphs_at_site: graphs compiled at the site so far, this one included.
      compile_ns: this compile's time.
      compile_ns_at_site: the site's compile time in total, as the writer counted it.
    """

    step: int
    site: str
    graph_hash: str
    previous: str
    changes: tuple[str, ...]
    cause: str
    graphs_at_site: int
    compile_ns: int
    compile_ns_at_site: int

    def headline(self) -> str:
        return change_headline(self.changes)


@dataclasses.dataclass(slots=True)
class CompileSeen:
    """One compile, in the order the input holds them: its record (an event log's, or the one a PT_XLA_DEBUG
    Compilation Analysis block is lifted to) and where it was read.

    Attributes:
      record: the compile record.
      line: its input line (a block's first line).
      steps_before: the steps the input counted before it: its 0-based step.
      step_known: True when `steps_before` is the step the input names (an event log's, or a step named by
        xladev's recompilation cause), not a count of the step barriers a debug log happened to show.
      computation_hash: the ``Computation hash:`` PyTorch/XLA prints before a compile's memory analysis.
    """

    record: rec.Compile
    line: int
    steps_before: int
    step_known: bool = True
    computation_hash: str = ""

    @property
    def graph_hash(self) -> str:
        return self.record.hash

    @property
    def cause(self) -> str:
        return self.record.cause.get("text", "")

    @property
    def inputs(self) -> int | None:
        return self.record.inputs

    @property
    def outputs(self) -> int | None:
        return self.record.outputs

    @property
    def site(self) -> str:
        """The user's line, ``file:line`` ("" when the input names none)."""
        return split_site(self.record.site)[0]

    @property
    def function(self) -> str:
        return split_site(self.record.site)[1]

    @property
    def name(self) -> str:
        return self.record.name or ""

    @property
    def where(self) -> str:
        """The site, and the graph's name when it has one: a compiled region's or a torch.compile graph's two
        syncs at one line are two places, not one graph recompiled."""
        site = self.site or "?"
        return f"{site}, graph {self.name}" if self.name else site

    @property
    def sizes(self) -> dict[str, float]:
        """XLA's memory analysis in bytes, under the report's column names (`xladev.schema.memory.SIZES`)."""
        measured = memory_sizes.measured(self.record.memory)
        return {memory_sizes.SIZES[key].column: value for key, value in measured.items()}

    @property
    def changes(self) -> tuple[str, ...]:
        """What changed since the site's previous graph, for a recompilation (else empty)."""
        recompile = self.record.recompile
        if not recompile:
            return ()
        return tuple(str(change) for change in recompile.get("changes") or ()) or (change_headline(()),)


@dataclasses.dataclass
class SiteCompiles:
    """The compiles one trigger site caused."""

    first_step: int
    last_step: int
    compiles: int = 0
    compile_ns: int = 0
    recompiles: int = 0
    last_cause: str = ""
    graphs: set = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class GraphState:
    """One graph: its shape, compiles, executions and the steps it ran in.

    Attributes:
      order: the graph's place among the graphs seen (first seen, first: its text, compile or execution).
      first_step, first_line: the step and input line of its first compile or execution record (0 before one).
      compile_ns: its compile time in total; `last_compile_ns` the latest compile's (None until compiled).
      memory: XLA's memory analysis of its latest compile (`xladev.schema.memory.SIZES` keys).
      shardings: an SPMD graph's inputs' and outputs' layout, as its compile record says.
      ran: the steps it ran in, as [first, last] ranges (the newest 64).
      recompile: the recompilation that made it, if any.
      failure: how it failed, in words ("" when it did not).
    """

    graph_hash: str
    order: int
    first_step: int = 0
    first_line: int = 0
    site: str = ""
    name: str = ""
    cause: str = ""
    nodes: int = 0
    inputs: int = 0
    outputs: int = 0
    compiles: int = 0
    compile_ns: int = 0
    last_compile_ns: int | None = None
    compiled_step: int | None = None
    memory: dict = dataclasses.field(default_factory=dict)
    shardings: dict | None = None
    executions: int = 0
    execute_ns: int = 0
    ran: list = dataclasses.field(default_factory=list)
    recompile: Recompilation | None = None
    failure: str = ""

    @property
    def memory_bytes(self) -> float | None:
        """What it holds on the device while it runs (`xladev.schema.memory.need_bytes` of its latest compile's
        analysis); None when there is none."""
        return memory_sizes.need_bytes(memory_sizes.measured(self.memory))

    def ran_at(self, step: int) -> None:
        ranges = self.ran
        if ranges and ranges[-1][0] <= step <= ranges[-1][1] + 1:
            ranges[-1][1] = max(ranges[-1][1], step)
            return
        ranges.append([step, step])
        if len(ranges) > 64:
            del ranges[0]


@dataclasses.dataclass
class TransferSite:
    """The device→host reads of one kind (`.item()`, `print`, `aten::op` for a fallback's operands) at one line.

    `site` and `kind` are "" when the record does not say.
    """

    kind: str
    site: str
    count: int = 0
    nbytes: int = 0
    last_step: int = 0
    first_line: int = 0
