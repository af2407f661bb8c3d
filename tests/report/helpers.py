"""Shared helpers for the report tests: the real PyTorch/XLA fixtures, hand-made report text, and small scripts
run for real under xladev with every output on."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path


from tests.source_lines import line_of
from xladev.schema import units

ROOT = Path(__file__).resolve().parents[2]
# Real PyTorch/XLA 2.9 outputs, kept in the repository so that every checkout (CI included) tests against them.
FIXTURES = ROOT / "tests" / "fixtures" / "torch_xla"
SCENARIOS = ("healthy", "dynamic_shape", "fallback", "item_every_step")
# mistakes.py's runs (12 steps each); no_barrier has no metrics file: PyTorch/XLA writes XLA_METRICS_FILE at a sync.
MISTAKES = ("no_barrier", "branch_on_loss", "print_loss", "scalar_lr", "slice_length", "healthy_loader",
            "healthy_compile")
# spmd.py's run: the same model in PyTorch/XLA's SPMD mode over 4 devices.
SPMD_RUNS = ("spmd_data",)
REAL_RUNS = SCENARIOS + MISTAKES + SPMD_RUNS


def fixture_path(name: str) -> Path:
    """The path of a real PyTorch/XLA output file (tests/fixtures/torch_xla).

    Raises:
      FileNotFoundError: no such fixture (a test must never pass by skipping a fixture it names).
    """
    path = FIXTURES / name
    if not path.exists():
        raise FileNotFoundError(f"fixture {path} does not exist")
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


def compiled_model_script(features: int, outputs: int, batch: int, loop: str) -> str:
    """A script training a `torch.compile(backend="xladev")` Linear model with SGD: its set-up, then `loop`
    (which sees `device`, `model`, `compiled`, `optimizer` and a batch `x`)."""
    return textwrap.dedent(f"""
        import torch
        import xladev

        torch.manual_seed(0)
        device = xladev.device()
        model = torch.nn.Linear({features}, {outputs}).to(device)
        compiled = torch.compile(model, backend="xladev")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn({batch}, {features}).to(device)
    """) + textwrap.dedent(loop)


@dataclasses.dataclass
class ScriptRun:
    """What a script run under xladev left behind (paths), and what it printed."""

    script: Path
    events: Path
    debug: Path
    metrics: Path
    stdout: Path
    stderr: str

    def line(self, marker: str) -> str:
        """``script.py:N`` of the script's line holding `marker`."""
        return f"{self.script.name}:{line_of(str(self.script), marker)}"


def run_script(folder: Path, name: str, source: str, *, alias: bool = False, timeout: int = 300) -> ScriptRun:
    """Runs a small script for real with every output on: XLADEV_EVENT_LOG, PT_XLA_DEBUG_LEVEL=2 into a file,
    XLA_METRICS_FILE; stdout kept in a file (a report it prints is an input too).

    Args:
      folder: where the script and its outputs go.
      name: the script's file name.
      source: its text (dedented here).
      alias: run it as a PyTorch/XLA script, under ``python -m xladev.run`` (torch_xla is xladev's alias).
      timeout: seconds before the run is failed.

    Returns:
      The outputs' paths.
    """
    script = folder / name
    script.write_text(textwrap.dedent(source))
    stem = script.stem
    run = ScriptRun(script, folder / f"{stem}.events.jsonl", folder / f"{stem}.debug.txt",
                    folder / f"{stem}.metrics.txt", folder / f"{stem}.stdout.txt", "")
    env = {**os.environ, "XLADEV_EVENT_LOG": str(run.events), "PT_XLA_DEBUG_LEVEL": "2",
           "PT_XLA_DEBUG_FILE": str(run.debug), "XLA_METRICS_FILE": str(run.metrics)}
    command = [sys.executable, "-m", "xladev.run", str(script)] if alias else [sys.executable, str(script)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    run.stdout.write_text(result.stdout)
    run.stderr = result.stderr
    return run
