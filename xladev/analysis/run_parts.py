"""The parts of a run's state (`xladev.analysis.run_state.RunState`): one graph, the compiles of one trigger site,
a recompilation, and the device→host reads at one line. Plain data, filled by the state's folds."""

from __future__ import annotations

import dataclasses

from xladev.schema import memory as memory_sizes


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
        return self.changes[0] if self.changes else "graph changed"


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
        return memory_sizes.need_bytes({key: float(v) for key, v in self.memory.items()
                                        if key in memory_sizes.SIZES and isinstance(v, (int, float))})

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
