"""A training script written for PyTorch/XLA, run unchanged on xladev.

    xladev run examples/torch_xla_style/train.py [--steps N] [--seed S] [--log-every K] [--metrics] [--save PATH]
    python -m xladev.run examples/torch_xla_style/train.py ...       # the same
    PT_XLA_DEBUG_LEVEL=1 XLA_METRICS_FILE=metrics.txt xladev run examples/torch_xla_style/train.py

It uses only PyTorch/XLA's API (`torch_xla`, `xm`, `met`, `xp`, `pl`, `xr`, `xmp` through `torch_xla.launch`),
in the style of PyTorch/XLA's own examples: a DataLoader wrapped in `MpDeviceLoader` (which marks each step),
`xm.optimizer_step`, logging from `xm.add_step_closure`, `xm.mesh_reduce` for the final loss, `xm.save`, and the
metrics report at the end. The model and data are examples/mlp.py's (the same seeded MLP and synthetic
batches), so the losses match `examples/mlp.py` run directly on xladev.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp
import torch_xla.distributed.parallel_loader as pl
import torch_xla.runtime as xr

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for examples/mlp.py's model
from examples.mlp import Config, build, loss_fn, make_batches, make_optimizer  # noqa: E402


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps (batches), default 40")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the data")
    parser.add_argument("--log-every", type=int, default=10, help="print the loss every K steps (0: never)")
    parser.add_argument("--metrics", action="store_true", help="print met.metrics_report() at the end")
    parser.add_argument("--save", metavar="PATH", help="xm.save the trained state_dict here")
    return parser.parse_args()


def _dataset(seed: int, steps: int, cfg: Config) -> TensorDataset:
    """examples/mlp.py's batches, concatenated: a DataLoader without shuffling gives them back in order."""
    xs, ys = zip(*make_batches(seed, steps, cfg))
    return TensorDataset(torch.cat(xs), torch.cat(ys))


def _log(step: int, loss: torch.Tensor) -> None:
    # A step closure runs after the step's barrier: the loss is already computed, reading it costs no graph.
    xm.master_print(f"step {step:4d}  loss {loss.item():.6f}", flush=True)


def _train(index: int, flags: argparse.Namespace) -> None:
    cfg = Config()
    device = torch_xla.device()
    xm.master_print(f"process {index} of {xr.world_size()} on {device} ({xm.xla_device_hw(device)})")
    model = build(flags.seed, cfg).to(device)
    optimizer = make_optimizer(model, cfg)
    loader = DataLoader(_dataset(flags.seed, flags.steps, cfg), batch_size=cfg.batch, shuffle=False)
    device_loader = pl.MpDeviceLoader(loader, device, loader_prefetch_size=8, device_prefetch_size=4)

    model.train()
    losses = []
    for step, (x, y) in enumerate(device_loader):
        with xp.Trace("train_step"):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            xm.optimizer_step(optimizer)  # MpDeviceLoader marks the step at the next batch
        losses.append(loss.detach())
        if flags.log_every and step % flags.log_every == 0:
            xm.add_step_closure(_log, args=(step, loss))

    xm.wait_device_ops()
    final = xm.mesh_reduce("final_loss", losses[-1].item(), np.mean)
    xm.master_print(f"first loss {losses[0].item():.8f}")
    xm.master_print(f"final loss {final:.8f}")
    if flags.save:
        xm.save(model.state_dict(), flags.save)
        xm.master_print(f"saved {flags.save}")
    if flags.metrics:
        xm.master_print(met.metrics_report())


if __name__ == "__main__":
    torch_xla.launch(_train, args=(_parse(),))
