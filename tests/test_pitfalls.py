"""Each pitfall example shows its problem, and `--fixed` removes it."""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from xladev import analysis
from xladev.analysis import wall_time
from xladev.report import load

ROOT = Path(__file__).resolve().parents[1]
_COUNTS = re.compile(r"\[(broken|fixed)\] compiles: (\d+), steps: (\d+), device->host transfers: (\d+), CPU fallbacks: (\d+)")


def _run(name: str, *extra: str, log: Path | None = None, env: dict | None = None) -> dict:
    environ = {**os.environ, **(env or {})}
    if log is not None:
        environ["XLADEV_EVENT_LOG"] = str(log)
    result = subprocess.run([sys.executable, "-m", f"examples.pitfalls.{name}", *extra], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, env=environ)
    assert result.returncode == 0, result.stderr[-2000:]
    match = _COUNTS.search(result.stdout)
    assert match, result.stdout
    return {"compiles": int(match[2]), "steps": int(match[3]), "transfers": int(match[4]), "fallbacks": int(match[5]),
            "out": result.stdout, "rules": _rules(log) if log is not None else set()}


def _rules(log: Path) -> set[str]:
    report = load(str(log))
    return {f.rule for f in report.findings if f.rule not in analysis.ADVICE_RULES and f.severity != analysis.INFO}


# Each pitfall: what its counts show broken and fixed, and the finding the report gives the broken
# run, which the fix the report recommends (the example's --fixed) must make disappear. By default the
# pitfalls whose finding the demo's test does not show broken and fixed run; the others are in the slow sweep
# (the demo's test, tests/test_demo.py, covers recompilation and host transfers, each with its fix).
@pytest.mark.parametrize("name,check,finding", [
    pytest.param("dynamic_shapes", lambda b, f: b["compiles"] >= 8 and f["compiles"] <= 2, "recompilation",
                 marks=pytest.mark.slow),
    pytest.param("item_in_loop", lambda b, f: b["transfers"] >= 12 and f["transfers"] <= 4 and f["compiles"] <= 2,
                 "host-transfers", marks=pytest.mark.slow),
    ("unlowered_op", lambda b, f: b["fallbacks"] >= 24 and f["fallbacks"] == 0, "cpu-fallback"),
    pytest.param("scalar_constants", lambda b, f: b["compiles"] > f["compiles"] == 2, "recompilation",
                 marks=pytest.mark.slow),
    ("missing_barrier", lambda b, f: b["steps"] == 1 and f["steps"] >= 10, "graph-growing"),
    pytest.param("profiling_steptrace", lambda b, f: b["steps"] <= 2 and f["steps"] >= 9, "graph-growing",
                 marks=pytest.mark.slow),
])
def test_pitfall_and_its_fix(name, check, finding, tmp_path):
    # The two runs are separate processes: side by side, they take the time of one on two cores.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        broken_run = pool.submit(_run, name, log=tmp_path / "broken.jsonl")
        fixed_run = pool.submit(_run, name, "--fixed", log=tmp_path / "fixed.jsonl")
        broken, fixed = broken_run.result(), fixed_run.result()
    assert check(broken, fixed), (broken, fixed)
    assert finding in broken["rules"], (name, broken["rules"])
    assert not fixed["rules"], (name, "the fix left findings", fixed["rules"])


def test_persistent_cache_advice_is_followed_by_a_run_that_needs_none(tmp_path):
    """The persistent-cache advice is given when compiling dominates and the cache is off, and a restart
    with the cache on loads every graph from it and is not advised again."""
    cache = {"XLADEV_COMPILATION_CACHE": str(tmp_path / "cache")}
    _run("dynamic_shapes", "--fixed", log=tmp_path / "first.jsonl", env=cache)
    _run("dynamic_shapes", "--fixed", log=tmp_path / "again.jsonl", env=cache)
    first, again = load(str(tmp_path / "first.jsonl")), load(str(tmp_path / "again.jsonl"))
    for report in (first, again):
        breakdown = report.sources[0].time
        hits = report.sources[0].final.counters.get("PersistentCacheHit", 0)
        advised = "compile-time" in {f.rule for f in report.findings}
        assert advised == wall_time.compile_dominates(breakdown, hits), (breakdown.parts, hits)
    assert first.sources[0].final.counters.get("PersistentCacheMiss", 0) >= 1
    # Every graph of the restart came from the cache (no timing compared: that is a benchmark's job).
    counters = again.sources[0].final.counters
    assert counters.get("PersistentCacheHit", 0) >= 1 and counters.get("PersistentCacheMiss", 0) == 0
    assert "compile-time" not in {f.rule for f in again.findings}
