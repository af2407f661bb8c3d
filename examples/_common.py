"""Shared pieces of the example training scripts: arguments, device choice, the training loop.

Every example follows the same recipe, so a test or a benchmark can run any of them the same way:
- `build(seed, ...)` makes the model on the CPU from a seeded RNG (identical weights on every device);
- `make_batches(seed, steps, ...)` makes synthetic data on the CPU from a seeded `torch.Generator`,
  so a CPU run and an xla run see exactly the same numbers;
- `train(device, steps, seed, ...)` moves both to the device and runs `steps` optimizer steps.

On `xla` each step ends with `xladev.mark_step()`, which compiles the step once and then reuses it.
The loop keeps each step's loss as a tensor and reads the values only when it prints them (or at the
end), so it adds no graph execution to a step: after `mark_step` a loss is already device data.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Callable, Iterable

import torch
import torch.nn as nn

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclasses.dataclass
class TrainResult:
    """What a training run produced.

    Attributes:
      losses: the loss of each step, as Python floats.
      params: the final parameters and buffers by name, as CPU tensors.
      seconds: wall time of the whole loop (data transfer and syncs included).
    """

    losses: list[float]
    params: dict[str, torch.Tensor]
    seconds: float


def resolve_device(name: str | torch.device) -> torch.device:
    """`"xla"` (or `"xla:N"`) gives the xladev device; anything else goes to `torch.device`."""
    text = str(name)
    if text.startswith("xla"):
        import xladev

        index = int(text.split(":", 1)[1]) if ":" in text else None
        return xladev.device(index) if index is not None else xladev.device()
    return torch.device(text)


def is_xla(device: torch.device) -> bool:
    return torch.device(device).type == "xla"


def end_step(device: torch.device) -> None:
    """The step barrier on xla; nothing on other devices (eager PyTorch has already run the step)."""
    if is_xla(device):
        import xladev

        xladev.mark_step()


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable, x: torch.Tensor,
               y: torch.Tensor, data_parallel: bool = False) -> torch.Tensor:
    """One forward, backward and optimizer step; returns the (detached) loss tensor without reading it.

    With `data_parallel`, `xladev.optimizer_step` averages the gradients across the job's replicas first.
    """
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    if data_parallel:
        import xladev

        xladev.optimizer_step(optimizer)
    else:
        optimizer.step()
    return loss.detach()


def shard(batches: Iterable[Batch], rank: int, world: int) -> Iterable[Batch]:
    """Each batch's slice for replica `rank` of `world` (equal slices along the batch dimension).

    Raises:
      ValueError: a batch does not split into `world` equal slices.
    """
    for x, y in batches:
        if x.shape[0] % world:
            raise ValueError(f"a batch of {x.shape[0]} does not split over {world} replicas")
        size = x.shape[0] // world
        yield x[rank * size:(rank + 1) * size], y[rank * size:(rank + 1) * size]


def state_on_cpu(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers by name, copied to the CPU."""
    return {name: t.detach().cpu().clone() for name, t in model.state_dict().items()}


def run_loop(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable, batches: Iterable[Batch],
             device: torch.device, *, log_every: int = 0, on_step: Callable[[int, torch.Tensor], None] | None = None,
             label: str = "", data_parallel: bool = False) -> TrainResult:
    """Trains `model` (already on `device`) on CPU `batches`, one optimizer step per batch.

    Args:
      log_every: print the loss every this many steps (0: never). Reading a loss right after the
        step barrier is a transfer of one number, not an extra graph execution.
      on_step: called as `on_step(step, loss)` after each step's barrier (tests count compiles here).
      label: a prefix for printed lines.
      data_parallel: average the gradients across the job's replicas each step (`xladev.optimizer_step`).
    """
    model.train()
    losses: list[torch.Tensor] = []
    start = time.perf_counter()
    for step, (x, y) in enumerate(batches):
        x, y = x.to(device), y.to(device)
        loss = train_step(model, optimizer, loss_fn, x, y, data_parallel)
        end_step(device)
        losses.append(loss)
        if on_step is not None:
            on_step(step, loss)
        if log_every and (step % log_every == 0):
            print(f"{label}step {step:4d}  loss {loss.item():.6f}", flush=True)
    values = [v.item() for v in losses]
    seconds = time.perf_counter() - start
    return TrainResult(values, state_on_cpu(model), seconds)


def make_parser(description: str, *, steps: int, seed: int = 0) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="xla", help="xla (the xladev lazy device, default) or cpu")
    parser.add_argument("--steps", type=int, default=steps, help=f"optimizer steps (default {steps})")
    parser.add_argument("--seed", type=int, default=seed, help="seed of the weights and the data")
    parser.add_argument("--log-every", type=int, default=1, help="print the loss every N steps (default 1)")
    return parser


class CompileCounter:
    """Counts xla graph compiles (Compile events) while active; a context manager."""

    def __init__(self) -> None:
        self.count = 0
        self._sub = None

    def __call__(self, event) -> None:
        self.count += 1

    def __enter__(self) -> "CompileCounter":
        from xladev.events import Compile, bus

        self._sub = bus.subscribe(self, Compile)
        return self

    def __exit__(self, *exc) -> None:
        self._sub.close()


def main(name: str, args: argparse.Namespace, run: Callable[[torch.device], TrainResult]) -> TrainResult:
    """Runs `run(device)` for a script and prints a summary line (and the compile count on xla)."""
    if args.steps <= 0:
        raise SystemExit("--steps must be positive")
    device = resolve_device(args.device)
    if is_xla(device):
        with CompileCounter() as compiles:
            result = run(device)
    else:
        compiles = None
        result = run(device)
    first, last = result.losses[0], result.losses[-1]
    line = f"{name} on {device}: {len(result.losses)} steps in {result.seconds:.2f} s, loss {first:.4f} -> {last:.4f}"
    if compiles is not None:
        line += f", {compiles.count} graph compile(s)"
    print(line)
    return result
