"""The demo's training job: the example transformer with two deliberate problems, or with them fixed.

    python examples/demo_train.py --broken   # a new sequence length every step, loss.item() every step
    python examples/demo_train.py --fixed    # pad to one length; log from a step closure every 5 steps
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch.nn.functional as F  # noqa: E402

import xladev  # noqa: E402
from examples import transformer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--broken", action="store_true")
    mode.add_argument("--fixed", action="store_true")
    parser.add_argument("--steps", type=int, default=int(os.environ.get("XLADEV_DEMO_STEPS", 20)))
    parser.add_argument("--layers", type=int, default=int(os.environ.get("XLADEV_DEMO_LAYERS", 2)))
    args = parser.parse_args()

    cfg = transformer.Config(dropout=0.0, layers=args.layers)
    device = xladev.device()
    model = transformer.build(0, cfg).to(device)
    optimizer = transformer.make_optimizer(model, cfg)
    for step, (x, y) in enumerate(transformer.make_batches(0, args.steps, cfg)):
        length = 12 + step % (cfg.seq - 11)                     # the real length of this step's sequences
        if args.broken:
            # PROBLEM 1: the sequence length changes every step, so every step is a new graph.
            x, y = x[:, :length], y[:, :length]
        else:
            # FIX 1: keep one length; padded targets are ignored by the loss (-100).
            y = y.clone()
            y[:, length:] = -100
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1), ignore_index=-100)
        loss.backward()
        optimizer.step()
        if args.broken:
            # PROBLEM 2: reading the loss in the step: a device->host transfer every step.
            print(f"step {step:2d} loss {loss.item():.4f}")
        elif step % 5 == 0:
            # FIX 2: read it after the barrier, from a step closure, every 5 steps.
            xladev.add_step_closure(lambda s, l: print(f"step {s:2d} loss {l.item():.4f}"), args=(step, loss))
        xladev.mark_step()
        if not args.broken and step % 5:
            print(f"step {step:2d}")  # progress without reading the device


if __name__ == "__main__":
    main()
