"""The first line of an event log: recognising a header, and a clear error for a file that is not a log.

A reader decides from the first line alone (`sniff`, `check_first_line`, `read_header`), plain or gzip-compressed,
before reading any record.
"""

from __future__ import annotations

import json

from xladev.schema.opener import looks_binary, open_log
from xladev.schema.records import SCHEMA_NAME, SCHEMA_VERSION, Header, NotAnEventLog, RecordError


def header_of(line: bytes | str) -> Header | None:
    """The header when `line` is the first line of an event log, else None."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("type") != "header":
        return None
    if str(data.get("schema", "")).split("/", 1)[0] != SCHEMA_NAME:
        return None
    try:
        return Header.from_record(data)
    except RecordError:
        return None


def sniff(head: bytes) -> bool:
    """True when these first bytes of a file start an event log (cheap: no full parse unless likely)."""
    first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0]
    return first.startswith(b"{") and b'"header"' in first and header_of(first) is not None


def check_first_line(path: str, line: bytes) -> Header:
    """The header of a log whose first complete line is `line`.

    Raises:
      NotAnEventLog: naming the file and what its first line is instead.
    """
    text = line.decode("utf-8", "replace").strip()
    header = header_of(text)
    if header is not None:
        return header
    if looks_binary(line):  # its bytes would only garble the message
        raise NotAnEventLog(f"{path} is not an xladev event log: it holds binary data (neither text nor "
                            "gzip-compressed text)")
    shown = text[:60] + ("…" if len(text) > 60 else "")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        why = f"its first line is not a JSON object: {shown!r}"
    else:
        why = f"its first line is not an {SCHEMA_NAME} header (type={data.get('type')!r}, schema={data.get('schema')!r})"
    raise NotAnEventLog(f"{path} is not an xladev event log: {why}. Write one with XLADEV_EVENT_LOG=path python train.py")


def newer_version_note(header: Header) -> str | None:
    """What to tell a reader of a log written by a newer schema, or None."""
    if header.version > SCHEMA_VERSION:
        return (f"schema version {header.version} is newer than this reader's {SCHEMA_VERSION}; "
                "unknown records and fields are ignored")
    return None


def read_header(path: str, limit: int = 1 << 20) -> Header | None:
    """The header of an existing file, plain or gzip-compressed; None while its first line is
    incomplete (or the file is empty, or a compressed file is damaged before its first line ends).

    Raises:
      NotAnEventLog: the file has a first line (or more than `limit` bytes without one) and it is no header.
      OSError: the file cannot be read.
    """
    fh = open_log(path)
    try:
        head = fh.read(limit)
    finally:
        fh.close()
    newline = head.find(b"\n")
    if newline < 0:
        if len(head) >= limit or (head and not head.lstrip().startswith(b"{")):
            raise NotAnEventLog(f"{path} is not an xladev event log: it does not start with a JSON header line")
        return None
    return check_first_line(path, head[:newline])
