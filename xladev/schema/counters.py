"""The one table of record → counter and metric updates, named as PyTorch/XLA's metrics name them.

The in-process metrics registry (`xladev.sinks.metrics_registry`), the report's event-log reader and the
TUI all count through `updates()`, so a log read back gives the counters the run had in memory.

    for update in updates(record):
        if update.kind == COUNT: counters[update.name] += update.value
        else: metric(update.name, update.kind).add(update)   # one sample, or a bulk of them
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from xladev.schema import records as r
from xladev.schema.units import BYTES, COUNT, TIME, VALUE

# Device→host reads PyTorch/XLA counts as the op performing them.
SCALAR_READS = frozenset({".item()", "bool() in control flow", "float()", "int()", "used as an index"})
ITEM_COUNTER = "aten::_local_scalar_dense"
# Device tensors made and freed (an ops record's `tensors_created`, `tensors_destroyed`).
TENSORS_CREATED_COUNTER = "CreateXlaTensor"
TENSORS_DESTROYED_COUNTER = "DestroyXlaTensor"


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


# Increments by one are the same every time: made once (the registry counts every event of a run).
_UNCACHED_COMPILE, _COMPILE_HANDLES, _EXECUTE_GRAPH, _CACHED_COMPILE = (
    _count("UncachedCompile"), _count("CreateCompileHandles"), _count("ExecuteGraph"), _count("CachedCompile"))
_EXECUTE_REPLICATED = _count("ExecuteReplicated")
_VALUE_ACCESS_SYNC, _FALLBACK_SYNC, _ITEM = _count("ValueAccessSync"), _count("FallbackSync"), _count(ITEM_COUNTER)
_PERSISTENT = {True: _count("PersistentCacheHit"), False: _count("PersistentCacheMiss")}
# PyTorch/XLA counts a dynamo graph's inputs that needed a sync under this name (a counter despite "Time").
_CAUSE_SYNCS = {"VALUE_ACCESS": (_VALUE_ACCESS_SYNC,), "FALLBACK": (_FALLBACK_SYNC,),
                "DYNAMO_INPUTS": (_count("DynamoSyncInputExecuteTime"),)}
_DYNAMO_EXTRACT = _count("DynamoExtractCompiledGraph")
_OP_COUNTERS: dict[str, str] = {}  # aten::add -> xla::add, PyTorch/XLA's name for recorded ops

# PyTorch/XLA counts an op under the name of its C++ function, which functionalization and its codegen
# give to the ops below: a view op reaches it as its `_copy` twin (with `_symint` where its signature has
# symbolic sizes), a factory as its `_symint` function, `fill_`/`zero_` in place. Every other op keeps its
# ATen base name.
_PT_XLA_OP_NAMES = {
    "t": "t_copy", "view": "view_copy_symint", "expand": "expand_copy_symint", "permute": "permute_copy",
    "transpose": "transpose_copy", "unsqueeze": "unsqueeze_copy", "squeeze": "squeeze_copy",
    "select": "select_copy", "slice": "slice_copy", "split": "split_copy",
    "split_with_sizes": "split_with_sizes_copy", "unbind": "unbind_copy", "diagonal": "diagonal_copy",
    "as_strided": "as_strided_copy", "alias": "alias_copy", "view_as_real": "view_as_real_copy",
    "view_as_complex": "view_as_complex_copy", "empty": "empty_symint", "empty_strided": "empty_strided_symint",
    "new_empty_strided": "new_empty_strided_symint", "fill": "fill_", "zero": "zero_",
}


def _op_counter(name: str) -> str:
    counter = _OP_COUNTERS.get(name)
    if counter is None:
        base = str(name).split("::", 1)[-1]
        counter = "xla::" + _PT_XLA_OP_NAMES.get(base, base)
        _OP_COUNTERS[name] = counter
    return counter


def _ops(rec: r.Ops) -> list[Update]:
    out = [Update(_op_counter(name), COUNT, int(count)) for name, count in rec.counts.items()]
    if rec.tracing_samples:
        out.append(Update("LazyTracing", TIME, sum(rec.tracing_samples), len(rec.tracing_samples),
                          rec.tracing_samples))
    elif rec.tracing_count:  # read from a log: the count and total, not each sample
        out.append(Update("LazyTracing", TIME, rec.tracing_ns, rec.tracing_count))
    if rec.tensors_created:
        out.append(_count(TENSORS_CREATED_COUNTER, rec.tensors_created))
    if rec.tensors_destroyed:
        out.append(_count(TENSORS_DESTROYED_COUNTER, rec.tensors_destroyed))
    return out


# Eager debug mode's one-op graphs are timed as PyTorch/XLA's eager mode times them, not as graphs.
_EAGER = "EAGER_DEBUG"


def _compile(rec: r.Compile) -> tuple[Update, ...]:
    name = "EagerOpCompileTime" if rec.cause.get("kind") == _EAGER else "CompileTime"
    out = (Update(name, TIME, rec.compile_ns), _UNCACHED_COMPILE, _COMPILE_HANDLES)
    if rec.cause.get("kind") == "DYNAMO_COMPILE" and rec.cause.get("detail") != r.DYNAMO_NEW_SHAPES:
        out += (_DYNAMO_EXTRACT,)  # a graph TorchDynamo handed over, compiled
    if rec.persistent_cache_hit is not None:
        out += (_PERSISTENT[bool(rec.persistent_cache_hit)],)
    if rec.donated is not None and name == "CompileTime":  # PyTorch/XLA samples every graph compile, 0 included
        out += (Update("InputOutputAliasCount", VALUE, rec.donated),)
    return out


def _execute(rec: r.Execute) -> tuple[Update, ...]:
    if rec.devices and rec.devices > 1:  # SPMD: PyTorch/XLA times and counts a run over several devices apart
        name, counted = "ExecuteReplicatedTime", (_EXECUTE_REPLICATED,)
    else:
        name, counted = ("EagerOpExecuteTime" if rec.cause.get("kind") == _EAGER else "ExecuteTime"), ()
    out = (Update(name, TIME, rec.execute_ns), Update("TensorsGraphSize", VALUE, rec.nodes), _EXECUTE_GRAPH, *counted)
    if rec.cached:
        out += (_CACHED_COMPILE,)
    if rec.unwrap_ns is not None:  # logs written before these were timed have none
        out += (Update("UnwrapXlaData", TIME, rec.unwrap_ns), Update("WrapXlaData", TIME, rec.wrap_ns or 0),
                Update("DeviceLockWait", TIME, rec.lock_wait_ns or 0))
    return out + (_count("CreateDataHandles", rec.outputs),) + _CAUSE_SYNCS.get(rec.cause.get("kind"), ())


def _transfer(rec: r.Transfer) -> tuple[Update, ...]:
    if rec.dir == "to_device":  # PyTorch/XLA times each upload twice: the copy, and the conversion to device data
        return (Update("TransferToDeviceTime", TIME, rec.ns), Update("TensorToData", TIME, rec.ns),
                Update("OutboundData", BYTES, rec.bytes), _count("CreateDataHandles", rec.count))
    out = (Update("TransferFromDeviceTime", TIME, rec.ns), Update("InboundData", BYTES, rec.bytes))
    return out + (_ITEM,) if rec.kind in SCALAR_READS else out


_MARK_STEP, _CACHE_MISS = _count("MarkStep"), _count("DeviceDataCacheMiss")
_COMPILE_FAILED, _EXECUTE_FAILED = _count("CompileFailed"), _count("ExecuteFailed")
_GRAPH_BREAK, _GUARD_FAILURE = _count("DynamoGraphBreak"), _count("DynamoGuardFailure")

def _collective(rec: r.Collective) -> tuple[Update, ...]:
    # xladev's own names (PyTorch/XLA counts collectives only as the ops xla::all_reduce...): the
    # collectives a rank ran, what they moved, their graphs' run time, and the wait for the other ranks.
    return (_count("CollectiveOps", rec.count), Update("CollectiveBytes", BYTES, rec.bytes),
            Update("CollectiveTime", TIME, rec.ns), Update("CollectiveWaitTime", TIME, rec.wait_ns))


def _nothing(rec: r.Record) -> tuple[Update, ...]:
    return ()


# Every record kind has its entry (`_nothing` for those that count nothing): a kind added without one fails
# tests/schema/test_record_kinds.py.
TABLE: dict[type, Callable[[r.Record], Sequence[Update]]] = {
    r.Header: _nothing, r.GraphText: _nothing, r.CompileStart: _nothing, r.GraphGrowing: _nothing,
    r.MemoryGrowing: _nothing, r.Profile: _nothing, r.End: _nothing,
    r.MetricsReport: _nothing,  # the counts themselves, not increments: the fold takes them whole
    r.Ops: _ops,
    r.Compile: _compile,
    r.Execute: _execute,
    r.Transfer: _transfer,
    # an op the input does not name has no counter of its own
    r.Fallback: lambda rec: (_count(rec.op, rec.calls),) if rec.op != r.Fallback.UNKNOWN_OP else (),
    r.CacheMiss: lambda rec: (_CACHE_MISS,),
    r.CompileFailed: lambda rec: (_COMPILE_FAILED,),
    r.ExecuteFailed: lambda rec: (_EXECUTE_FAILED,),
    r.Step: lambda rec: (_MARK_STEP,),
    r.GraphBreak: lambda rec: (_GRAPH_BREAK,),
    r.DynamoRecompile: lambda rec: (_GUARD_FAILURE,),
    r.Collective: _collective,
    r.RankLost: lambda rec: (_count("RankLost"),),
}


def updates(record: r.Record) -> Sequence[Update]:
    """The counter and metric changes one record makes (none for headers, graph texts, ends...)."""
    handler = TABLE.get(type(record))
    return handler(record) if handler is not None else ()
