"""`XLA_SAVE_TENSORS_FILE`: one record per synced graph, in PyTorch/XLA's dump format.

    [ScheduleSyncTensorsGraph]
    TensorsGraphInfo:
      mark_step (/path/xladev/runtime/api/training.py:23)
      train_loop (/path/train.py:48)

    Root Hashes: (3f2a..., 91bc...)

    ## BEGIN_GRAPH
    IR {
      ...
    }

    Graph Hash: c74c3b91b855b2b123f833b0d5f86943

    ## END_GRAPH

Each record is appended with a single write, so a killed process leaves whole records.
`XLA_SAVE_TENSORS_FMT` picks the graph's format: text (IR), dot, hlo or stablehlo. With `hlo`, an SPMD
run's record ends as PyTorch/XLA's does, with each output's shape and sharding:

    #OUTPUT_SHARDING_BEGIN

    f32[8,32] {devices=[1,4]0,1,2,3}

    #OUTPUT_SHARDING_END
"""

from __future__ import annotations

from xladev._flags import config
from xladev.events import Execute
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
        frames = "".join(f"  {f.name} ({f.file}:{f.line})\n" for f in shown_frames(event.frames))
        roots = ", ".join(event.graph.root_hashes())
        record = (f"[ScheduleSyncTensorsGraph]\nTensorsGraphInfo:\n{frames}\nRoot Hashes: ({roots})\n\n"
                  f"## BEGIN_GRAPH\n{self._graph_text(event)}\nGraph Hash: {event.graph_hash}\n\n## END_GRAPH\n\n")
        shardings = event.graph.output_shardings() if self.fmt == "hlo" else None
        if shardings is not None:
            lines = "".join(line + "\n" for line in shardings)
            record += f"\n#OUTPUT_SHARDING_BEGIN\n\n{lines}\n#OUTPUT_SHARDING_END\n\n"
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
