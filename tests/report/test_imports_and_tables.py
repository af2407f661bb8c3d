"""The report package stays light (no torch, jax or runtime), and `load` gives usable DataFrames."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd

from xladev.report import load

from tests.report.helpers import fixture_path

REPO = Path(__file__).resolve().parents[2]


def test_report_package_imports_neither_torch_nor_jax_nor_the_runtime():
    # The parent package `xladev/__init__.py` starts the runtime; load the report modules under an
    # empty `xladev` package so this checks only what the report code itself imports.
    script = textwrap.dedent(f"""
        import sys, types
        package = types.ModuleType("xladev"); package.__path__ = [{str(REPO / "xladev")!r}]
        sys.modules["xladev"] = package
        import xladev.rules, xladev.report, xladev.schema.units, xladev.cli.report
        from xladev.report import compare, document, jsonout, markup, terminal
        report = xladev.report.load({str(fixture_path("fallback.metrics.txt"))!r})
        jsonout.dumps(jsonout.report_json(report))
        terminal.render_terminal(document.report_document(report))
        loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "jax", "jaxlib")
                        or name.startswith("xladev.runtime"))
        print(loaded)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_dataframes():
    report = load([str(fixture_path("fallback.metrics.txt")), str(fixture_path("fallback.debug.txt"))])
    assert isinstance(report.metrics, pd.DataFrame)
    compile_time = report.metrics.set_index("name").loc["CompileTime"]
    assert compile_time["total_samples"] == 13 and compile_time["kind"] == "time"
    counters = report.counters.set_index("name")
    assert counters.loc["aten::nonzero", "category"] == "fallback" and counters.loc["aten::nonzero", "value"] == 24
    assert list(report.steps["steps"]) == list(range(1, 25))
    assert report.steps["aten::nonzero"].tolist() == list(range(1, 25))
    assert len(report.compile_events) == 13 and report.compile_events["site"].str.endswith(".py:22").sum() == 11
    sites = report.compile_sites.set_index("site")
    assert sites["executions"].sum() == 72
    causes = report.causes.set_index("cause")
    assert causes["compiles"].sum() == 13
    assert set(report.profiler_lines["kind"]) == {"CompileTime too frequent", "TransferFromDeviceTime too frequent",
                                                  "Op(s) not lowered"}
    assert report.fallback_sites["count"].tolist() == [48, 24, 24]
    assert set(report.percentiles["label"]) >= {"1%", "50%", "99%"}
