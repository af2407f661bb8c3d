"""PyTorch/XLA's graph dump (`XLA_SAVE_TENSORS_FILE`): one record per synced graph, written and read here.

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

The graph is in the format `XLA_SAVE_TENSORS_FMT` picks: text (IR), dot, hlo or stablehlo. With `hlo`, an SPMD run's
record ends as PyTorch/XLA's does, with each output's shape and sharding (which no reader reads back):

    #OUTPUT_SHARDING_BEGIN

    f32[8,32] {devices=[1,4]0,1,2,3}

    #OUTPUT_SHARDING_END

The writer (`record_text`) is the dump sink's (`xladev.sinks.save_tensors`); the reader (`parse_records`) is
`xladev diff`'s and the torch_xla adapter's (`xladev.dumps.dump_file` reads a whole file with it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator

_FRAME = re.compile(r"^\s*(?P<name>\S.*?) \((?P<file>.*):(?P<line>\d+)\)\s*$")
_STEP_FUNCTIONS = {"mark_step", "sync", "step"}


# ---------------------------------------------------------------- writing


def record_text(frames, root_hashes: Iterable[str], graph_text: str, graph_hash: str,
                output_shardings: Iterable[str] | None = None) -> str:
    """One record of the dump.

    Args:
      frames: the frames that triggered the sync, innermost first, as shown: anything with `name`, `file` and
        `line` (`xladev.schema.sites`).
      root_hashes: the hashes of the graph's roots.
      graph_text: the graph in the dump's format.
      graph_hash: the graph's hash.
      output_shardings: each output's shape and sharding, for an SPMD graph dumped as HLO; None for none.

    Returns:
      The record's text, ending with a blank line.
    """
    shown = "".join(f"  {frame.name} ({frame.file}:{frame.line})\n" for frame in frames)
    record = (f"[ScheduleSyncTensorsGraph]\nTensorsGraphInfo:\n{shown}\nRoot Hashes: ({', '.join(root_hashes)})\n\n"
              f"## BEGIN_GRAPH\n{graph_text}\nGraph Hash: {graph_hash}\n\n## END_GRAPH\n\n")
    if output_shardings is not None:
        lines = "".join(line + "\n" for line in output_shardings)
        record += f"\n#OUTPUT_SHARDING_BEGIN\n\n{lines}\n#OUTPUT_SHARDING_END\n\n"
    return record


# ---------------------------------------------------------------- reading


@dataclasses.dataclass
class Record:
    """One `[ScheduleSyncTensorsGraph]` record.

    Attributes:
      index: 1-based position in the file.
      line: line number of the record header.
      frames: (function, file, line) of the trigger, innermost first.
      root_hashes: as printed.
      graph_text: the text between BEGIN_GRAPH and the Graph Hash line, without the blank lines around it, ending
        with a newline.
      graph_hash: the graph's hash.
      step: barriers before this record (0-based step the graph belongs to), as the file's reader counts them.
    """

    index: int
    line: int
    frames: list[tuple[str, str, int]]
    root_hashes: list[str]
    graph_text: str
    graph_hash: str
    step: int = 0

    @property
    def site(self) -> str:
        """`file:line (function)` of the first frame outside xladev/torch_xla (the user's line)."""
        for name, file, line in self.frames:
            if not any(part in file for part in ("/xladev/", "/torch_xla/", "site-packages", "/torch/")):
                return f"{file}:{line} ({name})"
        if self.frames:
            name, file, line = self.frames[-1]
            return f"{file}:{line} ({name})"
        return "<unknown site>"

    @property
    def is_barrier(self) -> bool:
        """True when a step barrier synced the graph (its innermost frame is `mark_step`, `sync` or `step`)."""
        return bool(self.frames) and self.frames[0][0] in _STEP_FUNCTIONS


def parse_records(lines: Iterable[str], warnings: list[str]) -> Iterator[Record]:
    """The complete records of dump lines, in order (also for a file read on as it grows: `xladev.attach`).

    Args:
      lines: the lines, with or without their newlines.
      warnings: where a truncated or hash-less record is told (it is skipped).

    Yields:
      Each complete record, numbered from 1.
    """
    state = None
    current: dict = {}
    count = 0
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if line.startswith("[ScheduleSyncTensorsGraph]"):
            if state not in (None, "done"):
                warnings.append(f"line {current['line']}: record is truncated (no ## END_GRAPH); skipped")
            current = {"line": number, "frames": [], "roots": [], "graph": [], "hash": None}
            state = "header"
            continue
        if state is None or state == "done":
            continue
        if state == "header":
            if line.startswith("TensorsGraphInfo:"):
                state = "frames"
            continue
        if state == "frames":
            match = _FRAME.match(line)
            if match:
                current["frames"].append((match["name"], match["file"], int(match["line"])))
            elif line.startswith("Root Hashes:"):
                inner = line.split(":", 1)[1].strip().strip("()")
                current["roots"] = [h.strip() for h in inner.split(",") if h.strip()]
            elif line.startswith("## BEGIN_GRAPH"):
                state = "graph"
            continue
        if state == "graph":
            if line.startswith("Graph Hash:"):
                current["hash"] = line.split(":", 1)[1].strip()
            elif line.startswith("## END_GRAPH"):
                if not current["hash"]:
                    warnings.append(f"line {current['line']}: record has no Graph Hash line; skipped")
                else:
                    count += 1
                    yield Record(count, current["line"], current["frames"], current["roots"],
                                 "\n".join(current["graph"]).strip("\n") + "\n", current["hash"])
                state = "done"
            else:
                current["graph"].append(line)
    if state not in (None, "done"):
        warnings.append(f"line {current['line']}: last record is truncated (no ## END_GRAPH); skipped")
