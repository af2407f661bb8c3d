"""Metric and counter names, old and new, mapped to the few numbers the diagnoses use.

Reports from different PyTorch/XLA eras name the same thing differently
(``TransferFromServerTime`` before ``TransferFromDeviceTime``, ``CachedSyncTensors`` before
``CachedCompile``, ``Xrt*`` on XRT). `canonical_numbers` reads whichever is present.
"""

from __future__ import annotations

from collections.abc import Mapping

from xladev.analysis import ITEM_COUNTER
from xladev.schema.metric_names import COUNTER_ALIASES, METRIC_ALIASES

SAMPLES = "samples"
ACCUMULATOR = "accumulator"
COUNTER = "counter"

# canonical column -> sources tried in order: (what, name).
CANONICAL_SOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    "steps": ((COUNTER, "MarkStep"),),
    # CompileTime's samples count compiles; where a report lacks the metric, the counters do (XRT's metric last).
    "compiles": ((SAMPLES, "CompileTime"),) + tuple((COUNTER, n) for n in COUNTER_ALIASES["UncachedCompile"])
                + tuple((SAMPLES, n) for n in METRIC_ALIASES["CompileTime"][1:]),
    "cached_compiles": tuple((COUNTER, n) for n in COUNTER_ALIASES["CachedCompile"]),
    "executions": ((SAMPLES, "ExecuteTime"),) + tuple((COUNTER, n) for n in COUNTER_ALIASES["ExecuteComputation"])
                  + tuple((SAMPLES, n) for n in METRIC_ALIASES["ExecuteTime"][1:]),
    "transfers_from_device": tuple((SAMPLES, n) for n in METRIC_ALIASES["TransferFromDeviceTime"]),
    "transfers_to_device": tuple((SAMPLES, n) for n in METRIC_ALIASES["TransferToDeviceTime"]),
    "item_calls": ((COUNTER, ITEM_COUNTER),),
    "graph_syncs": ((SAMPLES, "TensorsGraphSize"),),
    "graph_nodes": ((ACCUMULATOR, "TensorsGraphSize"),),
    "cache_misses": ((COUNTER, "DeviceDataCacheMiss"),),
    "compile_time_ns": tuple((ACCUMULATOR, n) for n in METRIC_ALIASES["CompileTime"]),
    "execute_time_ns": tuple((ACCUMULATOR, n) for n in METRIC_ALIASES["ExecuteTime"]),
}
CANONICAL_COLUMNS = tuple(CANONICAL_SOURCES) + ("fallback_calls",)

# Names whose values the per-step series needs (bytes, as the scanner sees them).
SERIES_COUNTERS = frozenset(name.encode() for sources in CANONICAL_SOURCES.values()
                            for what, name in sources if what == COUNTER)
SERIES_SAMPLES = frozenset(name.encode() for sources in CANONICAL_SOURCES.values()
                           for what, name in sources if what == SAMPLES)
SERIES_ACCUMULATORS = frozenset(name.encode() for sources in CANONICAL_SOURCES.values()
                                for what, name in sources if what == ACCUMULATOR)

# Core names shown first in tables; the short report of torch_xla shows these.
KEY_METRICS = ("CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime",
               "TensorsGraphSize", "OutboundData", "InboundData")
KEY_COUNTERS = ("MarkStep", "CachedCompile", "UncachedCompile", "DeviceDataCacheMiss")


def is_fallback_counter(name: str) -> bool:
    """True for ``aten::`` counters other than ``.item()``'s: ops run on the CPU fallback."""
    return "aten::" in name and name != ITEM_COUNTER


def counter_category(name: str) -> str:
    """``fallback``, ``item``, ``lazy`` (``xla::`` ops) or ``runtime`` for a counter name."""
    if name == ITEM_COUNTER:
        return "item"
    if "aten::" in name:
        return "fallback"
    if name.startswith("xla::"):
        return "lazy"
    return "runtime"


def canonical_numbers(counters: Mapping[str, float], samples: Mapping[str, float],
                      accumulators: Mapping[str, float]) -> dict[str, float]:
    """The canonical numbers of one report, whatever era its names come from.

    Args:
      counters: counter name to value.
      samples: metric name to TotalSamples.
      accumulators: metric name to Accumulator (base units).

    Returns:
      A dict with every key of CANONICAL_COLUMNS; 0 for what the report does not have, since a
      counter or metric appears only once it is first incremented.
    """
    tables = {COUNTER: counters, SAMPLES: samples, ACCUMULATOR: accumulators}
    numbers: dict[str, float] = {}
    for column, sources in CANONICAL_SOURCES.items():
        value = 0.0
        for what, name in sources:
            found = tables[what].get(name)
            if found is not None:
                value = found
                break
        numbers[column] = value
    numbers["fallback_calls"] = float(sum(value for name, value in counters.items() if is_fallback_counter(name)))
    return numbers
