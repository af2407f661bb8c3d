"""The one table of record → counter and metric updates, named as PyTorch/XLA's metrics name them.

The in-process metrics registry (`xladev.sinks.metrics`), the report's event-log reader and the
TUI all count through `updates()`, so a log read back gives the counters the run had in memory.

    for update in updates(record):
        if update.kind == COUNT: counters[update.name] += update.value
        else: metric(update.name, update.kind).add(update)   # one sample, or a bulk of them
"""

from __future__ import annotations

from typing import Callable, Iterator, NamedTuple

from xladev.schema import records as r
from xladev.schema.units import BYTES, COUNT, TIME, VALUE

# Device→host reads PyTorch/XLA counts as the op performing them.
SCALAR_READS = frozenset({".item()", "bool() in control flow", "float()", "int()", "used as an index"})
ITEM_COUNTER = "aten::_local_scalar_dense"


class Update(NamedTuple):
    """One change: a counter increment (`kind` COUNT) or metric samples.

    Attributes:
      name: the counter or metric name.
      kind: COUNT, or the metric's kind (TIME, BYTES, VALUE).
      value: the increment, or the sum of the samples.
      samples: how many samples `value` sums (1: one sample of `value`).
      values: the samples themselves when known (then `value` is their sum).
    """

    name: str
    kind: str
    value: float
    samples: int = 1
    values: tuple | list | None = None


def _count(name: str, amount: int = 1) -> Update:
    return Update(name, COUNT, amount)


def _ops(rec: r.Ops) -> Iterator[Update]:
    for name, count in rec.counts.items():
        yield _count("xla::" + str(name).split("::", 1)[-1], int(count))
    if rec.tracing_samples:
        yield Update("LazyTracing", TIME, sum(rec.tracing_samples), len(rec.tracing_samples), rec.tracing_samples)
    elif rec.tracing_count:  # read from a log: the count and total, not each sample
        yield Update("LazyTracing", TIME, rec.tracing_ns, rec.tracing_count)


def _compile(rec: r.Compile) -> Iterator[Update]:
    yield Update("CompileTime", TIME, rec.compile_ns)
    yield _count("UncachedCompile")
    yield _count("CreateCompileHandles")
    if rec.persistent_cache_hit is not None:
        yield _count("PersistentCacheHit" if rec.persistent_cache_hit else "PersistentCacheMiss")


def _execute(rec: r.Execute) -> Iterator[Update]:
    yield Update("ExecuteTime", TIME, rec.execute_ns)
    yield Update("TensorsGraphSize", VALUE, rec.nodes)
    yield _count("ExecuteGraph")
    if rec.cached:
        yield _count("CachedCompile")
    yield _count("CreateDataHandles", rec.outputs)
    kind = rec.cause.get("kind")
    if kind == "VALUE_ACCESS":
        yield _count("ValueAccessSync")
    elif kind == "FALLBACK":
        yield _count("FallbackSync")


def _transfer(rec: r.Transfer) -> Iterator[Update]:
    if rec.dir == "to_device":
        yield Update("TransferToDeviceTime", TIME, rec.ns)
        yield Update("OutboundData", BYTES, rec.bytes)
        yield _count("CreateDataHandles", rec.count)
        return
    yield Update("TransferFromDeviceTime", TIME, rec.ns)
    yield Update("InboundData", BYTES, rec.bytes)
    if rec.kind in SCALAR_READS:
        yield _count(ITEM_COUNTER)


TABLE: dict[type, Callable[[r.Record], Iterator[Update]]] = {
    r.Ops: _ops,
    r.Compile: _compile,
    r.Execute: _execute,
    r.Transfer: _transfer,
    r.Fallback: lambda rec: iter((_count(rec.op),)),
    r.CacheMiss: lambda rec: iter((_count("DeviceDataCacheMiss"),)),
    r.CompileFailed: lambda rec: iter((_count("CompileFailed"),)),
    r.Step: lambda rec: iter((_count("MarkStep"),)),
}


def updates(record: r.Record) -> Iterator[Update]:
    """The counter and metric changes one record makes (none for headers, graph texts, ends...)."""
    handler = TABLE.get(type(record))
    return handler(record) if handler is not None else iter(())
