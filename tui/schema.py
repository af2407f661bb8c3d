"""What the TUI needs to know of the event-log format (docs/event-log.md), without importing xladev.

The TUI never imports the runtime (nor `xladev` itself, whose import starts torch and jax), so the
schema name is repeated here; a test checks it against the writer's.
"""

from __future__ import annotations

import json

SCHEMA_NAME = "xladev.events"
SCHEMA_VERSION = 1


class NotAnEventLog(Exception):
    """The file is not an xladev event log (its first line is not an `xladev.events` header)."""


def parse_record(text: str) -> dict | None:
    """One JSON record, or None when the line is not a JSON object."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def is_header(record: dict | None) -> bool:
    return (isinstance(record, dict) and record.get("type") == "header"
            and str(record.get("schema", "")).split("/", 1)[0] == SCHEMA_NAME)


def check_first_line(path: str, line: bytes) -> dict:
    """The header of a log whose first complete line is `line`.

    Raises:
      NotAnEventLog: naming the file and what its first line is instead.
    """
    text = line.decode("utf-8", "replace").strip()
    record = parse_record(text)
    if is_header(record):
        return record
    shown = text[:60] + ("…" if len(text) > 60 else "")
    if record is None:
        why = f"its first line is not JSON: {shown!r}"
    else:
        why = f"its first line is not an {SCHEMA_NAME} header (type={record.get('type')!r}, schema={record.get('schema')!r})"
    raise NotAnEventLog(f"{path} is not an xladev event log: {why}. "
                        "Write one with XLADEV_EVENT_LOG=path python train.py")


def sniff_file(path: str, limit: int = 1 << 20) -> dict | None:
    """The header of an existing file, None while its first line is incomplete (or the file is empty).

    Raises:
      NotAnEventLog: the file has a first line (or more than `limit` bytes without one) and it is no header.
      OSError: the file cannot be read.
    """
    with open(path, "rb") as fh:
        head = fh.read(limit)
    newline = head.find(b"\n")
    if newline < 0:
        if len(head) >= limit or (head and not head.lstrip().startswith(b"{")):
            raise NotAnEventLog(f"{path} is not an xladev event log: it does not start with a JSON header line")
        return None
    return check_first_line(path, head[:newline])
