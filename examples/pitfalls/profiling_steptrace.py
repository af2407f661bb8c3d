"""Pitfall: a profile without step markers (and without a barrier per step) is hard to read.

Broken: the loop is traced with no `StepTrace`: TensorBoard shows one long blur of host ops, and the
graph grows across iterations because nothing ends the step. Fixed: each step runs inside
`xp.StepTrace("train", step_num=step)`, whose exit marks the step; the profile shows `train N`
steps, each with its tracing span, compile or cached `xladev_<hash>` execution.

    python examples/pitfalls/profiling_steptrace.py [--fixed] [--logdir DIR]
    tensorboard --logdir DIR      # then the Profile tab
"""

from __future__ import annotations

import tempfile

import xladev
import xladev.debug.profiler as xp
from examples.pitfalls._base import batch, parser, report_compiles, setup


def main() -> None:
    p = parser(__doc__, steps=8)
    p.add_argument("--logdir", default=None)
    args = p.parse_args()
    logdir = args.logdir or tempfile.mkdtemp(prefix="xladev-profile-")
    device, model, optimizer, loss_fn = setup()
    batches = [tuple(t.to(device) for t in batch(step)) for step in range(args.steps)]
    xladev.mark_step()
    with xp.trace_session(logdir):
        for step, (x, y) in enumerate(batches):
            if args.fixed:
                with xp.StepTrace("train", step_num=step):     # exiting marks the step
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
            else:
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
    xladev.mark_step()
    print(f"profile written under {logdir}; view it with: tensorboard --logdir {logdir}")
    report_compiles("fixed" if args.fixed else "broken")


if __name__ == "__main__":
    main()
