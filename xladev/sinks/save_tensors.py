"""`XLA_SAVE_TENSORS_FILE`: one record per synced graph, in PyTorch/XLA's dump format (`xladev.schema.graph_dump`).

Each record is appended with a single write, so a killed process leaves whole records.
`XLA_SAVE_TENSORS_FMT` picks the graph's format: text (IR), dot, hlo or stablehlo; with `hlo`, an SPMD
run's record ends with each output's shape and sharding.
"""

from __future__ import annotations

from xladev._flags import config
from xladev.events import Execute
from xladev.schema.graph_dump import record_text
from xladev.schema.sites import shown_frames
from xladev.sinks._lifecycle import Sink
from xladev.sinks._output import OutputFile
from xladev.schema.ranks import ordinal_path


class DumpSink(Sink):
    """Writes a record for every executed graph."""

    kinds = (Execute,)
    wants_frames = True

    def __init__(self, path: str, fmt: str, value: str | None = None) -> None:
        """Opens the dump file; one that cannot be opened leaves the output off (`OutputFile`).

        Args:
          path: the file written.
          fmt: the graph's format (`XLA_SAVE_TENSORS_FMT`).
          value: XLA_SAVE_TENSORS_FILE as the user gave it, when `path` is its rank's file.
        """
        self.path = path
        self.fmt = fmt
        self._lowered_text: dict[str, str] = {}
        self.file = OutputFile("XLA_SAVE_TENSORS_FILE", path if value is None else value, path)

    def _graph_text(self, event: Execute) -> str:
        graph = event.graph
        if self.fmt == "text":
            return graph.ir_text()
        if self.fmt == "dot":
            return graph.dot_text()
        # HLO is the same for every run of a graph: lower once per hash.
        cached = self._lowered_text.get(event.graph_hash)
        if cached is None:
            cached = graph.hlo_text("hlo" if self.fmt == "hlo" else "stablehlo", debug_info=config.hlo_debug)
            self._lowered_text[event.graph_hash] = cached
        return cached if cached.endswith("\n") else cached + "\n"

    def start(self) -> "DumpSink":
        return self if self.file.off else Sink.start(self)

    def on_event(self, event: Execute) -> None:
        if event.graph is None or self.file.off:
            return
        shardings = event.graph.output_shardings() if self.fmt == "hlo" else None
        record = record_text(shown_frames(event.frames), event.graph.root_hashes(), self._graph_text(event),
                             event.graph_hash, shardings)
        if not self.file.write(record.encode()):
            self.stop()  # the failure was told once; no more graphs to format for a file that is off


_sink: DumpSink | None = None


def start_from_flags() -> DumpSink | None:
    global _sink
    if config.save_tensors_file and _sink is None:
        # PATH.<ordinal>, as PyTorch/XLA writes it (PATH.0 for one process); `xladev diff --file PATH` finds it.
        _sink = DumpSink(ordinal_path(config.save_tensors_file), config.save_tensors_fmt, config.save_tensors_file)
        _sink.start()
    return _sink
