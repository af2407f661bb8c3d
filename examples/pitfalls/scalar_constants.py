"""Pitfall: Python scalars 0 and 1 are baked into the graph, so a value that is sometimes 0 or 1
compiles a graph per value.

Python numbers become graph inputs, so a changing learning rate costs nothing, except 0 and 1,
which XLA treats as constants (as in PyTorch/XLA). Broken: a mixing weight drawn from
{0, 0.5, 1} each step. Fixed: keep it in a device tensor (or set XLA_NO_SPECIAL_SCALARS=1).

    PT_XLA_DEBUG_LEVEL=1 python examples/pitfalls/scalar_constants.py [--fixed]
"""

from __future__ import annotations

import random

import torch

import xladev
from examples.pitfalls._base import batch, parser, report_compiles, setup


def main() -> None:
    args = parser(__doc__).parse_args()
    device, model, optimizer, loss_fn = setup()
    rng = random.Random(0)
    for step in range(args.steps):
        x, y = batch(step)
        x, y = x.to(device), y.to(device)
        weight = rng.choice([0.0, 0.5, 1.0])
        if args.fixed:
            weight = torch.tensor(weight).to(device)           # data, not a constant
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y) + (logits.pow(2).mean() * weight)  # mixing weight
        loss.backward()
        optimizer.step()
        xladev.mark_step()
    print(f"final loss {loss.item():.4f}")
    report_compiles("fixed" if args.fixed else "broken")


if __name__ == "__main__":
    main()
