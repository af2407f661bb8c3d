"""Train a small MLP classifier on synthetic data, on the xla device or the CPU.

    python examples/mlp.py [--device xla|cpu] [--steps N] [--seed S] [--log-every K]

The data comes from a fixed random "teacher": each input's label is the arg-max of a random linear
map of it, so the loss falls quickly. Inputs are drawn on the CPU from a seeded generator and then
moved to the device, so both devices see the same numbers.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Iterator

if __package__ in (None, ""):  # run as a script: make the `examples` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn as nn
import torch.nn.functional as F

from examples._common import Batch, TrainResult, main, make_parser, resolve_device, run_loop


@dataclasses.dataclass(frozen=True)
class Config:
    in_features: int = 32
    hidden: int = 128
    depth: int = 2  # hidden layers
    classes: int = 10
    batch: int = 64
    lr: float = 0.05
    momentum: float = 0.9


def build(seed: int, cfg: Config = Config()) -> nn.Sequential:
    """The classifier, on the CPU, with weights from `seed`: Linear-ReLU blocks, then a Linear head."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    width = cfg.in_features
    for _ in range(cfg.depth):
        layers += [nn.Linear(width, cfg.hidden), nn.ReLU()]
        width = cfg.hidden
    layers.append(nn.Linear(width, cfg.classes))
    return nn.Sequential(*layers)


def make_optimizer(model: nn.Module, cfg: Config = Config()) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, labels)


def make_batches(seed: int, steps: int, cfg: Config = Config(), batch: int | None = None) -> Iterator[Batch]:
    """`steps` CPU batches (inputs float32 [B, in], labels int64 [B]) from a generator seeded with `seed`."""
    g = torch.Generator().manual_seed(seed + 1)
    teacher = torch.randn(cfg.in_features, cfg.classes, generator=g)
    size = batch or cfg.batch
    for _ in range(steps):
        x = torch.randn(size, cfg.in_features, generator=g)
        y = (x @ teacher + 0.5 * torch.randn(size, cfg.classes, generator=g)).argmax(dim=1)
        yield x, y


def train(device: torch.device | str, steps: int, seed: int = 0, cfg: Config = Config(), *, log_every: int = 0,
          on_step=None, batch: int | None = None) -> TrainResult:
    """Builds the model from `seed`, trains it `steps` steps on `device`, returns losses and final weights."""
    device = resolve_device(device)
    model = build(seed, cfg).to(device)
    optimizer = make_optimizer(model, cfg)
    return run_loop(model, optimizer, loss_fn, make_batches(seed, steps, cfg, batch), device,
                    log_every=log_every, on_step=on_step)


if __name__ == "__main__":
    args = make_parser(__doc__.splitlines()[0], steps=50).parse_args()
    main("mlp", args, lambda device: train(device, args.steps, args.seed, log_every=args.log_every))
