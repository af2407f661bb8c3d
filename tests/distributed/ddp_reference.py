"""DistributedDataParallel over the `xla` backend against the same model trained on the CPU on the whole batch:
one rank's part of the jobs of tests/distributed/test_torchrun_job.py and test_multi_host.py."""

from __future__ import annotations

import copy
from typing import Callable

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import xladev


def ddp_against_cpu(rank: int, world: int, dev, before_step: Callable[[int], None] | None = None) -> dict:
    """Three SGD steps of a small MLP, each rank on its 4 samples of the global batch, beside the CPU model on all
    of them.

    Args:
      rank: this process's rank.
      world: the job's size.
      dev: this process's device.
      before_step: called with each step's number before it runs.

    Returns:
      Per step (CPU loss, this rank's loss), the weights of both, and the CPU gradients' largest magnitude.
    """
    torch.manual_seed(2022)
    cpu_model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 10))
    ddp = DDP(copy.deepcopy(cpu_model).to(dev))
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    loss_fn = nn.MSELoss()
    local = 4
    losses = []
    grad_scale = 0.0
    for step in range(3):
        if before_step is not None:
            before_step(step)
        g = torch.Generator().manual_seed(100 + step)
        xs, ys = torch.randn(local * world, 10, generator=g), torch.randn(local * world, 10, generator=g)
        cpu_opt.zero_grad()
        cpu_loss = loss_fn(cpu_model(xs), ys)
        cpu_loss.backward()
        grad_scale = max(grad_scale, max(float(p.grad.abs().max()) for p in cpu_model.parameters()))
        cpu_opt.step()
        ddp_opt.zero_grad()
        part = slice(rank * local, (rank + 1) * local)
        ddp_loss = loss_fn(ddp(xs[part].to(dev)), ys[part].to(dev))
        ddp_loss.backward()
        ddp_opt.step()
        xladev.mark_step()
        losses.append((float(cpu_loss), float(ddp_loss)))
    weights = {n: p.detach().cpu().tolist() for n, p in ddp.module.named_parameters()}
    expected = {n: p.detach().tolist() for n, p in cpu_model.named_parameters()}
    return {"losses": losses, "weights": weights, "cpu_weights": expected, "grad_scale": grad_scale}
