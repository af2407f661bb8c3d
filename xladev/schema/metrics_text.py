"""PyTorch/XLA's metrics report text (`met.metrics_report()`, XLA_METRICS_FILE): written and read here.

    [MetricsData; step=3]
    Metric: CompileTime
      TotalSamples: 2
      Accumulator: 001ms234.500us
      ValueRate: 002ms001.000us / second
      Rate: 1.5 / second
      Percentiles: 1%=000.500us; 5%=000.500us; ...; 99%=001ms234.000us
    Counter: MarkStep
      Value: 4

Metric blocks come first, sorted by name, then the counters that are not zero. Values print in their kind
(`xladev.schema.units`). XLA_METRICS_FILE puts a ``[MetricsData; step=N]`` line before each step's report. A
report ends at such a line, where a metric or counter name repeats, or at the end of the input.

The writer (`report_text`) is the metrics registry's (`xladev.sinks.metrics_registry`); the reader
(`ReportLineReader`, `parse_metric`, `parse_counter`) is the report's (`xladev.report.text_reader`), which reads
the fields of a report's blocks as raw bytes and parses only the last complete report in full.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Callable, Collection, Iterable
from typing import NamedTuple

from xladev.schema import units

STEP_MARKER = "[MetricsData; step="
# The percentiles a report prints unless XLA_METRICS_PERCENTILES says others, as fractions.
DEFAULT_PERCENTILES = (0.01, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.99)

# A field line's name -> the field it fills (``Counter`` is the Accumulator of reports from before 2021).
FIELD_NAMES = {"TotalSamples": "TotalSamples", "Accumulator": "Accumulator", "Counter": "Accumulator",
               "Value": "Value", "ValueRate": "ValueRate", "Rate": "Rate", "Percentiles": "Percentiles",
               "Mean": "Mean", "StdDev": "StdDev"}
# The fields a Metric block may have (a Counter block has only Value).
METRIC_FIELDS = frozenset({"TotalSamples", "Accumulator", "ValueRate", "Rate", "Percentiles", "Mean", "StdDev"})

# A header or field line with anything before it (a log prefix, a report glued to the end of a printed line).
HEADER_RE = re.compile(r"(Metric|Counter): ([A-Za-z_][^\s]*)\s*$")
FIELD_RE = re.compile(r"(?:^|\s)(TotalSamples|Accumulator|Counter|ValueRate|Value|Rate|Percentiles|Mean|StdDev):"
                      r"(?: (.*?))?\s*$")
MARKER_RE = re.compile(re.escape(STEP_MARKER) + r"(-?\d+)\]")

_FIELD, _METRIC, _COUNTER, _MARKER, _BLANK = range(5)

# The exact lines, as the writer prints them: first four bytes of a line -> candidates (code, prefix, prefix
# length, field key). An empty Percentiles line has no space after its colon.
_HEADS: dict[bytes, tuple[tuple[int, bytes, int, str], ...]] = {}
for _code, _prefix, _key in (
    (_METRIC, b"Metric: ", ""), (_COUNTER, b"Counter: ", ""), (_MARKER, STEP_MARKER.encode(), ""),
    (_FIELD, b"  TotalSamples: ", "TotalSamples"), (_FIELD, b"  Accumulator: ", "Accumulator"),
    (_FIELD, b"  Counter: ", "Accumulator"), (_FIELD, b"  Value: ", "Value"),
    (_FIELD, b"  ValueRate: ", "ValueRate"), (_FIELD, b"  Rate: ", "Rate"),
    (_FIELD, b"  Percentiles:", "Percentiles"), (_FIELD, b"  Mean: ", "Mean"), (_FIELD, b"  StdDev: ", "StdDev"),
):
    _HEADS[_prefix[:4]] = _HEADS.get(_prefix[:4], ()) + ((_code, _prefix, len(_prefix), _key),)
for _blank in (b"\n", b"\r\n", b""):
    _HEADS[_blank] = ((_BLANK, b"", 0, ""),)


# ---------------------------------------------------------------- writing


@dataclasses.dataclass
class Metric:
    """A metric's values, as its block is printed from them.

    Attributes:
      kind: `units.TIME`, `units.BYTES` or `units.VALUE`.
      total_samples: samples over the metric's life.
      accumulator: their sum.
      samples: the last samples kept, ``(timestamp_ns, value)``, oldest first: ValueRate, Rate and the
        Percentiles are computed from them.
    """

    kind: str
    total_samples: int = 0
    accumulator: float = 0.0
    samples: collections.deque = dataclasses.field(default_factory=collections.deque)


def metric_block(name: str, metric: Metric, percentiles) -> str:
    """One ``Metric:`` block of the report.

    Args:
      name: the metric's name.
      metric: its values.
      percentiles: the fractions printed (``0.5`` prints as ``50%``): each the kept sample at that rank.

    Returns:
      The block's lines; ValueRate and Rate only when the kept samples span some time, Percentiles only when
      there are samples.
    """
    kind = metric.kind
    lines = [f"Metric: {name}", f"  TotalSamples: {metric.total_samples}",
             f"  Accumulator: {units.format_kind(kind, metric.accumulator)}"]
    samples = list(metric.samples)
    if len(samples) > 1:
        span_s = (samples[-1][0] - samples[0][0]) / 1e9
        if span_s > 0:
            value_sum = math.fsum(v for _, v in samples)
            lines.append(f"  ValueRate: {units.format_kind(kind, value_sum / span_s)} / second")
            lines.append(f"  Rate: {len(samples) / span_s:.6g} / second")
    if samples:
        parts = [f"{label}={units.format_kind(kind, value)}"
                 for label, value in sample_percentiles([v for _, v in samples], percentiles)]
        lines.append("  Percentiles: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def sample_percentiles(samples, percentiles) -> list[tuple[str, float]]:
    """PyTorch/XLA's percentiles of a metric's kept samples: each the sample at that rank (no interpolation).

    Args:
      samples: the kept sample values, in any order.
      percentiles: the fractions wanted (``0.5`` is labelled ``50%``).

    Returns:
      ``(label, value)`` pairs in the order of `percentiles`; empty without samples.
    """
    ordered = sorted(samples)
    n = len(ordered)
    if not n:
        return []
    return [(f"{p * 100:g}%", ordered[min(int(math.floor(p * n)), n - 1)]) for p in percentiles]


def report_text(counters: dict, metrics: dict, percentiles, metric_names=None, counter_names=None) -> str:
    """The metrics report: metric blocks (sorted), then non-zero counter blocks (sorted).

    Args:
      counters: counter name -> value.
      metrics: metric name -> `Metric`.
      percentiles: the fractions printed (XLA_METRICS_PERCENTILES).
      metric_names: the metrics printed; all when None.
      counter_names: the counters printed; all when None.

    Returns:
      The report's text.
    """
    out = []
    for name in sorted(metrics):
        if metric_names is None or name in metric_names:
            out.append(metric_block(name, metrics[name], percentiles))
    for name in sorted(counters):
        value = counters[name]
        if value and (counter_names is None or name in counter_names):
            out.append(f"Counter: {name}\n  Value: {value}\n")
    return "".join(out)


def step_record(step: int, report: str) -> str:
    """One XLA_METRICS_FILE record: the ``[MetricsData; step=N]`` line, then the step's report."""
    return f"{STEP_MARKER}{step}]\n{report}"


