"""The metrics report text round trip: what `metrics_text.report_text` writes, its reader reads back.

The reader is the one the report reads with (`ReportLineReader`, then `parse_metric` and `parse_counter`). A value
comes back as printed: exact for a whole number of nanoseconds, within half of the last printed digit otherwise.
"""

from __future__ import annotations

import collections
import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from xladev.schema import metrics_text, units
from xladev.schema.metrics_text import Metric

PERCENTILES = (0.01, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.99)
LABELS = ["1%", "5%", "10%", "20%", "50%", "80%", "90%", "95%", "99%"]


def read(text: str) -> list[tuple[int | None, dict[str, metrics_text.MetricBlock], dict[str, int]]]:
    """Each report of `text`: (step, metric blocks, counters), read as the report reads them; no warning allowed."""
    reader = metrics_text.ReportLineReader()
    reader.read_lines(text.encode().splitlines(keepends=True))
    reader.finish()
    warnings = list(reader.warnings)

    def warn(line: int, message: str) -> None:
        warnings.append((line, message))

    reports = []
    for raw in reader.reports:
        metrics = {name.decode(): metrics_text.parse_metric(name.decode(), fields, warn)
                   for name, fields in raw.metrics.items()}
        counters = {name.decode(): metrics_text.parse_counter(name.decode(), fields, warn)
                    for name, fields in raw.counters.items()}
        reports.append((raw.step, metrics, counters))
    assert warnings == []
    return reports


def assert_printed_as(kind: str, read_back: float, written: float) -> None:
    """`read_back` is `written` as its kind prints it: to the nanosecond, to two decimals (of its unit)."""
    if kind == units.TIME:
        assert abs(read_back - written) <= 0.5 + abs(written) * 1e-15, (read_back, written)
    elif kind == units.BYTES:
        # half of the last of two printed decimals, plus the float error of a value that falls on the half
        # (0.125 B prints as 0.12B: 0.005 off, and a hair more in binary)
        assert math.isclose(read_back, written, rel_tol=0.005 + 1e-12, abs_tol=0.005 + 1e-12), (read_back, written)
    else:
        assert math.isclose(read_back, written, rel_tol=1e-12, abs_tol=0.005 + 1e-12), (read_back, written)


def assert_block_is(block: metrics_text.MetricBlock, name: str, metric: Metric) -> None:
    assert block.name == name and block.kind == metric.kind
    assert block.total_samples == metric.total_samples
    assert_printed_as(metric.kind, block.accumulator, metric.accumulator)
    ordered = sorted(value for _, value in metric.samples)
    if not ordered:
        assert block.percentiles == []
        return
    assert [label for label, _ in block.percentiles] == LABELS
    for p, (_, value) in zip(PERCENTILES, block.percentiles):
        assert_printed_as(metric.kind, value, ordered[min(int(p * len(ordered)), len(ordered) - 1)])
    span_s = (metric.samples[-1][0] - metric.samples[0][0]) / 1e9
    if len(ordered) > 1 and span_s > 0:
        assert math.isclose(block.rate, len(ordered) / span_s, rel_tol=1e-5)
        assert_printed_as(metric.kind, block.value_rate, math.fsum(ordered) / span_s)
    else:
        assert block.rate is None and block.value_rate is None


_NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_.:]{0,24}", fullmatch=True)
_VALUES = {
    units.TIME: st.integers(0, 10**15).map(float),  # whole nanoseconds, as the runtime measures them
    units.BYTES: st.floats(0, 1e15),
    units.VALUE: st.floats(0, 1e9),
}


@st.composite
def metrics(draw) -> Metric:
    kind = draw(st.sampled_from(sorted(_VALUES)))
    values = draw(st.lists(_VALUES[kind], max_size=12))
    stamps = sorted(draw(st.lists(st.integers(0, 10**12), min_size=len(values), max_size=len(values))))
    total = draw(st.integers(len(values), len(values) + 10**6))
    return Metric(kind, total, draw(_VALUES[kind]), collections.deque(zip(stamps, values)))


_REPORTS = st.tuples(st.dictionaries(_NAMES, st.integers(0, 2**62), max_size=8),
                     st.dictionaries(_NAMES, metrics(), max_size=6))


@settings(max_examples=150, deadline=None)
@given(report=_REPORTS)
# values on a half of the last printed digit (found by the suite: 0.125 prints as 0.12)
@example(report=({}, {"A": Metric(units.BYTES, 0, 0.125, collections.deque())}))
@example(report=({}, {"A": Metric(units.VALUE, 0, 0.125, collections.deque())}))
def test_a_report_reads_back_as_written(report):
    counters, metric_values = report
    text = metrics_text.report_text(counters, metric_values, PERCENTILES)
    written_counters = {name: value for name, value in counters.items() if value}  # zero counters are not printed
    if not written_counters and not metric_values:
        assert text == "" and read(text) == []
        return
    [(step, blocks, read_counters)] = read(text)
    assert step is None
    assert read_counters == written_counters
    assert sorted(blocks) == sorted(metric_values)
    for name, metric in metric_values.items():
        assert_block_is(blocks[name], name, metric)


@settings(max_examples=50, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 10**6), st.dictionaries(_NAMES, st.integers(1, 2**40), min_size=1,
                                                                         max_size=4),
                                st.dictionaries(_NAMES, metrics(), max_size=3)), min_size=1, max_size=5))
def test_step_records_read_back_one_report_each_with_its_step(steps):
    text = "".join(metrics_text.step_record(step, metrics_text.report_text(counters, values, PERCENTILES))
                   for step, counters, values in steps)
    reports = read(text)
    assert [step for step, _, _ in reports] == [step for step, _, _ in steps]
    for (_, blocks, read_counters), (_, counters, values) in zip(reports, steps):
        assert read_counters == counters
        for name, metric in values.items():
            assert_block_is(blocks[name], name, metric)


def test_the_printed_block_is_pytorch_xla_s():
    metric = Metric(units.TIME, 3, 1_234_500.0, collections.deque([(0, 1_000.0), (500_000_000, 1_233_500.0)]))
    text = metrics_text.report_text({"MarkStep": 2, "UncachedCompile": 0}, {"CompileTime": metric}, (0.5, 0.99))
    assert text == ("Metric: CompileTime\n"
                    "  TotalSamples: 3\n"
                    "  Accumulator: 001ms234.500us\n"
                    "  ValueRate: 002ms469.000us / second\n"
                    "  Rate: 4 / second\n"
                    "  Percentiles: 50%=001ms233.500us; 99%=001ms233.500us\n"
                    "Counter: MarkStep\n"
                    "  Value: 2\n")
    [(step, blocks, counters)] = read(metrics_text.step_record(7, text))
    assert step == 7 and counters == {"MarkStep": 2}
    assert blocks["CompileTime"].percentiles == [("50%", 1_233_500.0), ("99%", 1_233_500.0)]
