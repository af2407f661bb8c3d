"""A graph dump file read whole (`xladev diff`): its records, each with its step, and one record found by number
or hash. The records are read by the format's reader (`xladev.schema.graph_dump`); truncated ones become warnings."""

from __future__ import annotations

import os

from xladev.errors import XladevError
from xladev.schema.graph_dump import Record, parse_records


class DumpError(XladevError):
    """The dump cannot be used (unreadable, empty, or the asked-for graph is not in it)."""


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
        records = list(parse_records(handle, warnings))
    if not records:
        raise DumpError(f"{path} holds no complete graph record ([ScheduleSyncTensorsGraph] ... ## END_GRAPH)")
    steps = 0
    for record in records:
        record.step = steps
        if record.is_barrier:
            steps += 1
    return records


def find(records: list[Record], spec: str) -> Record:
    """A record by 1-based number or by (a prefix of) its graph hash.

    Args:
      records: the file's records (`read_records`).
      spec: a record's number, or its graph hash or a prefix of it.

    Returns:
      The record; the last one of that graph when several ran it.

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
