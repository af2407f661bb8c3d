"""What changed at a recompilation of a real torch_xla run, from PyTorch/XLA's own graph dumps.

With XLADEV_ATTACH_GRAPHS on, the adapter has PyTorch/XLA append each synced graph's IR text to a file
(`XLA_SAVE_TENSORS_FILE`, text format; torch_xla writes it as `PATH.<ordinal>`). Each record there carries the
same graph hash as the PT_XLA_DEBUG blocks, so a compile is matched to its IR exactly. When a site that compiled
before compiles a different graph, its IR is compared with the closest earlier graph of that site
(`xladev.graphdiff`, as for xladev's own runtime), and a `Recompile` event says what changed.

Off by default: PyTorch/XLA writes the IR text of every sync, cached ones too, which costs time per step in
proportion to the graph's size.
"""

from __future__ import annotations

import glob
import os

from xladev.dumps.ir_parser import parse_ir
from xladev.events import Frame, Recompile
from xladev.graphdiff import GraphSummary, closest, differences
from xladev.schema.graph_dump import parse_records
from xladev.schema.sites import site_of

# IR texts kept for graphs not compiled yet in this harvest (a dump comes before its compile's block is read).
_MAX_PENDING_TEXTS = 256
_END = b"## END_GRAPH\n"


class DumpedGraph:
    """A graph as PyTorch/XLA's dump shows it: its hash and IR text (`xladev.events.GraphInfo`'s text part)."""

    def __init__(self, graph_hash: str, text: str) -> None:
        self.hash = graph_hash
        self._text = text
        self._summary: GraphSummary | None = None

    def ir_text(self) -> str:
        return self._text

    def summary(self) -> GraphSummary:
        if self._summary is None:
            self._summary = parse_ir(self._text, self.hash)
        return self._summary

    @property
    def nodes(self) -> int:
        """IR nodes of the graph (0 for a record without node lines)."""
        try:
            return len(self.summary().nodes)
        except ValueError:
            return 0

    def dot_text(self) -> str:
        raise NotImplementedError("a torch_xla graph dump holds IR text only")

    def hlo_text(self, dialect: str = "hlo", debug_info: bool = False) -> str:
        raise NotImplementedError("a torch_xla graph dump holds IR text only")

    def root_hashes(self) -> list[str]:
        return []

    def collectives(self) -> list:
        return []

    def output_shardings(self) -> None:
        return None

    def recomputed_ops(self) -> int:
        return 0


class GraphDumps:
    """Reads on PyTorch/XLA's graph dump file, and keeps each site's compiled graphs to compare new ones with.

    Args:
      path: XLA_SAVE_TENSORS_FILE as the adapter set it (torch_xla appends `.<ordinal>`).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._offsets: dict[str, int] = {}
        self._rest: dict[str, bytes] = {}
        self._texts: dict[str, str] = {}  # graph hash -> IR text, for graphs whose compile is not seen yet
        self._compiled: set[str] = set()  # their syncs dump them again every step: not kept again
        self._sites: dict[tuple[str, str | None], list[GraphSummary]] = {}
        self.warnings: list[str] = []

    def read(self) -> None:
        """Takes the graph records appended since the last read (whole records only)."""
        for name in sorted(glob.glob(glob.escape(self.path) + ".*")):
            try:
                with open(name, "rb") as handle:
                    handle.seek(self._offsets.get(name, 0))
                    data = handle.read()
            except OSError:
                continue
            self._offsets[name] = self._offsets.get(name, 0) + len(data)
            data = self._rest.get(name, b"") + data
            cut = data.rfind(_END) + len(_END) if _END in data else 0
            self._rest[name] = data[cut:]
            lines = data[:cut].decode("utf-8", "replace").splitlines(keepends=True)
            for record in parse_records(lines, self.warnings):
                if record.graph_hash in self._compiled or record.graph_hash in self._texts:
                    continue
                if len(self._texts) >= _MAX_PENDING_TEXTS:  # never compiled (a failed compile): the oldest goes
                    del self._texts[next(iter(self._texts))]
                self._texts[record.graph_hash] = record.graph_text
        del self.warnings[:-10]

    def compiled(self, graph_hash: str, frames: tuple[Frame, ...], step: int, time_ns: int, compile_ns: int,
                 name: str | None) -> tuple[DumpedGraph | None, Recompile | None]:
        """A compiled graph's dump, and what changed when its site compiled another graph before.

        Returns:
          (the graph, or None when the dump has no record of it; the `Recompile` event, or None).
        """
        text = self._texts.pop(graph_hash, None)
        if text is None:
            return None, None
        self._compiled.add(graph_hash)
        graph = DumpedGraph(graph_hash, text)
        try:
            summary = graph.summary()
        except ValueError:  # a record without node lines: nothing to compare
            return graph, None
        summary.compile_ns = compile_ns
        site = site_of(frames)
        earlier = self._sites.setdefault((site, name), [])
        event = None
        if earlier:
            previous = closest(earlier, summary)
            event = Recompile(time_ns - 1, step, graph_hash, previous.hash, site,
                               tuple(differences(previous, summary)), len(earlier) + 1,
                               sum(g.compile_ns for g in earlier) + compile_ns)
        earlier.append(summary)
        return graph, event


def dump_path(log: str) -> str:
    """Where the adapter has PyTorch/XLA dump this process's graphs, beside its event log."""
    return f"{log}.graphs.{os.getpid()}.txt"
