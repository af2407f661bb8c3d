"""`xladev run` and its torch_xla alias: an unchanged PyTorch/XLA script trains, debugs and reports on xladev.

Real subprocesses of `xladev run` / `python -m xladev.run` for what the command does (the example trains
like xladev run directly, PT_XLA_DEBUG and XLA_METRICS_FILE work, a real torch_xla is never shadowed
silently, bad usage and the script's exit status); in-process tests of the alias's surface, with its
folder put on sys.path for the module only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from xladev.cli.run import ALIAS_DIR
from xladev.events import CauseKind
from xladev.sinks.pt_xla_debug.blocks import PT_XLA_CAUSES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "torch_xla_style" / "train.py"
STEPS = 30


def _xladev() -> list[str]:
    launcher = Path(sys.executable).parent / "xladev"
    return [str(launcher)] if launcher.exists() else [sys.executable, "-m", "xladev.cli.main"]


def _run(command: list[str], cwd: Path, timeout: int = 180, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PT_XLA_", "XLA_", "XLADEV_"))}
    environment.pop("PYTHONPATH", None)
    environment.update(env)
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)


def _blocks(debug_text: str) -> list[str]:
    """The Compilation Analysis blocks of a PT_XLA_DEBUG log, one text each."""
    return [b for b in debug_text.split("Compilation Analysis: " + "=" * 80) if "Compilation Cause" in b]


def _cause(block: str) -> str:
    lines = block.splitlines()
    return lines[[i for i, line in enumerate(lines) if "Compilation Cause" in line][0] + 1].split(":", 1)[1].strip()


# --- the example, through `xladev run` -------------------------------------------------------------------


def test_example_trains_as_xladev_does_with_debug_metrics_file_and_report(tmp_path):
    metrics_file = tmp_path / "metrics.txt"
    result = _run([*_xladev(), "run", str(EXAMPLE), "--steps", str(STEPS), "--metrics", "--save", "model.pt"],
                  tmp_path, PT_XLA_DEBUG_LEVEL="1", XLA_METRICS_FILE=str(metrics_file))
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout

    logged = [float(v) for v in re.findall(r"^step +\d+  loss ([0-9.]+)$", out, re.M)]
    first = float(re.search(r"^first loss ([0-9.]+)$", out, re.M).group(1))
    final = float(re.search(r"^final loss ([0-9.]+)$", out, re.M).group(1))
    assert len(logged) == 3 and logged == sorted(logged, reverse=True) and final < first * 0.9, out[:2000]

    # The same model and batches through xladev's own API (examples/mlp.py): float32-equal.
    sys.path.insert(0, str(ROOT))
    try:
        from examples.mlp import train
    finally:
        sys.path.remove(str(ROOT))
    direct = train("xla", STEPS, seed=0).losses
    assert first == pytest.approx(direct[0], rel=1e-6)
    assert final == pytest.approx(direct[-1], rel=1e-5)

    for name in ("Metric: CompileTime", "Metric: ExecuteTime", "Counter: MarkStep"):
        assert name in out
    blocks = _blocks(result.stderr)
    assert blocks and {_cause(b) for b in blocks} == {PT_XLA_CAUSES[CauseKind.DEVICE_LOADER]}, result.stderr[:3000]
    assert "Post Compilation Analysis" in result.stderr

    import torch

    state = torch.load(tmp_path / "model.pt")  # xm.save: CPU tensors
    assert state and all(t.device.type == "cpu" for t in state.values())

    assert metrics_file.read_text().count("[MetricsData; step=") == STEPS
    report = _run([*_xladev(), "report", str(metrics_file), "--format", "json"], tmp_path)
    assert report.returncode == 0, report.stderr
    summary = json.loads(report.stdout)["summary"]
    # One graph: the first step runs the steady program (SGD's momentum buffers exist before it).
    assert summary["steps"] == STEPS and summary["compiles"] == 1


# --- a script in the style of PyTorch/XLA's debug and metrics tests, through `python -m xladev.run` ---------


@pytest.fixture(scope="module")
def debug_cases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("debug")
    result = _run([sys.executable, "-m", "xladev.run", str(Path(__file__).with_name("debug_script.py")),
                   str(folder / "results.json")], folder,
                  PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(folder / "debug.txt"), XLADEV_GRAPH_GROWTH_WARNING="300")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((folder / "results.json").read_text())


@pytest.mark.parametrize("name,cause", [
    ("user_sync", PT_XLA_CAUSES[CauseKind.USER_MARK_STEP]),  # PyTorch/XLA's cause lines
    ("step_trace", PT_XLA_CAUSES[CauseKind.STEP_TRACE]),
    ("parallel_loader", PT_XLA_CAUSES[CauseKind.DEVICE_LOADER]),  # ten batches, one compile
])
def test_each_barrier_compiles_once_with_its_cause(debug_cases, name, cause):
    blocks = _blocks(debug_cases[name]["debug"])
    assert [_cause(b) for b in blocks] == [cause], debug_cases[name]["debug"]


def test_compile_syncs_before_and_after_the_function(debug_cases):
    case = debug_cases["compile_fn"]
    assert len(_blocks(case["debug"])) == 2 and case["matches_cpu"]  # the pending input's graph, then the function's


def test_value_reads_in_the_step_are_named(debug_cases):
    for name, kind in (("print_tensor", "print"), ("item_in_step", ".item()")):
        causes = [_cause(b) + b for b in _blocks(debug_cases[name]["debug"])]
        assert any("access tensor value" in c and kind in c for c in causes), debug_cases[name]["debug"]
    fixed = debug_cases["item_in_step_fixed"]
    assert fixed["closure_values"] == [48.0] and "access tensor value" not in fixed["debug"]


def test_pitfalls_are_diagnosed_through_the_alias(debug_cases):
    shapes = _blocks(debug_cases["dynamic_shapes"]["debug"])
    assert len(shapes) == 3 and "dim 0: 8 -> 9" in shapes[1] and "dim 0: 9 -> 10" in shapes[2]
    assert len(_blocks(debug_cases["dynamic_shapes_fixed"]["debug"])) == 1

    growing = debug_cases["missing_barrier"]
    assert any(w.startswith("Graph growing without a barrier") for w in growing["warnings"])
    assert "pt-xla-profiler: Graph growing without a barrier" in growing["debug"]
    assert not debug_cases["missing_barrier_fixed"]["warnings"]


def test_metrics_clear_and_count_again(debug_cases):
    case = debug_cases["metrics"]
    assert case["before"] and case["cleared"] == [None, 0] and case["after"]


def test_unsupported_import_and_child_processes(debug_cases):
    unsupported = debug_cases["unsupported_import"]
    assert unsupported["error"] == ["XladevError", "ImportError"]  # ours, and what `except ImportError` catches
    assert unsupported["message"].startswith("torch_xla.core.xla_model.send is not supported by xladev: ")
    child = debug_cases["child_process"]
    assert child["child_origin"] == child["own_origin"] == os.path.join(ALIAS_DIR, "torch_xla", "__init__.py")
