"""The adapter on real torch_xla (`make test-torch-xla`; not part of `make test`, which reads recorded logs).

Each test runs one of tests/fixtures/torch_xla's scenarios (real PyTorch/XLA runs of common mistakes, with the
ground truth in that folder's README) on torch_xla's own Python under `xladev attach`, then checks the log
with `xladev report` and with the TUI, headless. The interpreter: $XLADEV_TORCH_XLA_PYTHON (make test-torch-xla
sets it to its virtualenv's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.attach.expectations import EXPECTED, check_report, check_tui
from xladev.report import load

pytestmark = pytest.mark.torch_xla
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "torch_xla"


@pytest.fixture(scope="module")
def torch_xla_python() -> str:
    python = os.environ.get("XLADEV_TORCH_XLA_PYTHON", "")
    if not python or not os.access(python, os.X_OK):
        pytest.fail("XLADEV_TORCH_XLA_PYTHON names no interpreter: run these tests through make test-torch-xla")
    return python


@pytest.fixture(scope="module")
def torch_xla_version(torch_xla_python) -> str:
    """The version of the torch_xla under test (2.5 to 2.9 are attached to)."""
    done = subprocess.run([torch_xla_python, "-c", "import torch_xla; print(torch_xla.__version__)"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PJRT_DEVICE="CPU"))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()[-1].split("+")[0]


def _run(python: str, name: str, tmp_path: Path, *script_args: str) -> Path:
    expected = EXPECTED[name]
    shutil.copy(FIXTURES / expected.script, tmp_path)
    log = tmp_path / f"{name}.events.jsonl"
    flags = ["--graphs"] if expected.graphs else []
    done = subprocess.run([sys.executable, "-m", "xladev.cli.main", "attach", *flags, "--log", str(log), "--",
                           python, expected.script, expected.scenario or name, *script_args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900, env=dict(os.environ, PJRT_DEVICE="CPU"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"event log {log}" in done.stderr
    return log


def _attach_job(python: str, tmp_path: Path, job: str) -> tuple[Path, str]:
    """Runs one of this folder's jobs under `xladev attach`; returns its event log and what it printed."""
    shutil.copy(Path(__file__).with_name(job), tmp_path)
    log = tmp_path / f"{Path(job).stem}.events.jsonl"
    done = subprocess.run([sys.executable, "-m", "xladev.cli.main", "attach", "--log", str(log), "--", python, job],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PJRT_DEVICE="CPU"))
    assert done.returncode == 0, done.stderr[-3000:]
    return log, done.stdout


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_adapters_log_is_diagnosed_as_pytorch_xlas_own_outputs_are(torch_xla_python, tmp_path, name):
    log = _run(torch_xla_python, name, tmp_path)
    lines = log.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["runtime"] == "torch_xla" and header["versions"]["torch_xla"].startswith("2.")
    assert header["api"] == "torch_xla" and json.loads(lines[-1])["type"] == "end"
    check_report(name, load(str(log)))


@pytest.mark.parametrize("name", ["dynamic_shape", "item_every_step"])
def test_the_tui_shows_the_adapters_log(torch_xla_python, torch_xla_version, tmp_path, name):
    check_tui(name, _run(torch_xla_python, name, tmp_path), torch_xla_version)


def test_each_barrier_is_named_in_pytorch_xlas_words(torch_xla_python, tmp_path):
    log, _ = _attach_job(torch_xla_python, tmp_path, "barriers_job.py")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [(r["cause"]["kind"], r["site"].rsplit("/", 1)[-1]) for r in records if r["type"] == "step"]
    # torch_xla.compile syncs twice (the pending graph, then the region), StepTrace once, optimizer_step once.
    assert steps == ([("COMPILE_PENDING", "barriers_job.py:12 (<module>)"),
                      ("COMPILE_REGION", "barriers_job.py:12 (<module>)")] * 3
                     + [("STEP_TRACE", "barriers_job.py:15 (<module>)")] * 3
                     + [("OPTIMIZER_STEP", "barriers_job.py:19 (<module>)")] * 3)
    assert [r.get("name") for r in records if r["type"] == "compile"][0] == "train_step"


