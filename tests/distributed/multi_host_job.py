"""One rank of the job of tests/distributed/test_multi_host.py: two hosts of two processes each (torchrun
`--nnodes 2`, the coordinator at host 0's address), DistributedDataParallel over the `xla` backend against the
same model trained on the CPU on the whole batch (tests/distributed/ddp_reference.py). Writes
`OUT/rank<R>.json`. With XLADEV_TEST_DIE_AT_STEP set (on one host), the rank ends its process at that step, as
a machine that goes down would; each rank that stays writes the error its step raised to `OUT/error<R>.txt`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import torch.distributed as dist

import xladev
from tests.distributed.ddp_reference import ddp_against_cpu

OUT = Path(sys.argv[1])
DIE_AT = int(os.environ.get("XLADEV_TEST_DIE_AT_STEP", "-1"))


def die_at(step: int) -> None:
    if step == DIE_AT:
        os._exit(7)


def wait_for_host_errors(seconds: float = 60.0) -> None:
    # torchrun stops a host's other ranks as soon as one of them fails, so a rank that raised a moment later would
    # never say why (seen under load): each waits, a while, until every rank on its host has written its error.
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    first = int(os.environ["GROUP_RANK"]) * local
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all((OUT / f"error{r}.txt").exists() for r in range(first, first + local)):
        time.sleep(0.05)


dist.init_process_group("xla", init_method="xla://")
rank, world = dist.get_rank(), dist.get_world_size()
try:
    seen = ddp_against_cpu(rank, world, xladev.device(), before_step=die_at)
except xladev.DistributedError as exc:
    (OUT / f"error{rank}.txt").write_text(str(exc))
    wait_for_host_errors()
    raise
(OUT / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "world": world, "host": socket.gethostname(), **seen}))