# ---------------------------------------------------------------- reading lines


def is_report_line(text: str) -> bool:
    """True for a metric or counter header, or a field line, with or without anything before it."""
    return bool(FIELD_RE.search(text) or HEADER_RE.search(text))


class RawReport(NamedTuple):
    """One report's blocks as read, before their values are parsed.

    Attributes:
      metrics: metric name (bytes) -> ``{"_line": header line, field: (line, raw bytes after the field's name)}``.
      counters: counter name (bytes) -> the same.
      step: N of the ``[MetricsData; step=N]`` line before it, else None.
      line: the line where it starts.
    """

    metrics: dict[bytes, dict]
    counters: dict[bytes, dict]
    step: int | None
    line: int


class ReportLineReader:
    """Reads the lines of metrics reports into `RawReport`s (`reports`), the values left as raw bytes.

    Lines are dispatched on their first four bytes, so an exact report line costs one dict lookup and a
    ``startswith``; anything else (log prefixes, a report glued to the end of a printed line, other output)
    takes a slower path with regular expressions. A subclass may keep fewer reports (`_close_snapshot`), and
    read other formats' lines first (`_foreign_line`).

    Usage: ``reader.read_lines(lines); reader.finish(); reader.reports``.
    """

    def __init__(self) -> None:
        self.reports: list[RawReport] = []
        self.warnings: list[tuple[int, str]] = []
        self._lineno = 0
        self._block: dict | None = None
        self._block_name = b""
        self._metrics: dict[bytes, dict] = {}
        self._counters: dict[bytes, dict] = {}
        self._step: int | None = None
        self._start_line = 0
        # A line that is not the report's came since the block opened: a field line after it must be exact.
        self._detached = False

    def read_lines(self, lines: Iterable[bytes]) -> bytes:
        """Reads lines (bytes, newline included or not) in order.

        Args:
          lines: an iterable of lines, e.g. a file opened in binary mode.

        Returns:
          The last line read (``b"\\n"`` when there was none).
        """
        heads_get = _HEADS.get
        lineno = self._lineno
        block = self._block
        metrics, counters = self._metrics, self._counters
        line = b"\n"
        for line in lines:
            lineno += 1
            specs = heads_get(line[:4])
            if specs is not None:
                for code, prefix, plen, key in specs:
                    if line.startswith(prefix):
                        break
                else:
                    code = -1
                if code == _FIELD:
                    if block is not None and key not in block:
                        block[key] = (lineno, line[plen:])
                        continue
                elif code == _BLANK:
                    continue
                elif code == _METRIC or code == _COUNTER:
                    name = line[plen:].rstrip()
                    if name[:1].isalpha() and b" " not in name:
                        table = metrics if code == _METRIC else counters
                        if name in table:
                            self._lineno = lineno
                            self._close_snapshot(lineno)
                            metrics, counters = self._metrics, self._counters
                            table = metrics if code == _METRIC else counters
                        if not metrics and not counters and self._start_line == 0:
                            self._start_line = lineno
                        block = table[name] = {"_line": lineno}
                        self._block_name = name
                        self._detached = False
                        continue
            self._lineno = lineno
            self._block = block
            self._slow_line(lineno, line)
            block, metrics, counters = self._block, self._metrics, self._counters
        self._lineno = lineno
        self._block = block
        return line

    def finish(self) -> None:
        """Ends the input: closes its last report."""
        self._close_snapshot(self._lineno)

    def _close_snapshot(self, lineno: int) -> None:
        """A report ends before `lineno`: kept in `reports`."""
        taken = self._take_report(lineno)
        if taken is not None:
            self.reports.append(taken)

    def _take_report(self, lineno: int) -> RawReport | None:
        """The report read so far, the reader emptied for the next one; None when it has no block."""
        metrics, counters = self._metrics, self._counters
        self._metrics, self._counters, self._block = {}, {}, None
        step, self._step = self._step, None
        start, self._start_line = self._start_line, 0
        if not metrics and not counters:
            return None
        return RawReport(metrics, counters, step, start or lineno)

    def _warn(self, lineno: int, message: str) -> None:
        self.warnings.append((lineno, message))

    def _foreign_line(self, lineno: int, text: str) -> bool:
        """True when a line not in the exact form is another format's (read by the subclass): none here."""
        return False

    def _marker_read(self) -> None:
        """A ``[MetricsData; step=N]`` line was read (a subclass counts them)."""

    def _other_line(self) -> None:
        """A line that is not a report's was read (a subclass counts them)."""

    def _slow_line(self, lineno: int, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not text.strip():
            return
        if self._foreign_line(lineno, text):
            return
        if "MetricsData" in text and (match := MARKER_RE.search(text)) is not None:
            self._close_snapshot(lineno)
            self._step = int(match.group(1))
            self._start_line = lineno
            self._marker_read()
            return
        if "Metric: " in text or "Counter: " in text:
            match = HEADER_RE.search(text)
            if match is not None:
                self._open_block(lineno, match.group(1) == "Metric", match.group(2).encode())
                return
        match = FIELD_RE.search(text) if ":" in text else None
        if match is not None:
            self._store_field(lineno, FIELD_NAMES[match.group(1)], match.group(2) or "", exact=raw.startswith(b"  "))
            return
        self._other_line()
        self._detached = True

    def _open_block(self, lineno: int, is_metric: bool, name: bytes) -> None:
        table = self._metrics if is_metric else self._counters
        if name in table:
            self._close_snapshot(lineno)
            table = self._metrics if is_metric else self._counters
        if not self._metrics and not self._counters and self._start_line == 0:
            self._start_line = lineno
        self._block = table[name] = {"_line": lineno}
        self._block_name = name
        self._detached = False

    def _store_field(self, lineno: int, key: str, value: str, exact: bool) -> None:
        block = self._block
        if block is None or (self._detached and not exact):
            if exact:
                self._warn(lineno, f"{key} line outside a metric or counter block")
            else:
                self._other_line()
            return
        if key in block:
            self._warn(lineno, f"second {key} line in block {self._block_name.decode(errors='replace')!r} "
                               f"(line {block['_line']}); ignored")
            return
        block[key] = (lineno, value.encode())


# ---------------------------------------------------------------- reading values


@dataclasses.dataclass
class MetricBlock:
    """One ``Metric:`` block of a metrics report, values in base units.

    Attributes:
      name: the metric name.
      kind: ``time`` (nanoseconds), ``bytes`` or ``value``.
      total_samples: TotalSamples.
      accumulator: Accumulator (``Counter:`` in reports from before 2021).
      value_rate: ValueRate per second, when printed.
      rate: Rate (samples per second), when printed.
      mean: Mean (XRT-era reports only).
      stddev: StdDev (XRT-era reports only).
      percentiles: ``(label, value)`` pairs in printed order, e.g. ``("99%", 2.1e10)``.
      line: line number of the ``Metric:`` header.
    """

    name: str
    kind: str
    total_samples: int | None = None
    accumulator: float | None = None
    value_rate: float | None = None
    rate: float | None = None
    mean: float | None = None
    stddev: float | None = None
    percentiles: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    line: int = 0

    def largest_percentile(self) -> float | None:
        """The largest printed percentile value (a lower bound of the largest sample)."""
        values = [value for _, value in self.percentiles if value == value]
        return max(values) if values else None

    def printed(self) -> dict:
        """Its printed fields (all but the name and line) as a `metrics_report` record holds them: JSON values."""
        kept = (f.name for f in dataclasses.fields(self) if f.name not in ("name", "line", "percentiles"))
        return {**{name: getattr(self, name) for name in kept}, "percentiles": [list(p) for p in self.percentiles]}

    @classmethod
    def from_printed(cls, name: str, fields: dict, line: int = 0) -> "MetricBlock":
        """The block of `printed()` fields, as read back from a record."""
        block = cls(name=name, line=line, **{key: value for key, value in fields.items() if key != "percentiles"})
        block.percentiles = [(str(label), float(value)) for label, value in fields.get("percentiles") or ()]
        return block

    def median(self) -> float | None:
        """The 50% percentile when printed."""
        for label, value in self.percentiles:
            if label == "50%":
                return value
        return None


def parse_metric(name: str, fields: dict, warn: Callable[[int, str], None], told: Collection[str] = ()) -> MetricBlock:
    """Parses one ``Metric:`` block of raw field lines into values in base units.

    Args:
      name: the metric's name.
      fields: ``{"_line": header line, field: (line, raw bytes)}`` as `ReportLineReader` stores them.
      warn: called with (line, message) for each malformed or missing field.
      told: fields (``TotalSamples``, ``Accumulator``) whose unreadable value the caller has warned of already.

    Returns:
      The block; values that did not parse stay None.
    """
    header_line = fields["_line"]
    texts = {key: (entry[0], entry[1].decode("utf-8", "replace").strip())
             for key, entry in fields.items() if key != "_line"}
    for key in sorted(set(texts) - METRIC_FIELDS):
        warn(texts[key][0], f"metric {name}: unexpected {key} line")
    missing = [key for key in ("TotalSamples", "Accumulator") if key not in texts]
    if missing:
        warn(header_line, f"metric {name} has no {' or '.join(missing)} line")
    kind = units.detect_kind(texts["Accumulator"][1]) if "Accumulator" in texts else _kind_from_percentiles(texts)
    block = MetricBlock(name=name, kind=kind, line=header_line)
    if "TotalSamples" in texts:
        line, text = texts["TotalSamples"]
        try:
            block.total_samples = int(text)
        except ValueError:
            if "TotalSamples" not in told:
                warn(line, f"metric {name}: TotalSamples {text!r} is not an integer")
    for key, attribute, parse in (("Accumulator", "accumulator", units.parse_kind),
                                  ("ValueRate", "value_rate", units.parse_rate),
                                  ("Mean", "mean", units.parse_kind), ("StdDev", "stddev", units.parse_kind)):
        if key in texts:
            line, text = texts[key]
            try:
                setattr(block, attribute, parse(text, kind)[1])
            except units.UnitParseError as error:
                if key not in told:
                    warn(line, f"metric {name}: {key}: {error}")
    if "Rate" in texts:
        line, text = texts["Rate"]
        try:
            block.rate = units.parse_rate(text, units.VALUE)[1]
        except units.UnitParseError as error:
            warn(line, f"metric {name}: Rate: {error}")
    if "Percentiles" in texts:
        line, text = texts["Percentiles"]
        block.percentiles = _parse_percentiles(name, text, kind, line, warn)
    return block


def _parse_percentiles(name: str, text: str, kind: str, line: int, warn) -> list[tuple[str, float]]:
    percentiles = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        label, sep, value = part.partition("=")
        try:
            if not sep or not label.endswith("%"):
                raise units.UnitParseError(f"not a percentile: {part!r}")
            float(label[:-1])
            percentiles.append((label.strip(), units.parse_kind(value, kind)[1]))
        except (units.UnitParseError, ValueError) as error:
            warn(line, f"metric {name}: Percentiles: {error}")
    return percentiles


def _kind_from_percentiles(texts: dict) -> str:
    if "Percentiles" in texts:
        first = texts["Percentiles"][1].split(";")[0].partition("=")[2]
        if first.strip():
            return units.detect_kind(first)
    return units.VALUE


def parse_counter(name: str, fields: dict, warn: Callable[[int, str], None]) -> int | None:
    """Parses one ``Counter:`` block's Value.

    Args:
      name: the counter's name.
      fields: ``{"_line": header line, "Value": (line, raw bytes)}`` as `ReportLineReader` stores them.
      warn: called with (line, message) for a block without its Value line, or with lines a counter has not.

    Returns:
      The value; None without a Value line, or with one that is not an integer (not warned of here: the
      caller warns where it reads the value first).
    """
    extra = sorted(set(fields) - {"_line", "Value"})
    if extra:
        warn(fields["_line"], f"counter {name}: unexpected {', '.join(extra)} line(s)")
    entry = fields.get("Value")
    if entry is None:
        warn(fields["_line"], f"counter {name} has no Value line")
        return None
    try:
        return int(entry[1])
    except ValueError:
        return None
