"""The counters-and-metrics registry, fed by runtime events, and the per-step metrics file (XLA_METRICS_FILE).

Counters are integers. A metric keeps its lifetime sample count and accumulator, and the last
`XLA_METRICS_SAMPLES` (timestamp, value) samples, from which ValueRate, Rate and Percentiles are
computed, exactly as FORMATS.md §1 describes. The report's text is written by `xladev.schema.metrics_text`.
"""

from __future__ import annotations

import collections
import itertools
import math
import sys
import threading
import time

from xladev._flags import config
from xladev.events import Step
from xladev.schema.counters import updates
from xladev.schema.metrics_text import Metric, report_text, step_record
from xladev.schema.units import COUNT
from xladev.sinks._lifecycle import Sink
from xladev.sinks._output import OutputFile
from xladev.schema.ranks import per_rank_path
from xladev.sinks.event_records import RecordBuilder

SNAPSHOT_SCHEMA = "xladev.metrics/1"


class Registry:
    """Thread-safe counters and metrics."""

    def __init__(self, max_samples: int | None = None) -> None:
        self._lock = threading.Lock()
        self.counters: dict[str, int] = {}
        self.metrics: dict[str, Metric] = {}
        self.max_samples = max_samples

    def increment(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + amount

    def add(self, name: str, kind: str, value: float, timestamp_ns: int | None = None) -> None:
        stamp = time.time_ns() if timestamp_ns is None else timestamp_ns
        with self._lock:
            metric = self._metric(name, kind)
            metric.total_samples += 1
            metric.accumulator += value
            metric.samples.append((stamp, value))

    def _metric(self, name: str, kind: str) -> Metric:
        """The metric `name`, created empty when new (the caller holds the lock)."""
        metric = self.metrics.get(name)
        if metric is None:
            metric = self.metrics[name] = Metric(kind, samples=collections.deque(maxlen=self._max()))
        return metric

    def count(self, records) -> None:
        """Counts schema records through the schema's table (`xladev.schema.counters`), under one lock."""
        stamp = time.time_ns()
        with self._lock:
            counters = self.counters
            for update in itertools.chain.from_iterable(map(updates, records)):
                if update.kind == COUNT:
                    counters[update.name] = counters.get(update.name, 0) + int(update.value)
                    continue
                metric = self._metric(update.name, update.kind)
                if update.values is not None:  # the samples themselves (LazyTracing's per-op times)
                    metric.total_samples += len(update.values)
                    metric.accumulator += math.fsum(update.values)
                    metric.samples.extend(zip(itertools.repeat(stamp), update.values))
                elif update.samples == 1:
                    metric.total_samples += 1
                    metric.accumulator += update.value
                    metric.samples.append((stamp, update.value))
                elif update.samples > 1:  # known only by their sum: each kept as the mean
                    mean = update.value / update.samples
                    metric.total_samples += update.samples
                    metric.accumulator += update.value
                    metric.samples.extend(itertools.repeat((stamp, mean), min(update.samples, metric.samples.maxlen
                                                                              or update.samples)))

    def _max(self) -> int:
        return self.max_samples or config.metrics_samples

    def clear_counters(self) -> None:
        with self._lock:
            self.counters.clear()

    def clear_metrics(self) -> None:
        with self._lock:
            self.metrics.clear()

    def copy(self) -> tuple[dict, dict]:
        with self._lock:
            counters = dict(self.counters)
            metrics = {k: Metric(m.kind, m.total_samples, m.accumulator, collections.deque(m.samples))
                       for k, m in self.metrics.items()}
        return counters, metrics


class MetricsFileWriter:
    """Appends `[MetricsData; step=N]` + the report on every step, one atomic write per record.

    A file that cannot be opened or written turns this output off with one line on stderr (`OutputFile`).
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.file: OutputFile | None = None
        if target.upper() not in ("STDOUT", "STDERR"):
            self.file = OutputFile("XLA_METRICS_FILE", target, per_rank_path(target))
            self.path = self.file.path

    @property
    def off(self) -> bool:
        """True once the file could not be opened or written."""
        return self.file is not None and self.file.off

    def write(self, step: int, report: str) -> None:
        record = step_record(step, report)
        if self.file is not None:
            # O_APPEND and a single write: a killed process leaves whole records behind.
            self.file.write(record.encode())
        else:
            stream = sys.stdout if self.target.upper() == "STDOUT" else sys.stderr
            stream.write(record)
            stream.flush()


class MetricsSink(Sink):
    """Turns runtime events into counters and metrics (and the per-step metrics file).

    Events become schema records and are counted through `xladev.schema.counters`, the table the
    event-log readers use, so a log read back has the counters this registry had.
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.file: MetricsFileWriter | None = None
        self._records = RecordBuilder(sites=False, graph_texts=False)

    def start(self) -> "MetricsSink":
        if config.metrics_file and self.file is None:
            self.file = MetricsFileWriter(config.metrics_file)
            self.stop()  # a per-step record must include its step's execution: subscribe again, not lag-tolerant
        # Counters alone may count an execution when it finishes (queries settle first), as PyTorch/XLA's do.
        self.late_executions_ok = self.file is None
        return Sink.start(self)

    def on_event(self, event) -> None:
        records = self._records.records(event)
        if records:
            self.registry.count(records)
        if self.file is not None and type(event) is Step and not self.file.off:
            counters, metrics = self.registry.copy()
            self.file.write(event.step, report_text(counters, metrics, config.metrics_percentiles))


registry = Registry()
sink = MetricsSink(registry)
