"""Which way is better for a metric when two runs are compared."""

from __future__ import annotations

from xladev.schema.metric_names import counter_names, metric_names

# ---------------------------------------------------------------- comparisons

# Metrics and counters where less is better; everything else is compared without a verdict.
LOWER_IS_BETTER = frozenset({
    *metric_names("CompileTime"), *metric_names("ExecuteTime"), *metric_names("TransferFromDeviceTime"),
    *metric_names("TransferToDeviceTime"), *counter_names("UncachedCompile"), "DeviceDataCacheMiss",
    "TensorsGraphSize", "InboundData", "LazyTracing", "DeviceLockWait", "PersistentCacheMiss",
})


def metric_preference(name: str) -> str:
    """``lower`` when a smaller value is better (times, compiles, fallbacks), else ``neutral``."""
    if name in LOWER_IS_BETTER or name.startswith("aten::"):
        return "lower"
    return "neutral"
