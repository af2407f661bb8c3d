"""CheckpointManager in processes that die (tests/distributed/checkpoint_job.py): killed mid-save, preempted by
SIGTERM alone and in a job of two.

- kill -9 mid-save: the earlier checkpoints stay whole and restorable, the half-written one is never listed
  or restored, and the next manager removes it.
- SIGTERM: `reached_preemption` turns true at the next step, that step's checkpoint is committed, and then the
  process dies by SIGTERM, the event log's last record saying so.
- Two processes, SIGTERM to one: both agree on the step, the checkpoint of that step is committed, and a job
  of another size is refused when it restores it.

The checkpointed values are exact (`W0 + step`), so a restored value names the step it came from.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.distributed.harness import REPO, run_job
from xladev.schema import records

SCRIPT = REPO / "tests" / "distributed" / "checkpoint_job.py"
W0 = torch.arange(32, dtype=torch.float32).reshape(8, 4)
ENV = {"CPU_NUM_DEVICES": "2", "XLADEV_DIST_TIMEOUT": "60"}


@contextlib.contextmanager
def _running(args: list[str], env: dict[str, str]):
    """A job started in its own session, whose processes are all killed on the way out if still there."""
    full = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO), **env)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "XLA_FLAGS",
                 "TORCHELASTIC_RUN_ID", "XLADEV_COORDINATOR_ADDRESS"):
        full.pop(name, None)
    proc = subprocess.Popen([sys.executable, *args], env=full, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc.returncode is None:
            proc.communicate()


def _wait_for(what, timeout: float, proc: subprocess.Popen):
    """Polls `what()` until it returns something truthy; fails if the process ends or time runs out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the job ended (status {proc.returncode}) before it got there:\n{out[-2000:]}{err[-3000:]}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"not there within {timeout:g} s")


