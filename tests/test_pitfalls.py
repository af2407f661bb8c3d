"""Each pitfall example shows its problem, and `--fixed` removes it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_COUNTS = re.compile(r"\[(broken|fixed)\] compiles: (\d+), steps: (\d+), device->host transfers: (\d+), CPU fallbacks: (\d+)")


def _run(name: str, *extra: str) -> dict:
    result = subprocess.run([sys.executable, "-m", f"examples.pitfalls.{name}", *extra], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    match = _COUNTS.search(result.stdout)
    assert match, result.stdout
    return {"compiles": int(match[2]), "steps": int(match[3]), "transfers": int(match[4]), "fallbacks": int(match[5]),
            "out": result.stdout}


@pytest.mark.parametrize("name,check", [
    ("dynamic_shapes", lambda b, f: b["compiles"] >= 8 and f["compiles"] <= 2),
    ("item_in_loop", lambda b, f: b["transfers"] >= 12 and f["transfers"] <= 4 and f["compiles"] <= 2),
    ("unlowered_op", lambda b, f: b["fallbacks"] >= 24 and f["fallbacks"] == 0),
    ("scalar_constants", lambda b, f: b["compiles"] > f["compiles"] == 2),
    ("missing_barrier", lambda b, f: b["steps"] == 1 and f["steps"] >= 10),
    ("profiling_steptrace", lambda b, f: b["steps"] <= 2 and f["steps"] >= 9),
])
def test_pitfall_and_its_fix(name, check):
    broken, fixed = _run(name), _run(name, "--fixed")
    assert check(broken, fixed), (broken, fixed)
