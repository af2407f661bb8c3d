"""A rank waiting at the job's exit barrier for a rank that died stops by itself (world.py's stop grace)
instead of waiting XLADEV_DIST_TIMEOUT: as a rank does whose script ends while another, preempted after its
checkpoint, dies by SIGTERM. The job is started by hand (no launcher or torchrun agent to end the survivor).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.distributed.harness import REPO, free_port
from xladev.runtime.graph import world

SCRIPT = REPO / "tests" / "distributed" / "exit_barrier_job.py"
DIST_TIMEOUT_S = 120  # what the wait would last without the fix


def test_a_rank_at_the_exit_barrier_stops_soon_after_another_dies(tmp_path):
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   XLADEV_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", XLADEV_DIST_TIMEOUT=str(DIST_TIMEOUT_S),
                   PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        for name in ("CPU_NUM_DEVICES", "XLA_FLAGS", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(name, None)
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)], env=env, cwd=REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    try:
        _, err0 = procs[0].communicate(timeout=DIST_TIMEOUT_S + 120)
        ended = time.time()
        procs[1].communicate(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    died = float((tmp_path / "rank1.died").read_text())
    assert procs[1].returncode == 3
    assert procs[0].returncode == 1, err0[-3000:]
    assert ended - died < world._STOP_GRACE_S + 30 < DIST_TIMEOUT_S
    assert "rank 0: rank 1 of 2 is gone" in err0
    assert ("stopping: rank 1 is gone (its process ended or stopped answering without leaving the job) and this rank "
            "has been waiting 10 s where no error can reach it (inside a collective, at the exit barrier, or joining "
            "the job)") in err0
