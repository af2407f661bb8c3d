"""A PyTorch/XLA-style script run by `xladev run` (tests/distributed/test_spawn_job.py): torch_xla.launch starts
one process per CPU device (CPU_NUM_DEVICES=2), each trains with xm.optimizer_step under MpDeviceLoader, and
rank 1 (or the rank in XLADEV_TEST_DIE_RANK) dies at step 2. Each rank writes what it saw before that into
OUT/rank<R>.json.
"""

import json
import os
import sys
import time

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.runtime as xr

DIE_AT = 2
DIE_RANK = int(os.environ.get("XLADEV_TEST_DIE_RANK", "1"))


def _mp_fn(index, out):
    device = torch_xla.device()
    rank, world = xr.global_ordinal(), xr.world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(2, 4, generator=g), torch.randn(2, 1, generator=g)) for _ in range(6)]
    seen = {"index": index, "rank": rank, "world": world, "ordinal": xm.get_ordinal(), "master": xm.is_master_ordinal(),
            "sum": xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=device) * (rank + 1)).cpu().tolist(),
            "weights": []}
    for step, (x, y) in enumerate(pl.MpDeviceLoader(batches, device)):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        if step == DIE_AT and rank == DIE_RANK:
            with open(os.path.join(out, f"rank{rank}.died"), "w") as fh:
                fh.write(str(time.time()))
            os._exit(7)  # dies without a word, mid-training
        seen["weights"].append(model.weight.detach().cpu().flatten().tolist())
        with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
            json.dump(seen, fh)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=(sys.argv[1],))
