"""The names of PyTorch/XLA's metrics and counters across its eras and modes: one table, which every reader and
rule asks.

Reports from different eras name the same thing differently (``TransferFromServerTime`` before
``TransferFromDeviceTime``, ``CachedSyncTensors`` before ``CachedCompile``, ``Xrt*`` on XRT). In SPMD mode every
graph runs over all devices, and PyTorch/XLA times and counts those runs as ``ExecuteReplicatedTime`` and
``ExecuteReplicated`` instead of ``ExecuteTime`` and ``ExecuteComputation`` (a run is in one or the other).
"""

from __future__ import annotations

# Each metric and counter the diagnoses read -> its names in every era, newest first.
METRIC_ALIASES: dict[str, tuple[str, ...]] = {
    "CompileTime": ("CompileTime", "XrtCompile"),
    "ExecuteTime": ("ExecuteTime", "ExecuteReplicatedTime", "XrtExecute"),
    "TransferToDeviceTime": ("TransferToDeviceTime", "TransferToServerTime"),
    "TransferFromDeviceTime": ("TransferFromDeviceTime", "TransferFromServerTime"),
}
COUNTER_ALIASES: dict[str, tuple[str, ...]] = {
    "UncachedCompile": ("UncachedCompile", "CreateCompileHandles"),
    "CachedCompile": ("CachedCompile", "CachedSyncTensors"),
    "ExecuteComputation": ("ExecuteComputation", "ExecuteReplicated"),
}


def metric_names(name: str) -> tuple[str, ...]:
    """Every name of metric `name` (its current name), newest first; `(name,)` when it never changed."""
    return METRIC_ALIASES.get(name, (name,))


def counter_names(name: str) -> tuple[str, ...]:
    """Every name of counter `name` (its current name), newest first; `(name,)` when it never changed."""
    return COUNTER_ALIASES.get(name, (name,))
