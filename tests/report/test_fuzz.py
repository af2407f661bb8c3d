"""The reader never raises on damaged input: it warns with line numbers and keeps what it can."""

from __future__ import annotations

import io
import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xladev.report import Report
from xladev.report.document import report_document
from xladev.report.document import report_document
from xladev.report.jsonout import render_json
from xladev.report.markup import render_html, render_markdown
from xladev.report.model import SourceResult
from xladev.report.text_reader import TextReader
from xladev.report.terminal import render_terminal

from tests.report.helpers import metrics_file, step_report

DEBUG_BLOCK = """\
Compilation Analysis: ================================================================================
Compilation Analysis: Compilation Cause
Compilation Analysis:   user mark_step
Compilation Analysis: Graph Info: \nCompilation Analysis:   Graph Hash: 39652d6d11f92d4848121dde57482c6c
Compilation Analysis:   Number of Graph Inputs: 7
Compilation Analysis:   Number of Graph Outputs: 16
Compilation Analysis: Python Frame Triggered Execution: \nCompilation Analysis:   <module> (/path/train.py:22)
Compilation Analysis: --------------------------------------------------------------------------------
Compilation Analysis: ================================================================================
pt-xla-profiler: CompileTime too frequent: 21 counts during 11 steps
"""
BASE = (metrics_file([step_report(step, compiles=1 + step // 3, transfers=step, items=step,
                                  fallbacks={"aten::nonzero": step + 1}) for step in range(8)])
        + DEBUG_BLOCK).encode()
BASE_LINES = BASE.split(b"\n")

FUZZ_EXAMPLES = int(os.environ.get("XLADEV_FUZZ_EXAMPLES", "30"))  # raise it for a longer local fuzzing run
_noise_line = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
_prefix = st.sampled_from(["", "INFO:root:", "[rank3]: ", "I0101 00:00:00.0 1 x.py:1] ", "\x1b[31m", "  ", "Metric: "])


def _parse(data: bytes, max_rows: int = 4) -> SourceResult:
    source = SourceResult(path="fuzz", name="fuzz")
    reader = TextReader(source, max_rows=max_rows)
    reader.read_stream(io.BytesIO(data))
    reader.finish()
    return source


def _check(source: SourceResult) -> None:
    assert source.lines >= 0
    for warning in source.warnings:
        assert 0 <= warning.line <= source.lines + 1, warning
        assert warning.message
    report = Report([source])
    document = report_document(report)
    render_terminal(document, width=80)
    render_markdown(document)
    render_html(document)
    json.loads(render_json(report_document(report)))


_settings = settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(st.integers(min_value=0, max_value=len(BASE)))
def test_random_truncation(cut):
    source = _parse(BASE[:cut])
    _check(source)
    if cut > len(BASE) // 2:
        assert source.final is not None


@_settings
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=len(BASE_LINES)), _prefix, _noise_line), max_size=12))
def test_interleaved_lines_and_unicode(insertions):
    lines = list(BASE_LINES)
    for position, prefix, text in sorted(insertions, reverse=True):
        lines.insert(position, (prefix + text).encode("utf-8", "surrogatepass"))
    _check(_parse(b"\n".join(lines)))


@_settings
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=len(BASE) - 1), st.binary(min_size=1, max_size=4)),
                max_size=20))
def test_line_noise(edits):
    data = bytearray(BASE)
    for position, noise in edits:
        data[position:position + len(noise)] = noise
    _check(_parse(bytes(data)))


@_settings
@given(st.lists(_prefix, min_size=len(BASE_LINES), max_size=len(BASE_LINES)))
def test_random_log_prefixes_keep_the_numbers(prefixes):
    clean = _parse(BASE)
    prefixed = _parse(b"\n".join(p.encode() + line if line else line for p, line in zip(prefixes, BASE_LINES)))
    _check(prefixed)
    if not any(p.strip() == "Metric:" for p in prefixes):
        assert prefixed.final.counters == clean.final.counters


@_settings
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(data):
    _check(_parse(data))


# ---------------------------------------------------------------- the event-log reader
_LOG = (__import__("pathlib").Path(__file__).resolve().parents[1] / "tui" / "fixtures" / "fixture_run.jsonl").read_bytes()
_LOG_LINES = _LOG.split(b"\n")
_json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=6)


def _read_log(data: bytes) -> SourceResult:
    from xladev.report.eventlog_input import EventLogInput

    source = SourceResult(path="fuzz.jsonl", name="fuzz.jsonl")
    EventLogInput(max_rows=4).read(io.BytesIO(data), source)
    return source


@_settings
@given(st.integers(min_value=len(_LOG_LINES[0]) + 1, max_value=len(_LOG)))
def test_event_log_random_truncation(cut):
    source = _read_log(_LOG[:cut])
    if source.final is not None:
        _check(source)
    complete = _LOG[:cut].count(b"\n")
    assert source.lines >= complete


@_settings
@given(st.lists(st.tuples(st.integers(min_value=1, max_value=len(_LOG_LINES) - 2),
                          st.sampled_from(["t", "step", "hash", "nodes", "cached", "cause", "site", "memory", "counts",
                                           "recompile", "bytes", "dir", "op", "ops", "interval_ns", "type"]),
                          _json_value), max_size=8))
def test_event_log_fields_of_any_type(changes):
    """Any field of any record set to any JSON value: the reader keeps going, and a record whose field has
    the wrong type is skipped with a warning naming the line (never counted silently, never a crash)."""
    lines = [json.loads(line) if line.strip() else None for line in _LOG_LINES]
    for index, field, value in changes:
        if isinstance(lines[index], dict):
            lines[index][field] = value
    data = b"\n".join(json.dumps(line).encode() if line is not None else b"" for line in lines)
    source = _read_log(data)
    if source.final is not None:
        _check(source)
    for warning in source.warnings:
        assert 1 <= warning.line <= source.lines + 1 and warning.message


def test_event_log_ops_counts_and_causes_of_the_wrong_type_are_skipped():
    # Found by test_event_log_fields_of_any_type: a non-integer op count crashed the counter table.
    lines = [json.loads(line) for line in _LOG_LINES if line.strip()]
    ops = next(i for i, line in enumerate(lines) if line["type"] == "ops")
    step = next(i for i, line in enumerate(lines) if line["type"] == "step")
    lines[ops]["counts"] = {"aten::mm": None, "": ""}
    lines[step]["cause"] = {"kind": 1}
    source = _read_log(b"\n".join(json.dumps(line).encode() for line in lines))
    messages = {w.line: w.message for w in source.warnings}
    assert "count of 'aten::mm' is NoneType" in messages[ops + 1]
    assert "'cause' holds a value that is not text" in messages[step + 1]
    _check(source)
