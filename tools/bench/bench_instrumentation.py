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
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))


import xladev  # noqa: E402
from _workload import example_transformer  # noqa: E402
from xladev.sinks.pt_xla_debug.sink import AnalysisSink, DebugOutput  # noqa: E402
from xladev.sinks.metrics_registry import sink as metrics_sink  # noqa: E402


def configure(name: str, state: dict) -> None:
    """Subscribes exactly the sinks of configuration `name` (after clearing the bus)."""
    bus = xladev.events.bus
    with bus._lock:
        bus._subs = ()
        bus._refresh()
    metrics_sink.subscription = None  # the bus was cleared under it: start() subscribes again
    state["analysis"] = None
    if name in ("metrics", "debug2"):
        metrics_sink.start()
    if name == "debug2":
        sink = AnalysisSink(2, DebugOutput(state["debug_file"]))
        sink.subscription = bus.subscribe(sink.on_event, wants_frames=True)
        state["analysis"] = sink


class HandlerClock:
    """Time spent inside event handlers and frame capture: the instrumentation's own cost.

    Wall-clock differences between configurations drown in noise on a busy machine; this clock
    measures exactly the work the instrumentation adds to a step.
    """

    def __init__(self) -> None:
        self.ns = 0
        from xladev.runtime.graph import stack

        original = stack.capture_frames

        def timed_frames(*args, **kwargs):
            start = time.perf_counter_ns()
            try:
                return original(*args, **kwargs)
            finally:
                self.ns += time.perf_counter_ns() - start

        stack.capture_frames = timed_frames

    def wrap_handlers(self) -> None:
        bus = xladev.events.bus
        wrapped = []
        for sub in bus._subs:
            handler = getattr(sub.handler, "__wrapped_by_clock__", None) or sub.handler

            def timed(event, _handler=handler):
                start = time.perf_counter_ns()
                try:
                    _handler(event)
                finally:
                    self.ns += time.perf_counter_ns() - start

            timed.__wrapped_by_clock__ = handler
            wrapped.append(dataclasses.replace(sub, handler=timed))
        with bus._lock:
            bus._subs = tuple(wrapped)
            bus._refresh()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    work = example_transformer()
    cfg = work.cfg

    def run(steps: int) -> list[float]:
        times = []
        for i in range(steps):
            x, y = work.batch(i)
            start = time.perf_counter()
            work.step(x, y)
            xladev.mark_step()
            times.append(time.perf_counter() - start)
        return times

    run(5)  # warm-up: compile the steady-state step
    configs = ["bare", "metrics", "debug2"]
    state = {"debug_file": os.path.join(tempfile.mkdtemp(), "debug.txt")}
    per_config: dict[str, list[float]] = {c: [] for c in configs}
    own_ns: dict[str, list[float]] = {c: [] for c in configs}
    clock = HandlerClock()
    for _ in range(args.rounds):
        for name in configs:
            configure(name, state)
            clock.wrap_handlers()
            run(2)
            clock.ns = 0
            per_config[name].append(statistics.median(run(args.steps)))
            own_ns[name].append(clock.ns / args.steps)
    configure("metrics", state)

    base = statistics.median(per_config["bare"])
    print(f"transformer example (d_model={cfg.d_model}, layers={cfg.layers}, seq={cfg.seq}, batch={cfg.batch}), "
          f"{args.rounds} rounds x {args.steps} steps, median of round medians")
    print(f"{'configuration':<14}{'ms/step':>10}{'wall diff':>11}{'own ms/step':>13}{'own cost':>10}{'target':>9}")
    figures = {}
    for name, target in (("bare", None), ("metrics", 2.0), ("debug2", 10.0)):
        value = statistics.median(per_config[name])
        overhead = (value / base - 1) * 100
        own_ms = statistics.median(own_ns[name]) / 1e6
        own_pct = own_ms / (base * 1e3) * 100
        figures[name] = {"ms_per_step": value * 1e3, "wall_overhead_pct": overhead, "own_ms_per_step": own_ms,
                         "overhead_pct": own_pct}
        print(f"{name:<14}{value * 1e3:>10.2f}{overhead:>10.1f}%{own_ms:>13.3f}{own_pct:>9.2f}%"
              f"{'' if target is None else f'  <{target:g}%':>9}")
    print("own cost: time inside the sinks' handlers and Python frame capture, per step, as a share of the bare "
          "step (wall differences on a shared machine are mostly noise)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
