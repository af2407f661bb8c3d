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


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    # The real, installed package in a fresh interpreter (nothing of this test process leaks in).
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO,
                          timeout=60)


_HEAVY = ("sorted(name for name in sys.modules if name.split('.')[0] in ('torch', 'jax', 'jaxlib') "
          "or name.startswith(('xladev.runtime', 'xladev.sinks', 'xladev.events')))")


def test_import_xladev_report_loads_neither_torch_nor_jax():
    result = _fresh_python(f"import sys, xladev.report; print({_HEAVY})")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_whole_report_loads_neither_torch_nor_jax_nor_the_runtime():
    result = _fresh_python(f"""
        import sys
        import xladev, xladev.analysis, xladev.report, xladev.schema, xladev.cli.report
        from xladev.report import compare, document, jsonout, markup, terminal
        report = xladev.report.load({str(fixture_path("fallback.metrics.txt"))!r})
        jsonout.render_json(document.report_document(report))
        terminal.render_terminal(document.report_document(report))
        print({_HEAVY})
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_import_xladev_is_lazy_and_its_public_names_start_the_runtime():
    result = _fresh_python(f"""
        import sys
        import xladev
        before = {_HEAVY}
        assert "device" in xladev.__all__ and "device" in dir(xladev)
        import torch
        t = torch.ones(2, device=xladev.device()) * 2
        xladev.mark_step()
        print(before, t.cpu().tolist(), "xladev.runtime.device" in sys.modules)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] [2.0, 2.0] True"


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
