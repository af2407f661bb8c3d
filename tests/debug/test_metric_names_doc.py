"""docs/metrics.md names every counter and metric: each one xladev can emit, and each one in real PyTorch/XLA reports."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import torch
import torch.nn as nn

import xladev
import xladev.debug.metrics as met
from tests.report.helpers import FIXTURES, REAL_RUNS
from xladev.schema import counters

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
_FIRST_CELL = re.compile(r"^\|([^|\n]*)\|", re.M)
_BACKTICKED = re.compile(r"`([^`]+)`")
# A counter or metric name as a string literal: CamelCase (CompileTime, MarkStep) or an op counter.
_NAME_LITERAL = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+|(?:aten|xla)::\w[\w.]*")
# Op counters are one per op: the docs name them by pattern, beside the ones PyTorch/XLA's reports show.
_OP_PATTERNS = {"xla": "xla::<op>", "aten": "aten::<op>.<overload>"}


def documented() -> set[str]:
    """The names in the first column of every table in docs/metrics.md."""
    names: set[str] = set()
    for cell in _FIRST_CELL.findall(DOC.read_text()):
        names.update(_BACKTICKED.findall(cell))
    return names


def literal_names() -> set[str]:
    """The counter and metric names written out in xladev/schema/counters.py, the table of every update."""
    tree = ast.parse(inspect.getsource(counters))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and _NAME_LITERAL.fullmatch(node.value)}


def emitted_by_training(dev) -> set[str]:
    """Every counter and metric name a couple of real training steps and one value read produce."""
    xladev.mark_step()
    met.clear_all()
    torch.manual_seed(0)
    model = nn.Linear(3, 2).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        loss = model(torch.ones(4, 3, device=dev)).sum()
        loss.backward()
        opt.step()
        xladev.mark_step()
    loss.item()
    return set(met.counter_names()) | set(met.metric_names())


def test_every_name_xladev_can_emit_is_documented(dev):
    names = documented()
    literal = literal_names()
    assert {"CompileTime", "ExecuteTime", "MarkStep", "ExecuteGraph", "aten::_local_scalar_dense"} <= literal
    emitted = emitted_by_training(dev)
    assert {"CompileTime", "CachedCompile", "TransferFromDeviceTime", "aten::_local_scalar_dense",
            "xla::addmm"} <= emitted, emitted

    missing = sorted(literal - names)
    for name in sorted(emitted - literal):
        namespace = name.split("::", 1)[0] if "::" in name else None
        if name not in names and _OP_PATTERNS.get(namespace) not in names:
            missing.append(name)
    assert not missing, f"docs/metrics.md does not list {missing}"


def test_every_name_in_real_torch_xla_reports_is_documented():
    # no_barrier never synced, so PyTorch/XLA wrote no XLA_METRICS_FILE: its stdout holds its report.
    paths = [FIXTURES / f"{scenario}.{kind}.txt" for scenario in REAL_RUNS for kind in ("metrics", "stdout")
             if (scenario, kind) != ("no_barrier", "metrics")]
    found: set[str] = set()
    for path in paths:
        found.update(re.findall(r"^(?:Counter|Metric): (\S+)$", path.read_text(), re.M))
    assert {"CompileTime", "DeviceLockWait", "xla::t_copy", "aten::nonzero"} <= found
    missing = sorted(found - documented())
    assert not missing, f"docs/metrics.md does not list {missing}"