def _verify(base: Path) -> dict:
    done = run_job([sys.executable, str(SCRIPT), "verify", str(base)], ENV, timeout=180)
    assert done.returncode == 0, done.output[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return {**json.loads(line[len("RESULT "):]), "stderr": done.stderr}


def _saved(path: Path, tmp_path: Path) -> dict:
    """A committed checkpoint read back on the CPU by torch's own tools (no xladev involved)."""
    out = tmp_path / f"{path.name}.pt"
    dcp_to_torch_save(path, out)
    return torch.load(out, weights_only=False)


def test_a_job_killed_mid_save_loses_no_earlier_checkpoint_and_never_loads_the_half_written_one(tmp_path):
    base, flag = tmp_path / "base", tmp_path / "stalled"
    with _running([str(SCRIPT), "killmid", str(base), str(flag)], ENV) as proc:
        pid = int(_wait_for(lambda: flag.exists() and flag.read_text(), 180, proc))
        staging = base / ".tmp-3"
        # Caught mid-save: step 3's files begun in its temporary directory, its metadata not written.
        assert staging.is_dir() and any(staging.iterdir()) and not (staging / ".metadata").exists()
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert sorted(p.name for p in base.iterdir()) == [".tmp-3", "1", "2"]

    seen = _verify(base)
    assert seen["steps"] == [1, 2]
    assert seen["left"] == ["1", "2"]  # the half-written one is gone, and said so
    assert f"removing {base}/.tmp-3: a checkpoint left half-written by a process that ended mid-save" in seen["stderr"]
    restored = seen["restored"]
    assert restored["step"] == 2 and restored["w_sharding"] == "{devices=[2,1]0,1}"
    assert torch.equal(torch.tensor(restored["w"]), W0 + 2) and restored["b"] == [2.0] * 4
    assert seen["restore_3"] == ["CheckpointError", f"restore(3): {base} holds no complete checkpoint of step 3; "
                                                    "the complete ones are of steps [1, 2]"]


def test_sigterm_checkpoints_the_next_step_then_ends_the_process_by_sigterm(tmp_path):
    base, log = tmp_path / "base", tmp_path / "run.events.jsonl"
    lines = []
    with _running([str(SCRIPT), "preempt", str(base)], {**ENV, "XLADEV_EVENT_LOG": str(log)}) as proc:
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("step 3 "):
                proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, err[-3000:]
    reached = [int(re.match(r"step (\d+) reached=True", line).group(1)) for line in lines if "reached=True" in line]
    assert len(reached) == 1 and lines[-1] == f"step {reached[0]} reached=True"  # nothing ran after its save
    step = reached[0]
    assert step > 3  # the signal came during step 3's save: the first step checked after it
    assert f"the checkpoint of step {step} is written: ending the process, as SIGTERM asked" in err
    assert sorted(p.name for p in base.iterdir()) == [str(step)]
    saved = _saved(base / str(step), tmp_path)
    assert torch.equal(saved["model"]["w"], W0 + step) and torch.equal(saved["model"]["b"], torch.full((4,), float(step)))
    end = records.parse_line(log.read_text().splitlines()[-1])
    assert isinstance(end, records.End) and (end.reason, end.signal) == ("terminated", "SIGTERM")


def test_two_processes_agree_on_the_preemption_step_and_a_job_of_another_size_is_refused(tmp_path):
    base, out = tmp_path / "base", tmp_path / "out"
    out.mkdir()
    with _running(["-m", "xladev.cli.main", "run", str(SCRIPT), "preempt2", str(base), str(out)], ENV) as proc:
        rank1 = out / "rank1.log"
        text = _wait_for(lambda: rank1.exists() and "step 3 " in rank1.read_text() and rank1.read_text(), 240, proc)
        os.kill(int(re.search(r"pid (\d+)", text).group(1)), signal.SIGTERM)  # one rank only
        _, err = proc.communicate(timeout=180)
    logs = [(out / f"rank{r}.log").read_text() for r in (0, 1)]
    steps = [re.findall(r"step (\d+) reached=True", log) for log in logs]
    assert steps[0] == steps[1] and len(steps[0]) == 1, logs  # one step, the same on both
    step = int(steps[0][0])
    assert "stopped after the preemption checkpoint" in logs[0]  # rank 0 got no SIGTERM, and went on
    assert "xladev.launch: rank 1 failed: killed by SIGTERM" in err  # rank 1 did, and ended by it
    assert sorted(p.name for p in base.iterdir()) == [str(step)]
    saved = _saved(base / str(step), tmp_path)
    assert torch.equal(saved["model"]["w"], W0 + step)

    seen = _verify(base)  # one process
    assert seen["steps"] == [step]
    kind, message = seen["restore_error"]
    assert kind == "CheckpointError"
    assert message.startswith(f"restore({step}) from {base}/{step}: the checkpoint was written by a job of 2 "
                              "processes and is loaded by a job of 1 process")


def _line(stream, text: str) -> str:
    for line in stream:
        if text in line:
            return line
    pytest.fail(f"the process ended without saying {text!r}")


@pytest.mark.parametrize("ending", ["grace", "second_sigterm"])
def test_a_held_sigterm_never_hangs_the_process(tmp_path, ending):
    """Without the checkpoint, XLADEV_PREEMPTION_GRACE or a second SIGTERM ends the process; a forked child
    (a DataLoader worker) is not held at all."""
    grace = "2" if ending == "grace" else "600"
    with _running([str(SCRIPT), "idle", str(tmp_path / "base")], {**ENV, "XLADEV_PREEMPTION_GRACE": grace}) as proc:
        assert _line(proc.stderr, "child ended").strip() == "child ended by signal 15 within 10 s: True"
        _line(proc.stderr, "ready")
        proc.send_signal(signal.SIGTERM)
        _line(proc.stderr, "a preemption notice")
        sent = time.monotonic()
        if ending == "second_sigterm":
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, err[-3000:]
    assert time.monotonic() - sent < 30
    if ending == "grace":
        assert "no checkpoint on preemption within 2 s of SIGTERM (XLADEV_PREEMPTION_GRACE): ending the process " \
               "without it" in err
    else:
        assert "a second SIGTERM: ending the process now, without the checkpoint on preemption" in err
