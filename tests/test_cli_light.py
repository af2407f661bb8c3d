"""The `xladev` command reads files without importing the runtime (torch, jax)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROBE = """
import sys, xladev_cli
sys.argv = ["xladev"] + sys.argv[1:]
code = xladev_cli.main()
print("RUNTIME" if any(m in sys.modules for m in ("torch", "jax")) else "LIGHT", code)
"""


def _run(*args, **env):
    return subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env))


def test_report_and_diff_do_not_import_torch_or_jax(tmp_path):
    # Regression: `import xladev` started the runtime, so `xladev report` took seconds and broke
    # whenever the runtime or a debug variable did.
    report = tmp_path / "m.txt"
    report.write_text("Metric: CompileTime\n  TotalSamples: 1\n  Accumulator: 001ms000.000us\n"
                      "  Percentiles: 50%=001ms000.000us\nCounter: MarkStep\n  Value: 3\n")
    result = _run("report", str(report), "--width", "80", PT_XLA_DEBUG_LEVEL="abc")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "LIGHT 0"
    result = _run("diff", "--file", str(tmp_path / "missing.txt"))
    assert result.stdout.strip().splitlines()[-1] == "LIGHT 2"


@pytest.mark.parametrize("imports", ["import torch, xladev", "import xladev, torch",
                                     "import xladev; import torch.nn; import torch"])
def test_import_xladev_registers_the_device_in_either_import_order(imports):
    code = (f"{imports}; import sys; print((torch.ones(2, device='xla') + 1).tolist(), "
            "sum(1 for f in sys.meta_path if type(f).__name__ == '_StartWithTorch'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[2.0, 2.0] 0", result.stderr  # and the import hook is gone once used


def test_version_and_bad_option_values(tmp_path):
    result = _run("--version")
    assert result.stdout.startswith("xladev ") and result.returncode == 0
    report = tmp_path / "m.txt"
    report.write_text("Counter: MarkStep\n  Value: 3\n")
    for width in ("0", "abc"):
        result = _run("report", str(report), "--width", width)
        assert result.returncode == 2 and "--width" in result.stderr, result.stderr
