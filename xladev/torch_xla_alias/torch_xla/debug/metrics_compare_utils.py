"""`torch_xla.debug.metrics_compare_utils` on xladev: a metrics report as numbered data points, read by
xladev's own report reader (`xladev.report`), in PyTorch/XLA's key format.

    points = mcu.get_data_points_from_metrics_reports([met.metrics_report()])
    points["CompileTime__Accumulator_sec"], points["MarkStep__Value"]

Keys are `<metric>__TotalSamples`, `<metric>__Accumulator_<unit>` and `<metric>__Percentile_<p>_<unit>` (units:
`sec` for times, `mb` for sizes, none for plain values), and `<counter>__Value`. `compare_metrics` is not
provided: `xladev report A B` compares two runs and says which differences matter.
"""

from __future__ import annotations

import collections
import io

from torch_xla import _xladev
from xladev.report.model import SourceResult
from xladev.report.text_reader import TextReader
from xladev.schema import units

__all__ = ["parse_metrics_report", "get_data_points_from_metrics_reports"]

# PyTorch/XLA's units in data-point keys, and the factor from xladev's base unit (ns, bytes) to them.
_UNITS = {units.TIME: ("_sec", 1e-9), units.BYTES: ("_mb", 1e-6)}


def parse_metrics_report(report: str, dehumanize: bool = True) -> dict:
    """The numbers of one metrics report, by PyTorch/XLA's data-point key.

    Args:
      report: the text of `met.metrics_report()` (or of a PyTorch/XLA run's report).
      dehumanize: False gives `(number, text as printed by xladev)` pairs instead of numbers.

    Returns:
      Data point key to value; empty when the text holds no complete report.
    """
    source = SourceResult(path="<metrics report>", name="<metrics report>")
    reader = TextReader(source)
    reader.read_stream(io.BytesIO(report.encode()))
    reader.finish()
    points: dict = {}
    if source.final is None:
        return points
    for name, block in source.final.metrics.items():
        suffix, scale = _UNITS.get(block.kind, ("", 1.0))
        values = [("TotalSamples", "", block.total_samples, 1.0), ("Accumulator", suffix, block.accumulator, scale)]
        values += [(f"Percentile_{label.rstrip('%')}", suffix, value, scale) for label, value in block.percentiles]
        for field, unit, value, factor in values:
            if value is None or value != value:  # absent, or NaN where the report could not be read
                continue
            number = value * factor
            points[f"{name}__{field}{unit}"] = number if dehumanize else (number, units.format_kind(block.kind, value))
    for name, value in source.final.counters.items():
        points[f"{name}__Value"] = int(value)
    return points


def get_data_points_from_metrics_reports(metrics_reports: list[str]) -> dict:
    """Each data point across several reports: key to a list with one value per report (None where absent).

    Args:
      metrics_reports: report texts, in order.

    Returns:
      A dict of lists, each as long as `metrics_reports`.
    """
    points: dict = collections.defaultdict(lambda: [None] * len(metrics_reports))
    for index, report in enumerate(metrics_reports):
        for key, value in parse_metrics_report(report).items():
            points[key][index] = value
    return points


__getattr__ = _xladev.module_getattr(__name__)
