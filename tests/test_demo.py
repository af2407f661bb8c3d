"""`make demo`'s script: the broken run's two problems are named, the fixed run is reported healthy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_names_both_problems_then_reports_the_fix_healthy():
    env = dict(os.environ, XLADEV_DEMO_STEPS="13", XLADEV_DEMO_LAYERS="1", COLUMNS="100")
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    broken, fixed = out.split("=== 4/4", 1)
    # the analysis names the changed input dimension and the .item() line
    assert re.search(r"Recompilation Cause\n.*\n.*- input \d+, created at main@demo_train.py:\d+: shape s64\[8,\d+\] -> "
                     r"s64\[8,\d+\] \(dim 1: \d+ -> \d+\)", broken)
    assert re.search(r"hot spot: \.item\(\) at demo_train.py:\d+", broken)
    # the report flags both problems
    assert "ERROR recompilation" in broken and "Recompiles every step" in broken
    assert "WARNING host-transfers" in broken and "from .item()" in broken
    # and calls the fixed run healthy
    assert "HEALTHY" in fixed and "OK healthy" in fixed and "ERROR" not in fixed
    assert re.search(r"\[ *\d+\.\d s\] step 12", broken)  # each step shown as it ran, with the time
    assert "takes 2 to 3 minutes" in out
    assert len(out.splitlines()) < 360  # two reports and a line per training step
