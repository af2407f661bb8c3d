"""Pitfall: an op left on the CPU runs there with two transfers and a sync each time.

Broken: `torch.bincount` of the predictions and boolean-mask selection `h[h > 0]`: both have a
data-dependent output shape, which XLA cannot compile (docs/ops.md lists why each op stays on the CPU).
Fixed: counts from `one_hot(...).sum(0)` (a fixed number of classes), and `torch.where` instead of the
mask selection.

    PT_XLA_DEBUG_LEVEL=1 python examples/pitfalls/unlowered_op.py [--fixed]
"""

from __future__ import annotations

import torch

import xladev
from examples.pitfalls._base import batch, parser, report_compiles, setup


def main() -> None:
    args = parser(__doc__).parse_args()
    device, model, optimizer, loss_fn = setup()
    for step in range(args.steps):
        x, y = batch(step)
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        logits = model(x)
        classes = logits.shape[1]
        if args.fixed:
            counts = torch.nn.functional.one_hot(logits.argmax(dim=1), classes).sum(dim=0)
            positive_sum = torch.where(logits > 0, logits, torch.zeros_like(logits)).sum()
        else:
            counts = torch.bincount(logits.argmax(dim=1), minlength=classes)  # size max+1: on the CPU
            positive_sum = logits[logits > 0].sum()               # nonzero: a data-dependent shape
        # Weigh each class's logits by how often it was predicted (a toy balancing term).
        balance = (logits.mean(dim=0) * counts.float()).sum() / logits.shape[0]
        loss = loss_fn(logits, y) + 1e-3 * (balance + positive_sum)
        loss.backward()
        optimizer.step()
        xladev.mark_step()
    print(f"final loss {loss.item():.4f}")
    report_compiles("fixed" if args.fixed else "broken")


if __name__ == "__main__":
    main()
