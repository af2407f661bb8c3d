"""Pitfall: without a step barrier the graph grows with every iteration.

Broken: an inner loop of optimizer steps with no `mark_step()`: one giant graph, compiled once for the
whole loop, and every new loop length compiles again. Fixed: `mark_step()` after each step (or iterate
through `xladev.DeviceLoader`, which marks the step for you).

    PT_XLA_DEBUG_LEVEL=1 python examples/pitfalls/missing_barrier.py [--fixed]
"""

from __future__ import annotations

import xladev
import xladev.debug.metrics as met
from examples.pitfalls._base import batch, parser, report_compiles, setup


def main() -> None:
    args = parser(__doc__, steps=10).parse_args()
    device, model, optimizer, loss_fn = setup()
    batches = [tuple(t.to(device) for t in batch(step)) for step in range(args.steps)]
    xladev.mark_step()
    loader = xladev.DeviceLoader(batches, device) if args.fixed else batches
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"final loss {loss.item():.4f}")
    sizes = met.metric_data("TensorsGraphSize")
    print(f"largest graph: {int(max(v for _, v in sizes[2]))} IR nodes")
    report_compiles("fixed" if args.fixed else "broken")


if __name__ == "__main__":
    main()
