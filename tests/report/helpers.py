"""Shared helpers for the report tests: the real PyTorch/XLA fixtures, and hand-made report text."""

from __future__ import annotations

from pathlib import Path

import pytest

from xladev.schema import units

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "torch_xla"
SCENARIOS = ("healthy", "dynamic_shape", "fallback", "item_every_step")


def fixture_path(name: str) -> Path:
    """The path of a real PyTorch/XLA output file; skips the test when the fixtures are missing."""
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"fixture {path} not available")
    return path


def metric_block(name: str, samples: int, total: float, kind: str = units.TIME, *, rate: bool = True,
                 percentiles: dict[str, float] | None = None) -> str:
    """A ``Metric:`` block as torch_xla prints it, values formatted by xladev."""
    lines = [f"Metric: {name}", f"  TotalSamples: {samples}", f"  Accumulator: {units.format_kind(kind, total)}"]
    if rate:
        lines += [f"  ValueRate: {units.format_kind(kind, total / 2)} / second", f"  Rate: {samples / 2:g} / second"]
    values = percentiles if percentiles is not None else {"1%": total / max(samples, 1), "50%": total / max(samples, 1),
                                                          "99%": total / max(samples, 1)}
    lines.append("  Percentiles: " + "; ".join(f"{label}={units.format_kind(kind, value)}"
                                               for label, value in values.items()))
    return "\n".join(lines) + "\n"


def counter_block(name: str, value: int) -> str:
    """A ``Counter:`` block."""
    return f"Counter: {name}\n  Value: {value}\n"


def step_report(step: int, *, compiles: int, transfers: int = 0, items: int = 0, fallbacks: dict | None = None,
                graph_nodes: int = 50, extra_counters: dict | None = None) -> str:
    """A plausible full report after ``step`` + 1 steps of a training loop."""
    steps = step + 1
    text = metric_block("CompileTime", compiles, compiles * 2.5e8) if compiles else ""
    text += metric_block("ExecuteTime", steps, steps * 1.2e6)
    text += metric_block("TensorsGraphSize", steps, steps * graph_nodes, units.VALUE)
    if transfers:
        text += metric_block("TransferFromDeviceTime", transfers, transfers * 3e4)
    text += counter_block("CachedCompile", steps - compiles) if steps > compiles else ""
    text += counter_block("MarkStep", steps)
    text += counter_block("UncachedCompile", compiles) if compiles else ""
    if items:
        text += counter_block("aten::_local_scalar_dense", items)
    for name, value in (fallbacks or {}).items():
        text += counter_block(name, value)
    for name, value in (extra_counters or {}).items():
        text += counter_block(name, value)
    return text


def metrics_file(records: list[str], first_step: int = 0) -> str:
    """An XLA_METRICS_FILE: each report after a ``[MetricsData; step=N]`` line."""
    return "".join(f"[MetricsData; step={first_step + index}]\n{record}\n" for index, record in enumerate(records))


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    """Writes text (or bytes) to ``tmp_path / name`` and returns the path as a string."""
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)
