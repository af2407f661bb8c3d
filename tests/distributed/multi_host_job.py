"""One rank of the job of tests/distributed/test_multi_host.py: two hosts of two processes each (torchrun
`--nnodes 2`, the coordinator at host 0's address), DistributedDataParallel over the `xla` backend against the
same model trained on the CPU on the whole batch (tests/distributed/ddp_reference.py). Writes
`OUT/rank<R>.json`. With XLADEV_TEST_DIE_AT_STEP set (on one host), the rank ends its process at that step, as
a machine that goes down would.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import torch.distributed as dist

import xladev
from tests.distributed.ddp_reference import ddp_against_cpu

OUT = Path(sys.argv[1])
DIE_AT = int(os.environ.get("XLADEV_TEST_DIE_AT_STEP", "-1"))


def die_at(step: int) -> None:
    if step == DIE_AT:
        os._exit(7)


dist.init_process_group("xla", init_method="xla://")
rank, world = dist.get_rank(), dist.get_world_size()
seen = ddp_against_cpu(rank, world, xladev.device(), before_step=die_at)
(OUT / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "world": world, "host": socket.gethostname(), **seen}))
