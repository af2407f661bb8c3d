"""The fast path for XLA_METRICS_FILE: whole ``[MetricsData; step=N]`` records read with two regexes.

A clean record (every line an exact report line, no log prefix, no debug output) needs only a
few numbers per step, so instead of a Python loop over its lines, one regular expression finds
every block's name and first values at C speed. Anything unusual in a record (an unknown line, a
malformed block, a repeated name, a value that is not a number) makes `extract_record` return
None, and the caller reads that record with the line reader instead, so both paths always give
the same result.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from xladev.report.names import SERIES_ACCUMULATORS, SERIES_COUNTERS, SERIES_SAMPLES
from xladev.schema.metrics_text import FIELD_NAMES, STEP_MARKER

MARKER = STEP_MARKER.encode()
_NEWLINE_MARKER = b"\n" + MARKER
CHUNK_BYTES = 1024 * 1024
MAX_CARRY_BYTES = 64 * 1024 * 1024

_METRIC_RE = re.compile(
    rb"\nMetric: ([A-Za-z_][^\n\r ]*)\r?\n  TotalSamples: ([^\n\r]*)\r?"
    rb"(?:\n  (?:Accumulator|Counter): ([^\n\r]*)\r?)?(?=\n|\Z)")
_COUNTER_RE = re.compile(rb"\nCounter: ([A-Za-z_][^\n\r ]*)\r?\n  Value: ([^\n\r]*)\r?(?=\n|\Z)")
_ATEN_COUNTER_RE = re.compile(rb"\nCounter: ([^\n\r ]*aten::[^\n\r ]*)\r?\n  Value: ([^\n\r]*)\r?(?=\n|\Z)")
# A line that is not an exact report line; headers count only when their first field follows, so
# that _METRIC_RE and _COUNTER_RE are sure to find every block of a record without it.
_UNCLEAN_RE = re.compile(
    rb"\n(?!Metric: [A-Za-z_][^\n\r ]*\r?\n  TotalSamples: |Counter: [A-Za-z_][^\n\r ]*\r?\n  Value: "
    rb"|  (?:" + "|".join(FIELD_NAMES).encode() + rb"):|\r?\n|\Z)")


class FastRecord:
    """The numbers of one record that the per-step series needs (names and values as bytes).

    Attributes:
      step: N of the record.
      counters: tracked and ``aten::`` counters.
      samples: TotalSamples of tracked metrics.
      accumulators: raw Accumulator text of tracked metrics.
      lines: lines in the record, marker line included.
    """

    __slots__ = ("step", "counters", "samples", "accumulators", "lines")

    def __init__(self, step: int, counters: dict, samples: dict, accumulators: dict, lines: int):
        self.step, self.counters, self.samples, self.accumulators, self.lines = (
            step, counters, samples, accumulators, lines)


def extract_record(piece: bytes) -> FastRecord | None:
    """Reads one ``[MetricsData; step=N]`` record if it is clean.

    Args:
      piece: the record from its marker line to the end of its last line (newline included).

    Returns:
      The numbers, or None when the record must go through the line reader.
    """
    newline = piece.find(b"\n")
    if newline < 0 or not piece.startswith(MARKER):
        return None
    head = piece[len(MARKER):newline].rstrip(b"\r")
    if not head.endswith(b"]"):
        return None
    try:
        step = int(head[:-1])
    except ValueError:
        return None
    if _UNCLEAN_RE.search(piece, newline) is not None:
        return None
    if b"\r" in piece and piece.count(b"\r") != piece.count(b"\r\n"):
        return None  # a carriage return inside a line
    metric_blocks = _METRIC_RE.findall(piece, newline)
    counter_blocks = _COUNTER_RE.findall(piece, newline)
    all_counters = dict(counter_blocks)
    all_metrics = dict(zip(map(_first, metric_blocks), metric_blocks))
    if len(all_counters) != len(counter_blocks) or len(all_metrics) != len(metric_blocks):
        return None  # a repeated name: the line reader splits the reports
    if not metric_blocks and not counter_blocks:
        return None  # a marker and nothing after it (a paste cut there): not a report, and none to commit
    counters: dict[bytes, int] = {}
    samples: dict[bytes, int] = {}
    accumulators: dict[bytes, bytes] = {}
    try:
        for name in SERIES_COUNTERS:
            value = all_counters.get(name)
            if value is not None:
                counters[name] = int(value)
        if b"aten::" in piece:
            for name, value in _ATEN_COUNTER_RE.findall(piece, newline):
                counters[name] = int(value)
        for name in SERIES_SAMPLES:
            block = all_metrics.get(name)
            if block is not None:
                samples[name] = int(block[1])
    except ValueError:
        return None
    for name in SERIES_ACCUMULATORS:
        block = all_metrics.get(name)
        if block is not None:
            if not block[2]:
                return None
            accumulators[name] = block[2]
    lines = piece.count(b"\n") + (0 if piece.endswith(b"\n") else 1)
    return FastRecord(step, counters, samples, accumulators, lines)


def _first(block: tuple) -> bytes:
    return block[0]


def split_region(region: bytes) -> tuple[bytes, list[bytes]]:
    """Splits text at lines that start a ``[MetricsData; step=N]`` record.

    Args:
      region: whole lines of text.

    Returns:
      ``(head, records)``: the text before the first record, and each record from its marker
      line up to the next one.
    """
    if region.startswith(MARKER):
        first = 0
    else:
        first = region.find(_NEWLINE_MARKER) + 1
        if first == 0:
            return region, []
    records = []
    start = first
    while True:
        following = region.find(_NEWLINE_MARKER, start)
        if following < 0:
            records.append(region[start:])
            return region[:first], records
        records.append(region[start:following + 1])
        start = following + 1


def iter_regions(stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[bytes, bool]]:
    """Reads a stream in chunks cut at whole lines, preferably just before a record marker.

    Args:
      stream: a binary stream with a ``read(n)`` method.
      chunk_bytes: bytes read at a time.

    Yields:
      ``(region, complete)``: whole lines of text, and True when the region ends where a record
      starts or at the end of the input (so its last record is complete).
    """
    carry = b""
    while True:
        data = stream.read(chunk_bytes)
        buffer = carry + data if carry else data
        if not data:
            if buffer:
                yield buffer, True
            return
        cut = buffer.rfind(_NEWLINE_MARKER) + 1
        complete = cut > 0
        if not complete:
            cut = buffer.rfind(b"\n") + 1
            if cut == 0 and len(buffer) > MAX_CARRY_BYTES:
                cut = len(buffer)  # a giant line: hand it over in pieces to keep memory bounded
        if cut:
            yield buffer[:cut], complete
            carry = buffer[cut:]
        else:
            carry = buffer