def test_xladev_tui_follows_a_real_torch_xla_job_live(torch_xla_python, torch_xla_version, tmp_path):
    # `xladev tui -- python train.py` as a TPU user types it, torch_xla's Python in place of `python`.
    import asyncio

    from tests.tui.helpers import wait_for
    from xladev.cli import tui as tui_command
    from xladev.cli.main import _build_parser
    from xladev_tui import run_model as m
    from xladev_tui.app import XladevTUI

    shutil.copy(FIXTURES / "scenarios.py", tmp_path)
    argv = ["tui", "--log", str(tmp_path / "live.events.jsonl"), "--", torch_xla_python,
            str(tmp_path / "scenarios.py"), "dynamic_shape"]
    parser, _ = _build_parser(argv)
    source = tui_command.make_source(parser.parse_args(argv))
    source.env["PJRT_DEVICE"] = "CPU"
    source.cwd = str(tmp_path)

    async def follow():
        app = XladevTUI(source)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.shown.state == m.EXITED, timeout=600, step=0.2)
            await wait_for(pilot, lambda: app.shown.diagnosis.records == app.shown.records, timeout=30)
            return app.shown

    shown = asyncio.run(follow())
    assert shown.state_text == "exited 0" and shown.steps == 24 and shown.compiles == 24
    assert f"torch_xla {torch_xla_version}" in shown.device and "attached" in shown.device
    assert shown.diagnosis.findings[0].rule == "recompilation"
    assert any(line.startswith("step") or "Metric" in line for line in shown.log)  # the job's own output


def test_a_step_is_in_the_log_once_its_execution_ended_not_at_the_next_barrier(torch_xla_python, tmp_path):
    # The job stops at a wait with no barrier after its third step: the live view must not lag a step behind.
    import time

    shutil.copy(Path(__file__).with_name("steps_then_wait_job.py"), tmp_path)
    log, go = tmp_path / "wait.events.jsonl", tmp_path / "go"
    job = subprocess.Popen([sys.executable, "-m", "xladev.cli.main", "attach", "--log", str(log), "--",
                            torch_xla_python, "steps_then_wait_job.py", str(go)], cwd=tmp_path, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PJRT_DEVICE="CPU"))
    try:
        assert job.stdout.readline().strip() == "stepped"
        deadline = time.monotonic() + 30  # the adapter reads every 0.05 s; the margin is for a loaded machine
        records = []
        while time.monotonic() < deadline:
            records = [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]
            if sum(r["type"] == "step" for r in records) == 3:
                break
            time.sleep(0.05)
        assert job.poll() is None  # still waiting: what follows was written while the job ran
        assert [r["type"] for r in records].count("step") == 3, [r["type"] for r in records]
        executes = [r for r in records if r["type"] == "execute"]
        assert [r["step"] for r in executes] == [0, 1, 2] and all(r["execute_ns"] > 0 for r in executes)
    finally:
        go.touch()
        out, err = job.communicate(timeout=300)
    assert job.returncode == 0, err[-3000:]


def test_short_steps_each_get_their_own_tracing_time(torch_xla_python, tmp_path):
    # Read every few barriers, each LazyTracing sample (one per traced op) goes to its step by time: a step's count
    # is its own ops', and the run's count and total are torch_xla's own, to the nanosecond.
    log, stdout = _attach_job(torch_xla_python, tmp_path, "short_steps_job.py")
    _, count, total = [line for line in stdout.splitlines() if line.startswith("LazyTracing ")][-1].split()
    ops = [r for r in map(json.loads, log.read_text().splitlines()) if r["type"] == "ops"]
    assert [r["step"] for r in ops] == list(range(400))
    assert all(r["tracing_count"] == sum(r["counts"].values()) for r in ops[1:])  # one trace per op
    assert sum(r["tracing_count"] for r in ops) == int(count) and sum(r["tracing_ns"] for r in ops) == int(total)
