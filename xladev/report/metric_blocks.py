"""One ``Metric:`` block of a metrics report, from its raw field lines to values in base units.

The line reader (`xladev.report.text_reader`) keeps each block's fields as raw bytes and parses
only the last complete report in full, here.
"""

from __future__ import annotations

from collections.abc import Callable

from xladev.report.model import MetricBlock
from xladev.report.names import SERIES_ACCUMULATORS, SERIES_SAMPLES
from xladev.schema import units

# The fields a Metric block may have (a Counter block has only Value).
METRIC_FIELDS = frozenset({"TotalSamples", "Accumulator", "ValueRate", "Rate", "Percentiles", "Mean", "StdDev"})


def parse_metric(name: str, fields: dict, warn: Callable[[int, str], None]) -> MetricBlock:
    """Parses one ``Metric:`` block of raw field lines into values in base units.

    Args:
      name: the metric's name.
      fields: ``{"_line": header line, field: (line, raw bytes)}`` as the line reader stores them.
      warn: called with (line, message) for each malformed or missing field.

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
            if name.encode() not in SERIES_SAMPLES:
                warn(line, f"metric {name}: TotalSamples {text!r} is not an integer")
    for key, attribute, parse in (("Accumulator", "accumulator", units.parse_kind),
                                  ("ValueRate", "value_rate", units.parse_rate),
                                  ("Mean", "mean", units.parse_kind), ("StdDev", "stddev", units.parse_kind)):
        if key in texts:
            line, text = texts[key]
            try:
                setattr(block, attribute, parse(text, kind)[1])
            except units.UnitParseError as error:
                if not (key == "Accumulator" and name.encode() in SERIES_ACCUMULATORS):
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
