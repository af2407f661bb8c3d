"""Train a small convolutional classifier on synthetic images, on the xla device or the CPU.

    python examples/cnn.py [--device xla|cpu] [--steps N] [--seed S] [--log-every K]

Two conv - batchnorm - ReLU - max-pool blocks, global average pooling and a linear head, trained
with SGD (momentum, weight decay). Each class has a fixed random image pattern; a sample is its
class pattern plus noise, drawn on the CPU from a seeded generator.
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
    channels: int = 3
    size: int = 16  # image height and width
    widths: tuple[int, int] = (16, 32)
    classes: int = 4
    batch: int = 16
    noise: float = 1.0
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 1e-4


class ConvNet(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        width = cfg.channels
        for out in cfg.widths:
            blocks += [nn.Conv2d(width, out, kernel_size=3, padding=1, bias=False), nn.BatchNorm2d(out),
                       nn.ReLU(), nn.MaxPool2d(2)]
            width = out
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(width, cfg.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


def build(seed: int, cfg: Config = Config()) -> ConvNet:
    """The network, on the CPU, with weights from `seed`."""
    torch.manual_seed(seed)
    return ConvNet(cfg)


def make_optimizer(model: nn.Module, cfg: Config = Config()) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, labels)


def make_batches(seed: int, steps: int, cfg: Config = Config(), batch: int | None = None) -> Iterator[Batch]:
    """`steps` CPU batches (images float32 [B, C, H, W], labels int64 [B]) from a generator seeded with `seed`."""
    g = torch.Generator().manual_seed(seed + 1)
    patterns = torch.randn(cfg.classes, cfg.channels, cfg.size, cfg.size, generator=g)
    size = batch or cfg.batch
    for _ in range(steps):
        y = torch.randint(0, cfg.classes, (size,), generator=g)
        x = patterns[y] + cfg.noise * torch.randn(size, cfg.channels, cfg.size, cfg.size, generator=g)
        yield x, y


def train(device: torch.device | str, steps: int, seed: int = 0, cfg: Config = Config(), *, log_every: int = 0,
          on_step=None, batch: int | None = None) -> TrainResult:
    """Builds the model from `seed`, trains it `steps` steps on `device`, returns losses and final state."""
    device = resolve_device(device)
    model = build(seed, cfg).to(device)
    optimizer = make_optimizer(model, cfg)
    return run_loop(model, optimizer, loss_fn, make_batches(seed, steps, cfg, batch), device,
                    log_every=log_every, on_step=on_step)


if __name__ == "__main__":
    args = make_parser(__doc__.splitlines()[0], steps=30).parse_args()
    main("cnn", args, lambda device: train(device, args.steps, args.seed, log_every=args.log_every))
