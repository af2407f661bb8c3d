"""Pitfall: a different input shape every step recompiles every step.

Broken: each batch has a different size (the last, partial batches of a loader; variable lengths).
Fixed: pad every batch to one size (or a few bucket sizes) and mask the padding out of the loss.

    PT_XLA_DEBUG_LEVEL=1 python examples/pitfalls/dynamic_shapes.py [--fixed]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import xladev
from examples.pitfalls._base import batch, parser, report_compiles, setup

BUCKET = 16


def main() -> None:
    args = parser(__doc__).parse_args()
    device, model, optimizer, _ = setup()
    for step in range(args.steps):
        x, y = batch(step, size=8 + step % 8)                  # 8, 9, ..., 15 rows
        mask = torch.ones(len(y))
        if args.fixed:
            pad = BUCKET - len(y)
            x, y, mask = F.pad(x, (0, 0, 0, pad)), F.pad(y, (0, pad)), F.pad(mask, (0, pad))
        x, y, mask = x.to(device), y.to(device), mask.to(device)
        optimizer.zero_grad()
        losses = F.cross_entropy(model(x), y, reduction="none")
        loss = (losses * mask).sum() / mask.sum()
        loss.backward()
        optimizer.step()
        xladev.mark_step()
    print(f"final loss {loss.item():.4f}")
    report_compiles("fixed" if args.fixed else "broken")


if __name__ == "__main__":
    main()
