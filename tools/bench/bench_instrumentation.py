"""Step-time overhead of xladev's instrumentation on the example transformer, measured in one process.

Configurations, interleaved round by round so machine noise hits them alike:
  bare      nothing subscribed to the event bus (not even the compile history)
  metrics   the always-on counters and metrics (the default)
  debug2    metrics + PT_XLA_DEBUG_LEVEL=2 analysis (blocks for every execution, written to a file)

Prints the median ms/step of each and the overhead against `bare`. Targets (DESIGN.md): metrics under
2 %, PT_XLA_DEBUG_LEVEL=2 under 10 %.

    python tools/bench/bench_instrumentation.py [--steps 20] [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch  # noqa: E402

import xladev  # noqa: E402
from examples import transformer  # noqa: E402
from examples._common import train_step  # noqa: E402
from xladev.sinks.analysis.history import site_history  # noqa: E402
from xladev.sinks.analysis.sink import AnalysisSink, DebugOutput  # noqa: E402
from xladev.sinks.metrics import sink as metrics_sink  # noqa: E402


def configure(name: str, state: dict) -> None:
    """Subscribes exactly the sinks of configuration `name`."""
    for key in ("analysis",):
        if state.get(key):
            state[key].stop()
            state[key] = None
    metrics_sink.stop()
    if site_history.subscription is not None:
        site_history.subscription.close()
        site_history.subscription = None
    if name in ("metrics", "debug2"):
        metrics_sink.start()
        site_history.start()
    if name == "debug2":
        sink = AnalysisSink(2, DebugOutput(state["debug_file"]))
        sink.subscription = xladev.events.bus.subscribe(sink.on_event, wants_frames=True)
        state["analysis"] = sink


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    cfg = transformer.Config(dropout=0.0)
    device = xladev.device()
    model = transformer.build(0, cfg).to(device)
    optimizer = transformer.make_optimizer(model, cfg)
    batches = [(x.to(device), y.to(device)) for x, y in transformer.make_batches(0, 4, cfg)]
    xladev.mark_step()

    def run(steps: int) -> list[float]:
        times = []
        for i in range(steps):
            x, y = batches[i % len(batches)]
            start = time.perf_counter()
            train_step(model, optimizer, transformer.loss_fn, x, y)
            xladev.mark_step()
            times.append(time.perf_counter() - start)
        return times

    run(5)  # warm-up: compile the steady-state step
    configs = ["bare", "metrics", "debug2"]
    state = {"debug_file": os.path.join(tempfile.mkdtemp(), "debug.txt")}
    per_config: dict[str, list[float]] = {c: [] for c in configs}
    for _ in range(args.rounds):
        for name in configs:
            configure(name, state)
            run(2)
            per_config[name].append(statistics.median(run(args.steps)))
    configure("metrics", state)

    base = statistics.median(per_config["bare"])
    print(f"transformer example (d_model={cfg.d_model}, layers={cfg.layers}, seq={cfg.seq}, batch={cfg.batch}), "
          f"{args.rounds} rounds x {args.steps} steps, median of round medians")
    print(f"{'configuration':<14}{'ms/step':>10}{'overhead':>11}{'target':>9}")
    figures = {}
    for name, target in (("bare", None), ("metrics", 2.0), ("debug2", 10.0)):
        value = statistics.median(per_config[name])
        overhead = (value / base - 1) * 100
        figures[name] = {"ms_per_step": value * 1e3, "overhead_pct": overhead}
        print(f"{name:<14}{value * 1e3:>10.2f}{overhead:>10.1f}%{'' if target is None else f'  <{target:g}%':>9}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
