"""Streaming reader of text inputs: metrics reports, XLA_METRICS_FILE records and PT_XLA_DEBUG output.

`TextReader` reads a binary stream with the metrics text's line reader (`xladev.schema.metrics_text`), and
never holds more than two reports; a line that is not a report's exact line goes to the PT_XLA_DEBUG reader
first. Each finished report gives one row of the per-step series (a few numbers, see `xladev.report.names`);
a drop of the counters starts a new run, and only the last complete report is parsed in full: it is lifted to
its `metrics_report` record and folded into the run's state (`SourceResult.run`), whose counters and metrics the
report reads (`ReportSnapshot.of_state`), as an event log's.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import BinaryIO

from xladev.report import fastpath
from xladev.schema import metrics_text, records as rec, units
from xladev.dumps.debug_analysis import DebugLog
from xladev.report.model import ReportSnapshot, SourceResult
from xladev.report.names import (
    SERIES_ACCUMULATORS,
    SERIES_COUNTERS,
    SERIES_SAMPLES,
    canonical_numbers,
)
from xladev.report.series import DEFAULT_MAX_ROWS, StepSeries

_CUMULATIVE = ("steps", "compiles", "executions")


def _new_run(previous: dict[str, float], row: dict[str, float]) -> bool:
    """True when a report's cumulative numbers drop below the report before it: a new run appended to the file.

    A drop of the MarkStep counter alone, while the compile and execution samples kept growing, is not one:
    `met.clear_counters()` ran inside the process (torch_xla's dynamo bridge calls it while it partitions a
    torch.compile graph) and clears counters, never metrics. A new process starts its metrics from zero too.
    """
    dropped = [name for name in _CUMULATIVE if row.get(name, 0.0) < previous.get(name, 0.0)]
    if dropped == ["steps"] and row.get("compiles", 0.0) > 0 and row.get("executions", 0.0) > 0:
        return False
    return bool(dropped)


class _RawSnapshot:
    """One report's blocks as raw bytes: name -> {field: (line, raw value)} plus "_line".

    A report read by the fast path keeps its text instead (``metrics`` and ``counters`` are None
    until `TextReader._materialize` reads the text with the line reader).
    """

    __slots__ = ("metrics", "counters", "step", "line", "index", "text")

    def __init__(self, metrics: dict | None, counters: dict | None, step: int | None, line: int, index: int,
                 text: bytes = b""):
        self.metrics, self.counters, self.step, self.line, self.index = metrics, counters, step, line, index
        self.text = text

    def names(self) -> set[tuple[str, bytes]]:
        return {("m", name) for name in self.metrics} | {("c", name) for name in self.counters}


class TextReader(metrics_text.ReportLineReader):
    """Reads one text input into a `SourceResult`.

    Usage: ``reader = TextReader(source); reader.read_lines(stream); reader.finish()``.
    """

    def __init__(self, source: SourceResult, max_rows: int = DEFAULT_MAX_ROWS):
        """Creates a reader that fills ``source``.

        Args:
          source: the result to fill (its ``warn`` records problems).
          max_rows: rows of the per-step series stored before thinning.
        """
        super().__init__()
        self.source = source
        source.series = StepSeries(max_rows=max_rows)
        self._max_rows = max_rows
        source.debug = DebugLog(source.warn)
        self._last_raw: _RawSnapshot | None = None
        self._previous_raw: _RawSnapshot | None = None
        self._pending_row: dict[str, float] | None = None
        self._names: dict[bytes, str] = {}
        self._accumulator_cache: dict[bytes, tuple[bytes, float]] = {}
        # The line number of a report line that ended the input without its newline (cut off), else 0.
        self._unterminated = 0
        # What the last report's "new run" reset discarded, kept until the next report: a cut-off last
        # report also has lower counters, and must not hide the complete report before it.
        self._before_restart: tuple | None = None

    # ------------------------------------------------------------ reading

    def read_stream(self, stream: BinaryIO, use_fast_path: bool = True) -> None:
        """Reads a whole binary stream, clean ``[MetricsData; step=N]`` records by the fast path.

        Args:
          stream: a binary stream with ``read(n)``.
          use_fast_path: False reads every line with the line reader (same result, slower).
        """
        for region, complete in fastpath.iter_regions(stream):
            head, records = fastpath.split_region(region) if use_fast_path else (region, [])
            if head:
                self.read_lines(io.BytesIO(head))
            for position, record in enumerate(records):
                last = position == len(records) - 1
                fast = fastpath.extract_record(record) if complete or not last else None
                if fast is None:
                    self.read_lines(io.BytesIO(record))
                else:
                    self._add_fast_record(fast, record)

    def _add_fast_record(self, fast: fastpath.FastRecord, text: bytes) -> None:
        self._close_snapshot(self._lineno + 1)
        first_line = self._lineno + 1
        self._lineno += fast.lines
        self.source.lines = self._lineno
        self._unterminated = 0 if text.endswith(b"\n") else self._lineno
        self.source.step_records += 1
        name = self._name
        row = self._make_row({name(key): value for key, value in fast.counters.items()},
                             {name(key): value for key, value in fast.samples.items()},
                             self._parse_accumulators(fast.accumulators, first_line),
                             self.source.snapshots, fast.step, first_line)
        self._commit(_RawSnapshot(None, None, fast.step, first_line, self.source.snapshots, text), row)

    # ------------------------------------------------------------ the line reader

    def read_lines(self, lines: Iterable[bytes]) -> None:
        """Reads lines (bytes, newline included or not) in order.

        Args:
          lines: an iterable of lines, e.g. a file opened in binary mode.
        """
        line = super().read_lines(lines)
        self.source.lines = self._lineno
        if line != b"\n":
            self._unterminated = self._lineno if self._is_cut_report_line(line) else 0

    def _is_cut_report_line(self, line: bytes) -> bool:
        """True for the input's last line when it has no newline and belongs to the open report: its value may
        be cut (``Value: 1`` of ``Value: 12``), so that report is not known complete."""
        if line.endswith(b"\n") or not (self._metrics or self._counters):
            return False
        return metrics_text.is_report_line(line.decode("utf-8", "replace"))

    def _foreign_line(self, lineno: int, text: str) -> bool:
        return self.source.debug.feed(lineno, text)

    def _marker_read(self) -> None:
        self.source.step_records += 1

    def _other_line(self) -> None:
        self.source.other_lines += 1

    def _warn(self, lineno: int, message: str) -> None:
        self.source.warn(lineno, message)

    # ------------------------------------------------------------ finishing reports

    def _close_snapshot(self, lineno: int) -> None:
        taken = self._take_report(lineno)
        if taken is None:
            return
        raw = _RawSnapshot(taken.metrics, taken.counters, taken.step, taken.line, self.source.snapshots)
        self._commit(raw, self._series_row(raw))

    def _commit(self, raw: _RawSnapshot, row: dict[str, float]) -> None:
        previous = self._pending_row
        self._before_restart = None
        if previous is not None and _new_run(previous, row):
            # Counters only grow within a process: a drop is a new run appended to the same file. Its
            # reports start a fresh series, so no rule mixes two runs (a false "graphs keep growing").
            self.source.restarts.append(raw.line)
            self.source.warn(raw.line, f"the counters drop back here: a new run starts (runs appended to one file); "
                                       f"the report reads the last run, from line {raw.line}")
            self._before_restart = (self.source.series, self._last_raw, previous, self.source.warnings[-1])
            self.source.series = StepSeries(max_rows=self._max_rows)
            self._pending_row = self._previous_raw = self._last_raw = None
        if self._pending_row is not None:
            self.source.series.append(self._pending_row)
        self._previous_raw, self._last_raw, self._pending_row = self._last_raw, raw, row
        self.source.snapshots += 1

    def _name(self, name: bytes) -> str:
        text = self._names.get(name)
        if text is None:
            text = self._names[name] = name.decode("utf-8", "replace")
        return text

    def _series_row(self, raw: _RawSnapshot) -> dict[str, float]:
        warn = self.source.warn
        counters: dict[str, float] = {}
        for name, fields in raw.counters.items():
            if name in SERIES_COUNTERS or b"aten::" in name:
                entry = fields.get("Value")
                if entry is not None:
                    try:
                        counters[self._name(name)] = int(entry[1])
                    except ValueError:
                        warn(entry[0], f"counter {self._name(name)}: value {_show(entry[1])} is not an integer")
        samples: dict[str, float] = {}
        for name in SERIES_SAMPLES:
            fields = raw.metrics.get(name)
            if fields is not None and (entry := fields.get("TotalSamples")) is not None:
                try:
                    samples[self._name(name)] = int(entry[1])
                except ValueError:
                    warn(entry[0], f"metric {self._name(name)}: TotalSamples {_show(entry[1])} is not an integer")
        accumulators = {}
        for name in SERIES_ACCUMULATORS:
            fields = raw.metrics.get(name)
            if fields is not None and (entry := fields.get("Accumulator")) is not None:
                accumulators[name] = entry
        return self._make_row(counters, samples, self._parse_accumulators(accumulators, raw.line),
                              raw.index, raw.step, raw.line)

    def _parse_accumulators(self, raw_values: dict, line: int) -> dict[str, float]:
        parsed = {}
        cache = self._accumulator_cache
        for name, entry in raw_values.items():
            where, text = entry if isinstance(entry, tuple) else (line, entry)
            cached = cache.get(name)
            if cached is not None and cached[0] == text:
                parsed[self._name(name)] = cached[1]
                continue
            try:
                value = units.parse_kind(text.decode("utf-8", "replace"))[1]
            except units.UnitParseError as error:
                self.source.warn(where, f"metric {self._name(name)}: {error}")
                continue
            parsed[self._name(name)] = value
            cache[name] = (text, value)
        return parsed

    @staticmethod
    def _make_row(counters: dict[str, float], samples: dict[str, float], accumulators: dict[str, float],
                  index: int, step: int | None, line: int) -> dict[str, float]:
        row = canonical_numbers(counters, samples, accumulators)
        for name, value in counters.items():
            if "aten::" in name:
                row[name] = value
        row["snapshot"] = float(index)
        row["step"] = float("nan") if step is None else float(step)
        row["line"] = float(line)
        if "MarkStep" in counters:
            row["steps"] = float(counters["MarkStep"])
        else:
            row["steps"] = float(step + 1 if step is not None else index + 1)
        return row

    def finish(self, cut_short: bool = False) -> None:
        """Closes the last report and parses it in full into ``source.final``.

        The last report is used only when it is complete; otherwise the one before it is, and with
        none before it the input has no report (``source.final`` stays None).

        Args:
          cut_short: the input stops at damage (a gzip file cut off or corrupt), so nothing says
            where its last report ended: that report is not taken as complete.
        """
        self._close_snapshot(self._lineno)
        self.source.debug.finish()
        last = self._materialize(self._last_raw)
        if last is None:
            return
        why = self._why_cut(last, cut_short)
        if why and self._before_restart is not None:
            self._undo_restart()
        previous = self._materialize(self._previous_raw)
        if not why and previous is not None and not last.names() >= previous.names():
            missing = len(previous.names() - last.names())
            why = f"{missing} blocks of the previous report missing, input cut short?"
        if why:
            self.source.snapshots -= 1
            self.source.step_records -= last.step is not None
            self._pending_row = None
            if previous is None:
                self.source.warn(last.line, f"the only report is incomplete ({why}); there is no complete report",
                                 at_end=True)
                self.source.cut_report_line = last.line
                self._last_raw = self._previous_raw = None
                return
            self.source.warn(last.line, f"last report is incomplete ({why}); "
                                        f"the report at line {previous.line} is used", at_end=True)
            self.source.cut_row = self._complete_blocks_row(last)
            last = previous
        if self._pending_row is not None:
            self.source.series.append(self._pending_row)
            self._pending_row = None
        # The report is lifted to its record and folded into the run's state, which the report reads as an event
        # log's: a report counts every event before it, so its numbers are the state's.
        self.source.run.feed(self._lift(last), last.line)
        self.source.final = ReportSnapshot.of_state(self.source.run, last.step, last.line, last.index)
        self._last_raw = self._previous_raw = None

    def _complete_blocks_row(self, raw: _RawSnapshot) -> dict[str, float] | None:
        """The series numbers of a cut-off report's complete blocks: every block but its last (the one cut, or
        missing lines); None when no earlier block is left."""
        blocks = [(fields["_line"], "m", name) for name, fields in raw.metrics.items()]
        blocks += [(fields["_line"], "c", name) for name, fields in raw.counters.items()]
        if len(blocks) < 2:
            return None
        _, kind, cut = max(blocks)
        metrics = {name: fields for name, fields in raw.metrics.items() if (kind, name) != ("m", cut)}
        counters = {name: fields for name, fields in raw.counters.items() if (kind, name) != ("c", cut)}
        row = self._series_row(_RawSnapshot(metrics, counters, raw.step, raw.line, raw.index))
        if raw.step is None and b"MarkStep" not in counters:
            row.pop("steps")  # neither the report nor a step marker says which step it is
        return row

    def _undo_restart(self) -> None:
        """Takes back the "new run" that the cut-off last report seemed to start (its counters were cut, not reset)."""
        series, last_raw, pending_row, warning = self._before_restart
        self._before_restart = None
        self.source.restarts.pop()
        if warning in self.source.warnings:
            self.source.warnings.remove(warning)
            self.source.warning_count -= 1
        series.append(pending_row)  # as the cut report's commit would have without the reset
        self.source.series = series
        self._previous_raw = last_raw

    def _why_cut(self, last: _RawSnapshot, cut_short: bool) -> str:
        """Why the last report is not complete (damage, a cut-off line, a last block without its value), or ""."""
        if cut_short:
            return "the input stops at damage inside or after it"
        if self._unterminated >= last.line:
            return f"its line {self._unterminated} is cut off"
        blocks = [(fields["_line"], "TotalSamples", name, fields) for name, fields in last.metrics.items()]
        blocks += [(fields["_line"], "Value", name, fields) for name, fields in last.counters.items()]
        if blocks:
            line, needed, name, fields = max(blocks, key=lambda block: block[0])
            if needed not in fields:
                return f"its last block {self._name(name)} has no {needed} line, input cut short?"
        return ""

    def _materialize(self, raw: _RawSnapshot | None) -> _RawSnapshot | None:
        """Reads the text of a fast-path report into blocks, with the same line numbers."""
        if raw is None or raw.metrics is not None:
            return raw
        reader = TextReader(SourceResult(self.source.path, self.source.name))
        reader._lineno = raw.line - 1
        reader.read_lines(io.BytesIO(raw.text))
        reader._close_snapshot(reader._lineno)
        for warning in reader.source.warnings:
            self.source.warn(warning.line, warning.message)
        materialized = reader._last_raw
        if materialized is None:  # pragma: no cover - a fast record always has blocks
            return None
        materialized.index = raw.index
        return materialized

    def _lift(self, raw: _RawSnapshot) -> rec.MetricsReport:
        """The report parsed in full (a value that does not parse is warned of and left out), as its record."""
        record = rec.MetricsReport(step=raw.step or 0, report_step=raw.step, index=raw.index)
        for name, fields in raw.metrics.items():
            # The series read these fields first, and warned there of a value that is not a number.
            told = [key for key, names in (("TotalSamples", SERIES_SAMPLES), ("Accumulator", SERIES_ACCUMULATORS))
                    if name in names]
            block = metrics_text.parse_metric(self._name(name), fields, self.source.warn, told)
            record.metrics[block.name] = block.printed()
            record.metric_lines[block.name] = block.line
        for name, fields in raw.counters.items():
            text_name = self._name(name)
            value = metrics_text.parse_counter(text_name, fields, self.source.warn)
            if value is not None:
                record.counters[text_name] = value
                record.counter_lines[text_name] = fields["_line"]
        return record

def _show(raw: bytes) -> str:
    return repr(raw.decode("utf-8", "replace").strip()[:40])
