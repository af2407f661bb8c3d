"""A run killed mid-training (a rank that dies under the launcher, `os._exit`, the OOM killer): its outputs have no
end, and a PT_XLA_DEBUG log at level 1 counts no step. What each input holds still gives the same diagnosis: the
run did not finish, and nothing more on a healthy loop (its set-up reads and recompiles stay set-up), while reads
that go on every step are still told from the debug log alone.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.faults import runs
from tests.report.test_healthy_runs import DDP
from xladev.report import load

KILLED_AT = 6  # the 0-based step whose barrier is the last one the killed rank passes
# The healthy DDP run, with rank 1 dying right after a barrier past set-up.
KILLED_DDP = DDP.replace("        xladev.mark_step()\n", "        xladev.mark_step()\n"
                         f"        if rank == 1 and _ == {KILLED_AT}:\n            import os; os._exit(7)\n")

# One process reading its loss every step, killed the same way.
READS_EVERY_STEP = textwrap.dedent(f"""
    import os, torch, xladev
    dev = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(12):
        loss = model(torch.ones(4, 8, device=dev)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(loss.item())  # a read every step
        xladev.mark_step()
        if step == {KILLED_AT}:
            os._exit(7)
""")

INPUTS = {"event log": ("run.jsonl",), "debug log": ("debug.txt",), "both": ("run.jsonl", "debug.txt")}


def _run(tmp, script: str) -> None:
    env = runs.environment(XLADEV_EVENT_LOG=str(tmp / "run.jsonl"), PT_XLA_DEBUG_LEVEL="1",
                           PT_XLA_DEBUG_FILE=str(tmp / "debug.txt"))
    done = runs.run([runs.write_script(tmp, script)], env, timeout=300)
    assert done.returncode != 0 and "exited with status 7" in done.stderr + done.stdout or done.returncode == 7, \
        done.stderr[-3000:]


@pytest.fixture(scope="module")
def killed_ddp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("killed_ddp")
    _run(tmp, KILLED_DDP)
    return tmp


@pytest.fixture(scope="module")
def killed_reader(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("killed_reader")
    _run(tmp, READS_EVERY_STEP)
    return tmp


@pytest.mark.parametrize("kind", list(INPUTS))
def test_a_killed_healthy_rank_is_told_unfinished_and_nothing_else(killed_ddp, kind):
    report = load([str(killed_ddp / f"{name}.1") for name in INPUTS[kind]])
    problems = [(f.rule, f.title) for f in report.findings if f.severity != "info"]
    assert [rule for rule, _ in problems] == ["unfinished-run"], problems
    assert problems[0][1].startswith("Rank 1 did not finish")


@pytest.mark.parametrize("kind", list(INPUTS))
def test_reads_every_step_are_told_from_a_killed_runs_every_input(killed_reader, kind):
    report = load([str(killed_reader / name) for name in INPUTS[kind]])
    rules = [f.rule for f in report.findings if f.severity != "info"]
    assert rules[0] == "unfinished-run" and "host-transfers" in rules, rules
    transfers = next(f for f in report.findings if f.rule == "host-transfers")
    assert any("train.py:" in line for line in transfers.evidence), transfers.evidence


def test_the_debug_log_states_the_reads_again_once_they_go_on_after_set_up(killed_reader):
    lines = [line for line in (killed_reader / "debug.txt").read_text().splitlines()
             if "TransferFromDeviceTime too frequent" in line]
    assert "after set-up" not in lines[0] and "Device->host transfers after set-up: " in lines[-1], lines
