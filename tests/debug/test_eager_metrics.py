"""Eager debug mode is timed as PyTorch/XLA's eager mode: `EagerOpCompileTime`/`EagerOpExecuteTime`, never
`CompileTime`/`ExecuteTime`, and no analysis blocks for its one-op graphs."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import torch, xladev, xladev.debug.metrics as met
d = xladev.device()
t1 = torch.tensor(156.0, device=d)
t2 = t1 + 100
t3 = t2 * 2
xladev.wait_device_ops()
xladev.mark_step()  # nothing left to run: a no-op
names = met.metric_names()
print("eager", met.metric_data("EagerOpCompileTime")[0], met.metric_data("EagerOpExecuteTime")[0])
print("graph", "CompileTime" in names, "ExecuteTime" in names, t3.item())
"""


def test_eager_debug_mode_counts_eager_metrics_and_writes_no_analysis_blocks():
    env = dict(os.environ, XLA_USE_EAGER_DEBUG_MODE="1", PT_XLA_DEBUG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    eager = next(line.split() for line in out.stdout.splitlines() if line.startswith("eager"))
    graph = next(line.split() for line in out.stdout.splitlines() if line.startswith("graph"))
    assert int(eager[1]) >= 2 and int(eager[2]) >= 2  # one per op: the add and the mul
    assert graph[1:3] == ["False", "False"] and float(graph[3]) == 512.0
    assert "Compilation Analysis" not in out.stderr and "Execution Analysis" not in out.stderr
