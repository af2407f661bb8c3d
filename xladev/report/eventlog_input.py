"""`xladev report run.events.jsonl`: reads an xladev event log (schema `xladev.events/1`).

The log's records are replayed into the structures the text readers fill, so every rule of the
report applies unchanged:

- counters and metrics named as the runtime's metrics registry names them (``CompileTime``,
  ``ExecuteTime``, ``MarkStep``, ``aten::`` fallback counters ...), one snapshot per ``step``
  record (the per-step series) and the last one in full;
- a `DebugLog` with one compile event per ``compile`` record (its cause, trigger site, sizes and,
  for a recompilation, the "Recompilation Cause" lines saying what changed), executions by site,
  cause and graph, and the CPU fallback calls by site.

This module reads files only: it never imports torch, jax or the runtime. The schema is described
in docs/event-log.md; `SCHEMA_NAME` and `SCHEMA_VERSION` are the one definition the writer uses.
"""

from __future__ import annotations

import collections
import json
import math
from typing import BinaryIO

from xladev.schema import units
from xladev.report.debuglog import DebugLog, GraphEvent
from xladev.report.inputs import register_input_kind
from xladev.report.model import MetricBlock, Snapshot, SourceResult
from xladev.report.names import canonical_numbers
from xladev.report.series import DEFAULT_MAX_ROWS, StepSeries
from xladev import rules
from xladev.rules import ITEM_COUNTER

SCHEMA_NAME = "xladev.events"
SCHEMA_VERSION = 1
KIND_NAME = "event-log"

# Device->host accesses the runtime counts as PyTorch/XLA's `aten::_local_scalar_dense`.
SCALAR_READS = frozenset({".item()", "bool() in control flow", "float()", "int()", "used as an index"})
PERCENTILES = (0.01, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.99)
MAX_SAMPLES = 1024
_POST_COMPILE_SIZES = {"argument": "input_bytes", "output": "output_bytes", "alias": "aliased_bytes",
                       "temp": "temp_bytes", "generated_code": "program_bytes"}


def parse_header(line: bytes | str) -> dict | None:
    """The header record when ``line`` is the first line of an event log, else None."""
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or record.get("type") != "header":
        return None
    schema = str(record.get("schema", ""))
    return record if schema.split("/", 1)[0] == SCHEMA_NAME else None


class _Metric:
    __slots__ = ("kind", "count", "total", "samples", "line")

    def __init__(self, kind: str, line: int):
        self.kind, self.count, self.total, self.line = kind, 0, 0.0, line
        self.samples: collections.deque = collections.deque(maxlen=MAX_SAMPLES)

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.samples.append(value)

    def block(self, name: str) -> MetricBlock:
        ordered = sorted(self.samples)
        n = len(ordered)
        percentiles = [(f"{p * 100:g}%", ordered[min(int(math.floor(p * n)), n - 1)]) for p in PERCENTILES] if n else []
        return MetricBlock(name=name, kind=self.kind, total_samples=self.count, accumulator=self.total,
                           percentiles=percentiles, line=self.line)


def _split_site(site: str | None) -> tuple[str, str]:
    """``/a/train.py:12 (step)`` -> (``/a/train.py:12``, ``step``), the debug log's form."""
    if not site:
        return "", ""
    where, _, function = site.rpartition(" (")
    if not where:
        return site, ""
    return where, function.rstrip(")")


