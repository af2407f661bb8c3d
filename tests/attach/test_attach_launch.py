"""`xladev attach -- COMMAND`, in real processes: what the adapter's boot hook does to jobs it must leave alone
(xladev's own runtime, the torch_xla alias of `xladev run`) and to a torch_xla version it does not know.

The adapter on a real torch_xla is checked by `make test-torch-xla` (tests/attach/test_real_torch_xla_attach.py),
and the logs it wrote by tests/attach/test_attach_logs.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from xladev.attach import SUPPORTED, version_of
from xladev.attach._harvest import cause_of
from xladev.events import CauseKind


def _attach(tmp_path, *command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    log = tmp_path / "run.events.jsonl"
    return subprocess.run([sys.executable, "-m", "xladev.cli.main", "attach", "--log", str(log), "--", *command],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


def test_a_torch_xla_version_it_does_not_know_gets_one_line_and_the_run_goes_on(tmp_path):
    # A package named torch_xla of a future version, found before anything else on the job's path.
    (tmp_path / "torch_xla").mkdir()
    (tmp_path / "torch_xla" / "__init__.py").write_text('__version__ = "3.1.0"\n')
    (tmp_path / "job.py").write_text("import torch_xla\nprint('the job ran')\n")
    done = _attach(tmp_path, "python", "job.py", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the job ran"
    said = [line for line in done.stderr.splitlines() if "3.1.0" in line]
    assert said == ["xladev attach: torch_xla 3.1.0 is not a version the adapter knows (2.5 to 2.9); "
                    "the run goes on unobserved"]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run.events.jsonl").exists()
    assert "no event log was written" in done.stderr


def test_an_installed_version_it_does_not_know_is_told_before_torch_xla_runs(tmp_path):
    # Installed with its metadata, as pip leaves it: the version is read before the import, so the job's own
    # PyTorch/XLA settings are left as they were (no analysis file turned on for a run nobody reads).
    (tmp_path / "torch_xla").mkdir()
    (tmp_path / "torch_xla" / "__init__.py").write_text('__version__ = "3.1.0"\n')
    info = tmp_path / "torch_xla-3.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_xla\nVersion: 3.1.0\n")
    (tmp_path / "job.py").write_text("import os, torch_xla\nprint(os.environ.get('PT_XLA_DEBUG_LEVEL'))\n")
    done = _attach(tmp_path, "python", "job.py", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
    assert [line for line in done.stderr.splitlines() if "3.1.0" in line] == [
        "xladev attach: torch_xla 3.1.0 is not a version the adapter knows (2.5 to 2.9); the run goes on unobserved"]
    assert not list(tmp_path.glob("run.events.jsonl*"))


def test_a_job_on_xladevs_own_runtime_writes_its_own_log_untouched(tmp_path):
    # `import torch, xladev` then the device by name: xladev's runtime must still start with torch (the hook
    # only acts on a torch_xla import, and only then keeps xladev's runtime off).
    (tmp_path / "job.py").write_text(textwrap.dedent("""\
        import torch, xladev
        x = torch.ones(3, device="xla") * 2
        xladev.mark_step()
        print(x.sum().item())
    """))
    done = _attach(tmp_path, "python", "job.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "6.0"
    lines = (tmp_path / "run.events.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    assert "runtime" not in header and "absent" not in header and header["api"] == "xladev"
    assert json.loads(lines[-1])["type"] == "end"
    assert "XLADEV_ATTACH" not in done.stderr


def test_the_alias_of_xladev_run_is_not_adapted(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent("""\
        import os, torch, torch_xla, torch_xla.core.xla_model as xm
        x = torch.ones(3, device=torch_xla.device()) + 1
        xm.mark_step()
        print(x.sum().item(), os.environ.get("XLADEV_ATTACH"))
    """))
    done = _attach(tmp_path, "python", "-m", "xladev.run", "job.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "6.0 None"
    header = json.loads((tmp_path / "run.events.jsonl").read_text().splitlines()[0])
    assert header["api"] == "torch_xla" and "runtime" not in header  # xladev ran it, through its alias


def test_no_command_is_one_line_and_status_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "xladev.cli.main", "attach"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == ("xladev attach: give the command to run after --, e.g. "
                                   "xladev attach -- python train.py")


@pytest.mark.parametrize("text, expected", [
    ("2.9.0", (2, 9)), ("2.5.1+git1a2b3c", (2, 5)), ("2.10.0rc1", (2, 10)), ("nightly", None), ("3", None)])
def test_versions_read(text, expected):
    assert version_of(text) == expected
    assert (expected in SUPPORTED) == (expected is not None and (2, 5) <= expected <= (2, 9))


# PyTorch/XLA 2.8 renamed every cause from `mark_step` to `torch_xla.sync`: the adapter reads both.
@pytest.mark.parametrize("old, new, kind", [
    ("user mark_step", "user torch_xla.sync", CauseKind.USER_MARK_STEP),
    ("mark_step in parallel loader at step end", "torch_xla.sync in parallel loader at step end",
     CauseKind.DEVICE_LOADER),
    ("mark_step when exiting a profiler StepTrace region", "torch_xla.sync when exiting a profiler StepTrace region",
     CauseKind.STEP_TRACE),
    ("most likely user code trying to access tensor value before mark_step",
     "most likely user code trying to access tensor value before torch_xla.sync", CauseKind.VALUE_ACCESS),
    ("mark_step when dynamo processing input graphs", "torch_xla.sync when dynamo processing input graphs",
     CauseKind.DYNAMO_INPUTS),
    ("torch_xla.compile clear the pending graph prior calling the target function",
     "torch_xla.compile clear the pending graph prior calling the target function", CauseKind.COMPILE_PENDING),
    ("torch_xla.compile", "torch_xla.compile", CauseKind.COMPILE_REGION),
    ("dynamo is executing a compiled program", "dynamo is executing a compiled program", CauseKind.DYNAMO_EXECUTE),
])
def test_both_wordings_of_each_cause(old, new, kind):
    assert cause_of(old).kind is kind and cause_of(new).kind is kind


def test_an_unknown_cause_is_kept_in_its_own_words():
    cause = cause_of("unexpected execution cause")
    assert cause.kind is CauseKind.VALUE_ACCESS and cause.detail == "unexpected execution cause"
