"""Pitfall: an op without an XLA lowering runs on the CPU, with two transfers and a sync each time.

Broken: `torch.median(h, dim=1)` and boolean-mask selection `h[h > 0]` (data-dependent shape).
Fixed: the median from `sort` (lowered), and `torch.where` instead of the mask selection.

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
        if args.fixed:
            n = logits.shape[1]
            median = logits.sort(dim=1).values[:, (n - 1) // 2]
            positive_sum = torch.where(logits > 0, logits, torch.zeros_like(logits)).sum()
        else:
            median = torch.median(logits, dim=1).values          # falls back to the CPU
            positive_sum = logits[logits > 0].sum()               # nonzero: a data-dependent shape
        loss = loss_fn(logits, y) + 1e-3 * (median.mean() + positive_sum)
        loss.backward()
        optimizer.step()
        xladev.mark_step()
    print(f"final loss {loss.item():.4f}")
    report_compiles("fixed" if args.fixed else "broken")


if __name__ == "__main__":
    main()