class EventLogReplay:
    """Replays event-log records into a `SourceResult` (metrics snapshots, series and debug log)."""

    def __init__(self, source: SourceResult, max_rows: int = DEFAULT_MAX_ROWS):
        self.source = source
        source.series = StepSeries(max_rows=max_rows)
        source.debug = DebugLog(source.warn)
        self.counters: dict[str, int] = {}
        self.counter_lines: dict[str, int] = {}
        self.metrics: dict[str, _Metric] = {}
        self.header: dict | None = None
        self.line = 0
        self.step: int | None = None
        self.steps = 0
        self.ended = False
        self._fallback_sites: dict[tuple[str, str], int] = {}

    # ------------------------------------------------------------ counting
    def _count(self, name: str, amount: int = 1) -> None:
        if name not in self.counters:
            self.counters[name] = 0
            self.counter_lines[name] = self.line
        self.counters[name] += amount

    def _metric(self, name: str, kind: str, value: float) -> None:
        metric = self.metrics.get(name)
        if metric is None:
            metric = self.metrics[name] = _Metric(kind, self.line)
        metric.add(float(value))

    # ------------------------------------------------------------ records
    def feed(self, lineno: int, record: dict) -> None:
        self.line = lineno
        kind = record.get("type")
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(record)

    def _on_header(self, record: dict) -> None:
        if self.header is None:
            self.header = record
        else:
            self.source.warn(self.line, "a second header: two logs concatenated? read as one run")

    def _on_ops(self, record: dict) -> None:
        for name, count in (record.get("counts") or {}).items():
            self._count("xla::" + str(name).split("::", 1)[-1], int(count))

    def _on_compile(self, record: dict) -> None:
        self._metric("CompileTime", units.TIME, record.get("compile_ns", 0))
        self._count("UncachedCompile")
        self._count("CreateCompileHandles")
        if record.get("persistent_cache_hit") is not None:
            self._count("PersistentCacheHit" if record["persistent_cache_hit"] else "PersistentCacheMiss")
        site, function = _split_site(record.get("site"))
        cause = (record.get("cause") or {}).get("text", "")
        event = GraphEvent("compile", self.line, cause=cause, graph_hash=str(record.get("hash", "")),
                           inputs=record.get("inputs"), outputs=record.get("outputs"),
                           frames=[record["site"]] if record.get("site") else [], site=site, function=function,
                           sizes={_POST_COMPILE_SIZES[k]: float(v) for k, v in (record.get("memory") or {}).items()
                                  if k in _POST_COMPILE_SIZES},
                           steps_before=self.steps)
        recompile = record.get("recompile")
        if recompile:  # the lines of xladev's "Recompilation Cause" section, as the debug-log reader keeps them
            event.recompilation = (
                [f"compared with graph {recompile.get('previous', '?')} from the same site:"]
                + [f"- {change}" for change in recompile.get("changes") or ["graph changed"]]
                + [f"{record.get('site') or '?'} has compiled {recompile.get('graphs_at_site', '?')} graphs so far, "
                   f"{units.format_time_ns(recompile.get('compile_ns_at_site', 0))} compile time in total"])
        debug = self.source.debug
        debug.compiles += 1
        debug._last_compile = event
        if len(debug.compile_events) < 20_000:
            debug.compile_events.append(event)

    def _on_compile_failed(self, record: dict) -> None:
        self._count("CompileFailed")

    def _on_execute(self, record: dict) -> None:
        self._metric("ExecuteTime", units.TIME, record.get("execute_ns", 0))
        self._metric("TensorsGraphSize", units.VALUE, record.get("nodes", 0))
        self._count("ExecuteGraph")
        if record.get("cached"):
            self._count("CachedCompile")
        self._count("CreateDataHandles", int(record.get("outputs") or 0))
        cause = record.get("cause") or {}
        if cause.get("kind") == "VALUE_ACCESS":
            self._count("ValueAccessSync")
        elif cause.get("kind") == "FALLBACK":
            self._count("FallbackSync")
        debug = self.source.debug
        debug.execution_count += 1
        site, _ = _split_site(record.get("site"))
        key = (site, cause.get("text", ""), str(record.get("hash", "")))
        entry = debug.executions.get(key)
        if entry is not None:
            entry[0] += 1
        elif len(debug.executions) < 50_000:
            debug.executions[key] = [1, self.line, record.get("inputs"), record.get("outputs")]

    def _on_transfer(self, record: dict) -> None:
        if record.get("dir") == "to_device":
            self._metric("TransferToDeviceTime", units.TIME, record.get("ns", 0))
            self._metric("OutboundData", units.BYTES, record.get("bytes", 0))
            self._count("CreateDataHandles", int(record.get("count") or 1))
            return
        self._metric("TransferFromDeviceTime", units.TIME, record.get("ns", 0))
        self._metric("InboundData", units.BYTES, record.get("bytes", 0))
        if record.get("kind") in SCALAR_READS:
            self._count(ITEM_COUNTER)

    def _on_fallback(self, record: dict) -> None:
        op = str(record.get("op", "?"))
        self._count(op)
        self.source.debug.not_lowered_ops.add(op)
        key = (op, record.get("site") or "")
        self._fallback_sites[key] = self._fallback_sites.get(key, 0) + 1

    def _on_graph_growing(self, record: dict) -> None:
        # The same words PT_XLA_DEBUG prints, so one reader and one rule serve both inputs.
        ops, step = record.get("ops"), record.get("step")
        if not isinstance(ops, int) or not isinstance(step, int):
            self.source.warn(self.line, "graph_growing record without integer ops and step: skipped")
            return
        site = _split_site(record.get("site"))[0] or "?"
        self.source.debug.add_profiler_line(self.line, rules.graph_growing_message(ops=ops, step=step, site=site))

    def _on_cache_miss(self, record: dict) -> None:
        self._count("DeviceDataCacheMiss")

    def _on_step(self, record: dict) -> None:
        self._count("MarkStep")
        self.steps += 1
        self.source.debug.step_syncs = self.steps
        step = record.get("step")
        self.step = int(step) if isinstance(step, int) else None
        self._snapshot()

    def _on_end(self, record: dict) -> None:
        self.ended = True

    # ------------------------------------------------------------ snapshots
    def _numbers(self) -> tuple[dict, dict, dict]:
        samples = {name: m.count for name, m in self.metrics.items()}
        accumulators = {name: m.total for name, m in self.metrics.items()}
        return dict(self.counters), samples, accumulators

    def _snapshot(self) -> None:
        counters, samples, accumulators = self._numbers()
        row = canonical_numbers(counters, samples, accumulators)
        for name, value in counters.items():
            if "aten::" in name:
                row[name] = float(value)
        row["snapshot"] = float(self.source.snapshots)
        row["step"] = float("nan") if self.step is None else float(self.step)
        row["line"] = float(self.line)
        row["steps"] = float(self.steps)
        self.source.series.append(row)
        self.source.snapshots += 1

    def finish(self) -> None:
        """Makes the last snapshot (the counters at the end of the log) and the fallback summary."""
        if self.header is None:
            return
        if self.counters or self.metrics:
            metrics = {name: metric.block(name) for name, metric in self.metrics.items()}
            self.source.final = Snapshot(metrics, dict(self.counters), dict(self.counter_lines), self.step,
                                         self.line, max(0, self.source.snapshots - 1))
            if self.source.snapshots == 0:
                self._snapshot()
        self.source.debug.fallback_sites = [
            {"count": count, "op": op, "frames": [site] if site else []}
            for (op, site), count in sorted(self._fallback_sites.items(), key=lambda kv: -kv[1])]


