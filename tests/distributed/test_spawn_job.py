"""`xladev run` of a PyTorch/XLA script using torch_xla.launch: two processes on localhost, and one that dies.

torch_xla.launch (the alias's, on xladev.launch) starts one process per CPU device; the two train through
xm.optimizer_step under MpDeviceLoader, then rank 1 dies without a word. Rank 0 must fail with an error
naming rank 1, soon (no hang), and both event logs must stay readable.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.distributed.harness import REPO, run_job
from xladev.report import load
from xladev.schema import records

SCRIPT = REPO / "tests" / "distributed" / "spawn_job.py"
# From rank 1's death to the end of the job: the launcher tells rank 0 at once; rank 0's next collective
# fails; a rank stuck in XLA stops after world._STOP_GRACE_S (10 s). Start-up is not in this bound.
DEATH_TO_END_S = 30.0


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    import sys

    out = tmp_path_factory.mktemp("spawn_job")
    env = {"CPU_NUM_DEVICES": "2", "XLADEV_EVENT_LOG": str(out / "run.events.jsonl"), "XLADEV_DIST_TIMEOUT": "60"}
    done = run_job([sys.executable, "-m", "xladev.cli.main", "run", str(SCRIPT), str(out)], env, timeout=300)
    ended = time.time()
    return out, done, ended


def test_launch_starts_one_replica_per_cpu_device(job):
    out, _, _ = job
    for rank in (0, 1):
        seen = json.loads((out / f"rank{rank}.json").read_text())
        assert (seen["index"], seen["rank"], seen["world"], seen["ordinal"]) == (rank, rank, 2, rank)
        assert seen["master"] is (rank == 0)
        assert seen["sum"] == [3.0, 3.0]  # 1 + 2 through xm.all_reduce
    first = [json.loads((out / f"rank{rank}.json").read_text())["weights"] for rank in (0, 1)]
    assert first[0][:2] == first[1][:2]  # xm.optimizer_step averaged the gradients: the replicas agree


def test_a_dead_rank_fails_the_others_naming_it_without_hanging(job):
    out, done, ended = job
    died = float((out / "rank1.died").read_text())
    assert done.returncode == 1, done.output[-4000:]
    assert ended - died < DEATH_TO_END_S
    text = done.stderr
    assert "xladev.launch: rank 1 failed: exited with status 7" in text
    assert "DistributedError: rank 0: " in text and "rank 1 of 2 is gone (its process exited with status 7)" in text
    assert "Traceback" in text and "Check failure stack trace" not in text  # no XLA abort


def test_every_ranks_event_log_stays_readable(job):
    out, _, _ = job
    for rank in (0, 1):
        lines = (out / f"run.events.jsonl.{rank}").read_text().splitlines()
        parsed = [records.parse_line(line) for line in lines]
        assert isinstance(parsed[0], records.Header) and parsed[0].rank == rank
        assert sum(isinstance(r, records.Step) for r in parsed) >= 2
    zero = [records.parse_line(line) for line in (out / "run.events.jsonl.0").read_text().splitlines()]
    lost = [r for r in zero if isinstance(r, records.RankLost)]
    assert lost and lost[0].rank == 1 and "exited with status 7" in lost[0].reason
    assert isinstance(zero[-1], records.End)  # rank 0 closed its log on the way out


def test_the_report_leads_with_the_rank_that_died(job):
    out, _, _ = job
    first = load([str(out / f"run.events.jsonl.{rank}") for rank in (0, 1)]).findings[0]
    assert first.rule == "unfinished-run" and first.title.startswith("Rank 1 did not finish"), first.title
    assert first.numbers == {"rank": 1, "steps": 2}  # it died in step 2 (0-based), two steps completed
    assert any(line.startswith("last graph: ") and "spawn_job.py:" in line for line in first.evidence)
    # What rank 0 saw of it is the same stop: evidence, not a finding of its own.
    assert any("rank 1 is gone (its process exited with status 7)" in line for line in first.evidence)
    assert "rank-lost" not in [f.rule for f in load(str(out / "run.events.jsonl.0")).findings[1:]]


@pytest.mark.slow
def test_when_rank_0_dies_the_job_ends_naming_it_and_the_logs_stay_readable(tmp_path):
    """Rank 0 hosts jax's coordination service: when it dies, jax's runtime stops the other ranks itself
    (a fatal log, as under PyTorch/XLA), so the launcher's error is the one that names the rank."""
    import sys

    env = {"CPU_NUM_DEVICES": "2", "XLADEV_EVENT_LOG": str(tmp_path / "run.events.jsonl"), "XLADEV_DIST_TIMEOUT": "60",
           "XLADEV_TEST_DIE_RANK": "0"}
    done = run_job([sys.executable, "-m", "xladev.cli.main", "run", str(SCRIPT), str(tmp_path)], env, timeout=300)
    ended = time.time()
    died = float((tmp_path / "rank0.died").read_text())
    assert done.returncode == 1, done.output[-4000:]
    assert ended - died < DEATH_TO_END_S
    assert "xladev.launch: rank 0 failed: exited with status 7" in done.stderr
    for rank in (0, 1):
        lines = (tmp_path / f"run.events.jsonl.{rank}").read_text().splitlines()
        parsed = [records.parse_line(line) for line in lines]  # every complete record parses
        assert isinstance(parsed[0], records.Header) and parsed[0].rank == rank
        assert sum(isinstance(r, records.Step) for r in parsed) >= 2
