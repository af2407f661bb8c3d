"""Data parallel on 2 processes against 1 process on the whole batch: the example transformer's step.

    python tools/bench/bench_distributed.py [--steps N] [--batch B] [--json OUT]

In the same run: one process trains the transformer example on batches of B; then `xladev.launch` trains it
on 2 processes, each on half of every batch, `xladev.optimizer_step` averaging the gradients in one
all-reduce compiled into the step (gloo between the processes). Prints the median step time of each after
warm-up, their ratio, how the 2-process step splits (the ranks' wait for each other before the graph, the
graph's run), and how far the 2-process run ends from the 1-process run (largest weight difference, and
the loss of each step), which only float32 rounding should separate.

On the 2-core CI machine the two processes share the cores that one process has alone, so the ratio shows
the cost of the collectives and the synchronisation, not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `examples` and `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from examples import transformer
from examples._common import Batch, shard

WARMUP = 3


def _timed_loop(rank: int, world: int, steps: int, cfg: transformer.Config) -> dict:
    """Trains on this process's share of each batch; returns per-step times, losses and final weights."""
    import xladev
    import xladev.debug.metrics as met

    device = xladev.device()
    model = transformer.build(0, cfg).to(device)
    xladev.manual_seed(0)
    optimizer = transformer.make_optimizer(model, cfg)
    batches: list[Batch] = list(shard(transformer.make_batches(0, steps, cfg), rank, world))
    times, losses = [], []
    for x, y in batches:
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = transformer.loss_fn(model(x.to(device)), y.to(device))
        loss.backward()
        xladev.optimizer_step(optimizer)
        xladev.mark_step()
        xladev.wait_device_ops()
        times.append(time.perf_counter() - start)
        losses.append(loss.detach())
    wait = met.metric_data("CollectiveWaitTime")
    run = met.metric_data("CollectiveTime")
    return {"times": times, "losses": [float(v) for v in losses],
            "params": {n: p.detach().cpu() for n, p in model.named_parameters()},
            "wait_ms": [v / 1e6 for _, v in wait[2]][WARMUP:] if wait else [],
            "collective_ms": [v / 1e6 for _, v in run[2]][WARMUP:] if run else []}


def _replica(rank: int, steps: int, cfg: transformer.Config) -> dict:
    import xladev

    return _timed_loop(rank, xladev.world_size(), steps, cfg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    cfg = transformer.Config(dropout=0.0, batch=args.batch)

    import xladev

    one = xladev.launch(_replica, args=(args.steps, cfg), nprocs=1)[0]  # in this process
    two = xladev.launch(_replica, args=(args.steps, cfg), nprocs=2)
    one_ms = statistics.median(one["times"][WARMUP:]) * 1e3
    two_ms = statistics.median(max(a, b) for a, b in zip(two[0]["times"][WARMUP:], two[1]["times"][WARMUP:])) * 1e3
    weight_diff = max(float((two[0]["params"][n] - one["params"][n]).abs().max()) for n in one["params"])
    weight_scale = max(float(p.abs().max()) for p in one["params"].values())
    loss_diff = max(abs((a + b) / 2 - c) for a, b, c in zip(two[0]["losses"], two[1]["losses"], one["losses"]))
    result = {
        "one_process_ms": one_ms, "two_processes_ms": two_ms, "ratio": two_ms / one_ms,
        "wait_ms": statistics.median(two[0]["wait_ms"] + two[1]["wait_ms"]) if two[0]["wait_ms"] else None,
        "collective_graph_ms": statistics.median(two[0]["collective_ms"] + two[1]["collective_ms"])
        if two[0]["collective_ms"] else None,
        "max_weight_diff": weight_diff, "weight_scale": weight_scale, "max_loss_diff": loss_diff,
        "steps": args.steps, "batch": args.batch,
    }
    print(f"transformer, batch {args.batch}, {args.steps} steps ({WARMUP} warm-up)")
    print(f"  1 process, whole batch:     {one_ms:8.1f} ms/step")
    print(f"  2 processes, half each:     {two_ms:8.1f} ms/step  ({result['ratio']:.2f}x)")
    if result["wait_ms"] is not None:
        print(f"    of which: waiting for the other rank {result['wait_ms']:.1f} ms, "
              f"the step's graph with its all-reduce {result['collective_graph_ms']:.1f} ms")
    print(f"  2 processes vs 1: largest weight difference {weight_diff:.3g} (weights up to {weight_scale:.3g}), "
          f"largest loss difference {loss_diff:.3g}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