class EventLogInput:
    """The `InputKind` of xladev event logs (``XLADEV_EVENT_LOG``)."""

    name = KIND_NAME

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS):
        self.max_rows = max_rows

    def sniff(self, head: bytes, path: str) -> bool:
        first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0]
        return first.startswith(b"{") and b'"header"' in first and parse_header(first) is not None

    def read(self, stream: BinaryIO, source: SourceResult) -> None:
        replay = EventLogReplay(source, self.max_rows)
        pending = b""
        lineno = 0
        while True:
            chunk = stream.read(1 << 20)
            if not chunk:
                break
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for raw in lines:
                lineno += 1
                self._line(replay, source, lineno, raw)
        if pending.strip():
            lineno += 1
            try:
                record = json.loads(pending)
            except ValueError:
                source.warn(lineno, "last line is cut short (the process was killed while writing?); ignored")
            else:
                if isinstance(record, dict):
                    replay.feed(lineno, record)
        source.lines = lineno
        replay.finish()
        if replay.header is not None and not replay.ended:
            source.warn(lineno, "the log has no end record: the process was killed or is still running")

    @staticmethod
    def _line(replay: EventLogReplay, source: SourceResult, lineno: int, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            record = json.loads(raw)
        except ValueError:
            source.warn(lineno, "not a JSON record; skipped")
            return
        if not isinstance(record, dict):
            source.warn(lineno, "not a JSON object; skipped")
            source.other_lines += 1
            return
        if lineno == 1 and record.get("type") == "header":
            version = record.get("version")
            if isinstance(version, int) and version > SCHEMA_VERSION:
                source.warn(lineno, f"schema version {version} is newer than this reader's {SCHEMA_VERSION}; "
                                    "unknown fields are ignored")
        replay.feed(lineno, record)


register_input_kind(EventLogInput())
