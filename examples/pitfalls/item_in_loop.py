"""Pitfall: reading a value inside the step (`loss.item()`, `print(loss)`) syncs the device every step.

Broken: `print(loss.item())` each step splits the step into two graphs and stalls on a device→host copy.
Fixed: log from a step closure, which runs after the barrier on data that is already computed, and
only every N steps.

    PT_XLA_DEBUG_LEVEL=1 python examples/pitfalls/item_in_loop.py [--fixed]
"""

from __future__ import annotations

import xladev
from examples.pitfalls._base import batch, parser, report_compiles, setup


def main() -> None:
    args = parser(__doc__).parse_args()
    device, model, optimizer, loss_fn = setup()
    for step in range(args.steps):
        x, y = batch(step)
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        if not args.fixed:
            print(f"step {step} loss {loss.item():.4f}")          # a sync in the middle of the step
        loss.backward()
        optimizer.step()
        if args.fixed and step % 5 == 0:
            xladev.add_step_closure(lambda s, l: print(f"step {s} loss {l.item():.4f}"), args=(step, loss))
        xladev.mark_step()
    report_compiles("fixed" if args.fixed else "broken")


if __name__ == "__main__":
    main()
