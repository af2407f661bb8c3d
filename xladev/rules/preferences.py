"""Which way is better for a metric when two runs are compared."""

from __future__ import annotations

# ---------------------------------------------------------------- comparisons

# Metrics and counters where less is better; everything else is compared without a verdict.
LOWER_IS_BETTER = frozenset({
    "CompileTime", "ExecuteTime", "TransferFromDeviceTime", "TransferToDeviceTime", "TransferFromServerTime",
    "TransferToServerTime", "UncachedCompile", "CreateCompileHandles", "DeviceDataCacheMiss",
    "TensorsGraphSize", "InboundData", "LazyTracing", "DeviceLockWait", "PersistentCacheMiss",
})


def metric_preference(name: str) -> str:
    """``lower`` when a smaller value is better (times, compiles, fallbacks), else ``neutral``."""
    if name in LOWER_IS_BETTER or name.startswith("aten::"):
        return "lower"
    return "neutral"
