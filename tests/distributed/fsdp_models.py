"""The models, data and eager CPU references of the FSDP and ZeRO-1 job (fsdp_job.py, test_fsdp_job.py).

The job trains each case on 2 processes, each on its half of every batch; `reference` trains the same model on the
CPU, eagerly, on the whole batch. With a loss that is a mean over the batch and equal halves, the mean of the two
processes' gradients is the whole batch's gradient, so both runs take the same steps up to float32 rounding.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

WIDTH = 64
IN = 32
OUT = 8
BATCH = 8  # the whole batch; each of the 2 processes takes 4 rows
STEPS = 3
LR = 0.05
MOMENTUM = 0.9
CLIP = 0.1  # ZeRO-1's max_norm: below the gradients' norm, so every step clips


class Block(nn.Module):
    """A residual block: the unit the auto-wrap policies pick. Its buffer `gain` checks buffers' handling."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.register_buffer("gain", torch.linspace(0.5, 1.5, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(self.norm(x))) * self.gain


class Net(nn.Module):
    """Input layer, two blocks, output layer: 12 parameters, 2 of 4096 elements."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(IN, WIDTH)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(WIDTH, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.inp(x)))


def build(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def batches(steps: int = STEPS, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The whole batches (x, y), the same in every process and in the reference."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(BATCH, IN, generator=g), torch.randn(BATCH, OUT, generator=g)) for _ in range(steps)]


def half(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    return t.chunk(world)[rank]


def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out.float() - y) ** 2).mean()


def sgd(params) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def adam(params) -> torch.optim.Adam:
    return torch.optim.Adam(params, lr=1e-2)


@dataclasses.dataclass
class Reference:
    """An eager CPU run: its losses, final state_dict, optimizer, last step's gradients, each step's gradient norm
    (before clipping), and each step's mean |output - target|·|output| (what one rounding of the outputs can move
    the loss by, per unit of relative rounding)."""

    losses: list[float]
    state: dict[str, torch.Tensor]
    optimizer: torch.optim.Optimizer
    grads: dict[str, torch.Tensor]
    norms: list[float]
    output_scales: list[float]


def reference(make_optimizer=sgd, steps: int = STEPS, clip: float | None = None, dtype=torch.float32) -> Reference:
    """Eager CPU training on the whole batch, in `dtype`."""
    model = build().to(dtype)
    optimizer = make_optimizer(model.parameters())
    run = Reference([], {}, optimizer, {}, [], [])
    for x, y in batches(steps):
        optimizer.zero_grad()
        out = model(x.to(dtype))
        loss = loss_fn(out, y.to(dtype))
        loss.backward()
        run.grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        run.norms.append(float(torch.cat([g.flatten() for g in run.grads.values()]).norm()))
        run.output_scales.append(float(((out - y.to(dtype)).abs() * out.abs()).mean().detach()))
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        run.losses.append(float(loss.detach()))
    run.state = {k: v.clone() for k, v in model.state_dict().items()}
    return run


def reference_mixed(compute_dtype: torch.dtype, steps: int = STEPS):
    """Eager CPU training on the whole batch with FSDP's mixed precision: float32 weights, each step's forward
    and backward in `compute_dtype` on a copy of them (buffers included), the gradients applied in float32.

    Returns:
      (losses, state_dict).
    """
    model = build()
    optimizer = sgd(model.parameters())
    losses = []
    for x, y in batches(steps):
        low = build().to(compute_dtype)
        low.load_state_dict({k: v.to(compute_dtype) for k, v in model.state_dict().items()})
        loss = loss_fn(low(x.to(compute_dtype)), y)
        loss.backward()
        for p, q in zip(model.parameters(), low.parameters()):
            p.grad = q.grad.float()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.clone() for k, v in model.state_dict().items()}
