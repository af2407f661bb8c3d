"""tools/bench/bench_torch_xla.py without torch_xla: the ratio arithmetic, the first-loss check, finding the
interpreter, and the "not installed" column (a real run of the script against an absent or torch_xla-less python)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "bench"))

import _timing  # noqa: E402
import bench_torch_xla as bench  # noqa: E402


def test_ratio_summary_is_taken_round_by_round():
    # Round by round: (2/4, 3/5, 8/10); the median of the per-round ratios, not a ratio of medians (3/5).
    samples = {"torch_xla": [4.0, 5.0, 10.0], "xladev lazy": [2.0, 3.0, 8.0], "eager CPU": [4.0, 5.0, 10.0]}
    summary = bench.ratio_summary(samples)
    assert summary["xladev lazy"] == {"median": 0.6, "min": 0.5, "max": 0.8}
    assert summary["eager CPU"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    assert "torch_xla" not in summary


def test_ratio_summary_without_the_reference_is_empty_and_unequal_rounds_are_refused():
    assert bench.ratio_summary({"xladev lazy": [1.0, 2.0]}) == {}
    assert bench.ratio_summary({"xladev lazy": [1.0], "torch_xla": []}) == {}
    with pytest.raises(ValueError, match="xladev lazy has 1 rounds, torch_xla 2"):
        bench.ratio_summary({"xladev lazy": [1.0], "torch_xla": [1.0, 2.0]})


def test_first_loss_check_allows_float32_rounding_only():
    ref = 2.309354
    close = {"eager CPU": ref, "torch_xla": ref * (1 + 1e-6)}
    assert _timing.first_loss_mismatches(close, "eager CPU") == {}
    far = {"eager CPU": ref, "torch_xla": ref * (1 + 1e-3), "xladev lazy": float("nan")}
    assert _timing.first_loss_mismatches(far, "eager CPU") == {"torch_xla": far["torch_xla"],
                                                               "xladev lazy": far["xladev lazy"]}


def test_time_rounds_alternates_columns_and_keeps_each_columns_figures():
    order = []

    def column(name, seconds):
        def run(n):
            order.append((name, n))
            return seconds

        return run

    samples = _timing.time_rounds({"a": column("a", 1.0), "b": column("b", 2.0)}, rounds=2, block=3, settle=0)
    assert order == [("a", 3), ("b", 3), ("a", 3), ("b", 3)]
    assert samples == {"a": [1.0, 1.0], "b": [2.0, 2.0]}


def test_interpreter_comes_from_the_option_then_the_environment_then_the_default(monkeypatch):
    monkeypatch.setenv(bench.PYTHON_ENV, "/env/python")
    assert bench.torch_xla_python("/cli/python") == Path("/cli/python")
    assert bench.torch_xla_python(None) == Path("/env/python")
    monkeypatch.delenv(bench.PYTHON_ENV)
    assert bench.torch_xla_python(None) == Path("~/txla/bin/python").expanduser()


def test_an_absent_interpreter_is_not_installed(tmp_path):
    worker, why = bench.TorchXla.start(tmp_path / "no-python")
    assert worker is None
    assert why == f"not installed (no interpreter at {tmp_path / 'no-python'})"


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="this interpreter has torch_xla")
def test_an_interpreter_without_torch_xla_is_not_installed():
    # The real worker, under this test's python: it starts, and its first request names the missing module.
    worker, why = bench.TorchXla.start(Path(sys.executable))
    assert worker is None
    assert why.startswith(f"not installed ({sys.executable}: ")
    assert "No module named 'torch_xla'" in why


def test_the_script_runs_without_torch_xla_and_says_not_installed(tmp_path):
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench" / "bench_torch_xla.py"), "--torch-xla-python",
         str(tmp_path / "absent"), "--only", "mlp", "--rounds", "1", "--block", "1", "--warmup", "3",
         "--settle", "0", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "torch_xla column: not installed (no interpreter at" in proc.stderr
    assert "not installed" in proc.stdout
    figures = json.loads(out.read_text())
    mlp = figures["workloads"]["mlp"]
    assert figures["torch_xla"].startswith("not installed")
    assert set(mlp["ms_per_step"]) == {"xladev lazy", "xladev compiled", "eager CPU"}
    assert mlp["ratio_vs_torch_xla"] == {}
    assert mlp["first_loss_mismatches"] == {}
    assert set(mlp["first_loss"]) == {"eager CPU", "xladev lazy", "xladev compiled"}


def test_skip_if_absent_writes_only_the_reason(tmp_path):
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench" / "bench_torch_xla.py"), "--torch-xla-python",
         str(tmp_path / "absent"), "--skip-if-absent", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text()) == {"torch_xla": f"not installed (no interpreter at {tmp_path / 'absent'})",
                                           "workloads": {}}


def test_make_bench_rows_show_the_ratios_or_why_there_are_none():
    import run_all

    absent = run_all.rows_for("torch_xla", {"torch_xla": "not installed (no interpreter at /x)", "workloads": {}})
    assert absent == [("torch_xla 2.9 column", "not installed (no interpreter at /x)", "")]
    data = {"torch_xla": "torch_xla 2.9.0", "workloads": {"mlp": {
        "ratio_vs_torch_xla": {"xladev lazy": {"median": 0.5, "min": 0.45, "max": 0.55},
                               "xladev compiled": {"median": 0.6, "min": 0.5, "max": 0.7}},
        "first_loss_mismatches": {"torch_xla": 3.0}}}}
    assert run_all.rows_for("torch_xla", data) == [
        ("mlp step: xladev lazy / torch_xla", "0.50x [0.45-0.55]", "<= 0.8x"),
        ("mlp step: xladev compiled / torch_xla", "0.60x [0.50-0.70]", "<= 0.8x"),
        ("mlp: first loss differs from eager", "torch_xla", "none"),
    ]


@pytest.mark.parametrize("argv, message", [
    (["--only", "mlp,bert"], "unknown workloads ['bert']; choose from mlp, transformer, gpt2"),
    (["--warmup", "2"], "--warmup must be at least 3"),
    (["--rounds", "0"], "--rounds and --block must be at least 1"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
