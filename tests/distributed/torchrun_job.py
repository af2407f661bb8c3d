"""One rank of the torchrun job of tests/distributed/test_torchrun_job.py (`torchrun ... torchrun_job.py OUT`).

Every phase writes what it saw into `OUT/rank<R>.json`; the tests read the files and the per-rank outputs
(event logs, metrics, debug files, dumps, profiles). The phases:
1. torch.distributed's collectives over the `xla` backend (PyTorch/XLA's test/pjrt/test_torchrun.py checks);
2. xladev's own collectives (reduce types, groups, all_to_all, permute, rendezvous, mesh_reduce);
3. DistributedDataParallel over the `xla` backend against the same model trained on the CPU;
4. the transformer example trained data parallel (`xladev.optimizer_step`), for the parity test;
5. a small data-parallel run with planted troubles for the report: rank 1 is slow every step (a
   straggler), reads a statistic through a different graph at step 2 (a divergence), and recompiles a
   graph at steps 3 and 4 that rank 0 never compiles.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn

import xladev
import xladev.debug
import xladev.debug.metrics as met
from examples import transformer
from examples._common import shard, state_on_cpu

from tests.distributed.ddp_reference import ddp_against_cpu
from tests.distributed.job_config import PLANTED_STEPS, SLOW_RANK, SLOW_S, TRANSFORMER, TRANSFORMER_STEPS

OUT = Path(sys.argv[1])


def lists(values: dict) -> dict:
    def plain(v):
        if isinstance(v, torch.Tensor):
            return v.cpu().tolist()
        return [plain(x) for x in v] if isinstance(v, list) else v

    return {k: plain(v) for k, v in values.items()}


def torch_distributed_collectives(rank: int, world: int, dev) -> dict:
    value = torch.tensor([float(rank)], device=dev)
    gathered = [torch.zeros(1, device=dev) for _ in range(world)]
    dist.all_gather(gathered, value)
    summed = torch.arange(2, dtype=torch.int64, device=dev) + 1 + 2 * rank
    dist.all_reduce(summed)
    scattered = torch.zeros(world, dtype=torch.int64, device=dev)
    dist.reduce_scatter(scattered, [world * torch.arange(world * world, dtype=torch.int64, device=dev)])
    sent = torch.full((3,), float(rank + 7), device=dev)
    dist.broadcast(sent, src=1)
    into = torch.zeros(world * 2, device=dev)
    dist.all_gather_into_tensor(into, torch.full((2,), float(rank), device=dev))
    largest = torch.tensor([float(rank) - 5], device=dev)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    xladev.mark_step()
    before = time.monotonic()
    dist.barrier()
    return lists({"all_gather": torch.cat(gathered), "all_reduce": summed, "reduce_scatter": scattered,
                  "broadcast": sent, "all_gather_into_tensor": into, "all_reduce_max": largest,
                  "barrier_s": time.monotonic() - before})


def xladev_collectives(rank: int, dev) -> dict:
    x = torch.arange(4.0, device=dev) + 10 * rank + 0.5
    flags = torch.tensor([rank == 1, False])
    out = {
        "sum_scaled": xladev.all_reduce(xladev.REDUCE_SUM, x, scale=0.5),
        "min": xladev.all_reduce(xladev.REDUCE_MIN, x),
        "mul": xladev.all_reduce(xladev.REDUCE_MUL, x),
        "or": xladev.all_reduce(xladev.REDUCE_OR, flags.to(dev)),
        "own_group": xladev.all_reduce(xladev.REDUCE_SUM, x, groups=[[0], [1]]),
        "gather_dim1": xladev.all_gather(x.view(2, 2), dim=1),
        "reduce_scatter": xladev.reduce_scatter(xladev.REDUCE_SUM, x, 1.0, 0, 2),
        "all_to_all": xladev.all_to_all(x, 0, 0, 2),
        "permute": xladev.collective_permute(x, [[0, 1], [1, 0]]),
    }
    listed = [x.clone(), (x * 2).to(torch.int32)]
    xladev.all_reduce(xladev.REDUCE_SUM, listed)
    out["list_in_place"] = listed
    # The step's graph holds the collective (an XLA all-reduce), and running it reads nothing to the host.
    reduced = xladev.all_reduce(xladev.REDUCE_SUM, x * 3)
    out["ir_names_all_reduce"] = "xla::all_reduce" in xladev.debug.get_tensors_text([reduced])
    out["hlo_has_all_reduce"] = "all-reduce" in xladev.debug.get_tensors_hlo([reduced])
    reads_before = (met.metric_data("TransferFromDeviceTime") or (0,))[0]
    xladev.mark_step()
    out["reads_in_step"] = (met.metric_data("TransferFromDeviceTime") or (0,))[0] - reads_before
    out["reduced"] = reduced
    out = lists(out)
    out["rendezvous"] = [p.decode() for p in xladev.rendezvous("payloads", f"r{rank}".encode() * (rank + 1))]
    out["mesh_reduce"] = xladev.mesh_reduce("mean", float(rank) + 1.0, lambda values: sum(values) / len(values))
    return out


def transformer_data_parallel(rank: int) -> dict:
    result = transformer.train_data_parallel(rank, TRANSFORMER_STEPS, seed=0, cfg=TRANSFORMER)
    if rank == 0:
        torch.save(result.params, OUT / "transformer_params.pt")
    return {"losses": result.losses, "seconds": result.seconds}


def planted(rank: int, world: int, dev) -> dict:
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(5)
    batches = shard(((torch.randn(8, 8, generator=g), torch.randn(8, 1, generator=g)) for _ in range(PLANTED_STEPS)),
                    rank, world)
    for step, (x, y) in enumerate(batches):
        if rank == SLOW_RANK:
            time.sleep(SLOW_S)  # a straggler: its input pipeline is slow
        out = model(x.to(dev))
        loss = ((out - y.to(dev)) ** 2).mean()
        loss.backward()
        xladev.optimizer_step(opt)
        opt.zero_grad(set_to_none=True)
        xladev.mark_step()
        # A statistic read every step; at step 2 rank 1 reads it through a different graph (a divergence).
        detached = out.detach()
        stat = (detached.abs() if rank == 1 and step == 2 else detached).max().item()
        if rank == 1 and step in (3, 4):
            torch.ones(step, device=dev).sum().item()  # a new shape each step: rank 1 alone recompiles
    return {"last_stat": stat}


def profile_one_step(dev) -> None:
    import xladev.debug.profiler as xp

    xp.start_trace(OUT / "profile")
    (torch.ones(4, device=dev) * 2).sum().item()
    xp.stop_trace()


def main() -> None:
    dist.init_process_group("xla", init_method="xla://")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = xladev.device()
    seen = {"rank": rank, "world": world,
            "xladev": [xladev.world_size(), xladev.global_ordinal(), xladev.local_ordinal()]}
    seen["dist"] = torch_distributed_collectives(rank, world, dev)
    seen["xladev_collectives"] = xladev_collectives(rank, dev)
    seen["ddp"] = ddp_against_cpu(rank, world, dev)
    seen["transformer"] = transformer_data_parallel(rank)
    seen["planted"] = planted(rank, world, dev)
    profile_one_step(dev)
    (OUT / f"rank{rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
