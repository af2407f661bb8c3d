"""PyTorch/XLA's auto-metrics analysis (the ``pt-xla-profiler:`` lines of ``PT_XLA_DEBUG=1``), with its
exact thresholds and wording."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from xladev.schema.counters import ITEM_COUNTER
from xladev.analysis.finding_model import (
    COMPILE_FREQUENCY_RATIO, COMPILE_TOO_SLOW_NS, EXECUTE_TOO_SLOW_NS, TRANSFER_FREQUENCY_RATIO, WARMUP_STEPS,
)


# ---------------------------------------------------------------- PyTorch/XLA's auto-metrics lines


def compile_too_frequent_message(compiles: int, steps: int) -> str | None:
    """PyTorch/XLA's ``CompileTime too frequent`` line: compiles/steps > 0.5 after 10 steps."""
    if steps <= WARMUP_STEPS or compiles / steps <= COMPILE_FREQUENCY_RATIO:
        return None
    return f"CompileTime too frequent: {compiles} counts during {steps} steps"


def transfer_too_frequent_message(transfers: int, steps: int, name: str = "TransferFromDeviceTime") -> str | None:
    """PyTorch/XLA's ``TransferFromDeviceTime too frequent`` line: ratio > 0.5, no warm-up."""
    if steps <= 0 or transfers / steps <= TRANSFER_FREQUENCY_RATIO:
        return None
    return f"{name} too frequent: {transfers} counts during {steps} steps"


def too_slow_message(metric: str, longest_ns: float, threshold_ns: float, formatted_longest: str) -> str | None:
    """PyTorch/XLA's ``<metric> too slow`` line when the longest sample exceeds ``threshold_ns``.

    ``formatted_longest`` is ``longest_ns`` printed as a metrics time: the caller formats it, so this
    module needs nothing from the report package.
    """
    if not longest_ns > threshold_ns:
        return None
    return (f"{metric} too slow: longest instance took {formatted_longest}. "
            "Please open a GitHub issue with the graph dump for our team to optimize.")


def fallback_ops(counters: Mapping[str, int]) -> list[str]:
    """The CPU-fallback ops in a counter map: ``aten::`` counters except ``.item()``'s, sorted."""
    return sorted(name for name, value in counters.items()
                  if "aten::" in name and name != ITEM_COUNTER and value)


def ops_not_lowered_message(op_names: Iterable[str]) -> str | None:
    """PyTorch/XLA's ``Op(s) not lowered`` line (its odd ``,  Please`` spacing included)."""
    names = sorted(set(op_names))
    if not names:
        return None
    return "Op(s) not lowered: " + "".join(f"{name}, " for name in names) + (
        " Please open a GitHub issue with the above op lowering requests.")


def auto_metrics_messages(*, steps: int, compiles: int, transfers: int, counters: Mapping[str, int],
                          longest_compile_ns: float = 0.0, longest_execute_ns: float = 0.0,
                          format_time=None) -> list[str]:
    """All lines PyTorch/XLA's auto-metrics analysis would print, without the prefix.

    Args:
      steps: the MarkStep counter.
      compiles: CompileTime's TotalSamples.
      transfers: TransferFromDeviceTime's TotalSamples.
      counters: every counter, for the unlowered-op line.
      longest_compile_ns: the longest compile in nanoseconds.
      longest_execute_ns: the longest execution in nanoseconds.
      format_time: formatter for durations (``xladev.schema.units.format_time_ns``); seconds with
        ``s`` when None.

    Returns:
      The messages in PyTorch/XLA's order; prepend PROFILER_PREFIX to print them as it does.
    """
    fmt = format_time or (lambda ns: f"{ns / 1e9:.3f}s")
    candidates = [
        compile_too_frequent_message(compiles, steps),
        transfer_too_frequent_message(transfers, steps),
        too_slow_message("CompileTime", longest_compile_ns, COMPILE_TOO_SLOW_NS, fmt(longest_compile_ns)),
        too_slow_message("ExecuteTime", longest_execute_ns, EXECUTE_TOO_SLOW_NS, fmt(longest_execute_ns)),
        ops_not_lowered_message(fallback_ops(counters)),
    ]
    return [line for line in candidates if line]
