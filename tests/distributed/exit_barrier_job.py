"""Run by tests/distributed/test_exit_barrier.py as one rank of a job of two started by hand (RANK, WORLD_SIZE,
XLADEV_COORDINATOR_ADDRESS; no launcher or agent to end the others). Rank 0 ends normally; rank 1 dies once
rank 0 has begun to exit, so rank 0 waits at the job's exit barrier for a rank that never comes.

    exit_barrier_job.py OUT
"""

import atexit
import os
import sys
import time
from pathlib import Path

import torch

import xladev

out = Path(sys.argv[1])
rank = int(os.environ["RANK"])
xladev.all_reduce(xladev.REDUCE_SUM, torch.ones(2, device=xladev.device())).cpu()  # both joined and working
if rank == 0:
    # Registered after the job's own exit handler, so it runs first: rank 0 is on its way to the exit barrier.
    atexit.register(lambda: (out / "rank0.exiting").write_text(str(time.time())))
else:
    while not (out / "rank0.exiting").exists():
        time.sleep(0.05)
    time.sleep(2)  # rank 0 is at the barrier by now
    (out / "rank1.died").write_text(str(time.time()))
    os._exit(3)
