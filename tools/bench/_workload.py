"""The workload the overhead benchmarks time: the example transformer's training step, built once.

Each overhead benchmark compares configurations of the same step in one process, so they share the
model, optimizer and batches here rather than each building its own.
"""

from __future__ import annotations

import dataclasses

import torch

import xladev
from examples import transformer
from examples._common import train_step


@dataclasses.dataclass
class TransformerWorkload:
    """The example transformer (dropout 0) on the xla device, its AdamW optimizer and four batches.

    Attributes:
      cfg: the transformer's configuration.
      device: the xla device.
      model: the model, on the device.
      optimizer: its optimizer.
      cpu_batches: (tokens, targets) pairs on the CPU.
      batches: the same pairs on the device.
    """

    cfg: transformer.Config
    device: torch.device
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    cpu_batches: list
    batches: list

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward, backward and optimizer step (no barrier); returns the loss tensor."""
        return train_step(self.model, self.optimizer, transformer.loss_fn, x, y)

    def batch(self, index: int) -> tuple:
        """Device batch `index`, cycling through the four."""
        return self.batches[index % len(self.batches)]


def example_transformer() -> TransformerWorkload:
    """Builds the workload and ends with a barrier, so nothing from the set-up lands in a timed step."""
    cfg = transformer.Config(dropout=0.0)
    device = xladev.device()
    model = transformer.build(0, cfg).to(device)
    optimizer = transformer.make_optimizer(model, cfg)
    cpu_batches = list(transformer.make_batches(0, 4, cfg))
    batches = [(x.to(device), y.to(device)) for x, y in cpu_batches]
    xladev.mark_step()
    return TransformerWorkload(cfg, device, model, optimizer, cpu_batches, batches)
