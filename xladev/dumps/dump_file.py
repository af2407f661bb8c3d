"""Records of a graph dump file, streamed line by line; truncated records become warnings."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Iterator

from xladev.errors import XladevError

_FRAME = re.compile(r"^\s*(?P<name>\S.*?) \((?P<file>.*):(?P<line>\d+)\)\s*$")
_STEP_FUNCTIONS = {"mark_step", "sync", "step"}


class DumpError(XladevError):
    """The dump cannot be used (unreadable, empty, or the asked-for graph is not in it)."""


@dataclasses.dataclass
class Record:
    """One `[ScheduleSyncTensorsGraph]` record.

    Attributes:
      index: 1-based position in the file.
      line: line number of the record header.
      frames: (function, file, line) of the trigger, innermost first.
      root_hashes: as printed.
      graph_text: the text between BEGIN_GRAPH and the Graph Hash line.
      graph_hash: the graph's hash.
      step: barriers before this record (0-based step the graph belongs to).
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
        return bool(self.frames) and self.frames[0][0] in _STEP_FUNCTIONS


def read_records(path: str, warnings: list[str]) -> list[Record]:
    """All complete records of a dump file.

    Args:
      path: the dump file.
      warnings: receives one message (with a line number) per truncated or malformed record.

    Raises:
      DumpError: the file cannot be read or holds no record.
    """
    if not os.path.exists(path) and os.path.exists(path + ".0"):
        path += ".0"  # XLA_SAVE_TENSORS_FILE=PATH writes PATH.<ordinal> (PATH.0 for one process)
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except OSError as exc:
        raise DumpError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        records = list(_parse(handle, warnings))
    if not records:
        raise DumpError(f"{path} holds no complete graph record ([ScheduleSyncTensorsGraph] ... ## END_GRAPH)")
    steps = 0
    for record in records:
        record.step = steps
        if record.is_barrier:
            steps += 1
    return records


def parse_records(lines, warnings: list[str]) -> Iterator[Record]:
    """The complete records of dump lines, in order (also for a file read on as it grows: `xladev.attach`).

    Args:
      lines: the lines, with or without their newlines.
      warnings: where a truncated or hash-less record is told (it is skipped).
    """
    return _parse(lines, warnings)


def _parse(lines, warnings: list[str]) -> Iterator[Record]:
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


def find(records: list[Record], spec: str) -> Record:
    """A record by 1-based number or by (a prefix of) its graph hash.

    Raises:
      DumpError: no record matches, or a hash prefix matches several graphs.
    """
    if spec.isdigit() and len(spec) < 8:
        number = int(spec)
        if not 1 <= number <= len(records):
            raise DumpError(f"record {number} does not exist: the dump has records 1..{len(records)}")
        return records[number - 1]
    matches = [r for r in records if r.graph_hash.startswith(spec.lower())]
    hashes = {r.graph_hash for r in matches}
    if not matches:
        known = ", ".join(sorted({r.graph_hash[:12] for r in records})[:8])
        raise DumpError(f"no graph with hash {spec!r} in the dump (it has: {known}{', ...' if len(records) > 8 else ''})")
    if len(hashes) > 1:
        raise DumpError(f"hash prefix {spec!r} matches {len(hashes)} graphs; give more digits")
    return matches[-1]
