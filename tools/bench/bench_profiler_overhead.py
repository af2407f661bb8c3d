"""Cost of the runtime's profiler annotations when no capture runs, on the example transformer step.

Configurations, interleaved round by round (order rotated) in one process so machine noise hits them alike:
  off        annotations forced off (`annotate.set_enabled(False)`): the helpers return at once
  on         the default: each compile/execute/barrier asks jax whether a capture is recording (no)
  on+Trace   `on`, with the step wrapped in xp.StepTrace and the forward in xp.Trace (user annotations)
  capturing  (for information) an in-process trace is recording the steps

Prints the median ms/step of each and the overhead against `off`. Target: `on` under 1 %.

    python tools/bench/bench_profiler_overhead.py [--steps 20] [--rounds 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import xladev  # noqa: E402
from _workload import example_transformer  # noqa: E402
import xladev.debug.profiler as xp  # noqa: E402
from examples import transformer  # noqa: E402
from xladev.runtime.graph import annotate  # noqa: E402


def annotation_cost_ns(repeat: int = 200_000) -> float:
    """ns of the annotation calls of one step with no capture running: its two uploads (batch, labels),
    the barrier's begin and end, and the check before its one graph run."""
    from xladev.events import Cause, CauseKind

    cause = Cause(CauseKind.USER_MARK_STEP)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter_ns()
        for i in range(repeat):
            with annotate.to_device_span(1024, i):
                pass
            with annotate.to_device_span(64, i):
                pass
            annotate.barrier_begin(i, cause)
            annotate.enabled()  # Execution.run: a capture records? (no: the executable's fast path)
            annotate.barrier_end(i)
        best = min(best, (time.perf_counter_ns() - start) / repeat)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-capture", action="store_true", help="skip the `capturing` configuration")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    work = example_transformer()
    cfg = work.cfg
    model, optimizer = work.model, work.optimizer

    def plain_step(x, y) -> None:
        work.step(x, y)
        xladev.mark_step()

    def annotated_step(x, y) -> None:
        with xp.StepTrace("train"):
            optimizer.zero_grad(set_to_none=True)
            with xp.Trace("forward"):
                loss = transformer.loss_fn(model(x), y)
            loss.backward()
            optimizer.step()

    def run(step, steps: int) -> list[float]:
        times = []
        for i in range(steps):
            x, y = work.batch(i)
            start = time.perf_counter()
            step(x, y)
            times.append(time.perf_counter() - start)
        return times

    run(plain_step, 5)  # warm-up: compile the steady-state step
    run(annotated_step, 3)
    logdir = tempfile.mkdtemp(prefix="xladev_bench_profile_")
    configs = ["off", "on", "on+Trace"] + ([] if args.no_capture else ["capturing"])
    per_config: dict[str, list[float]] = {c: [] for c in configs}
    for round_index in range(args.rounds):
        shift = round_index % len(configs)  # rotate the order, so no configuration always runs first
        for name in configs[shift:] + configs[:shift]:
            annotate.set_enabled(name != "off")
            step = annotated_step if name == "on+Trace" else plain_step
            run(step, 2)
            if name == "capturing":
                xp.start_trace(logdir)
            per_config[name].append(statistics.median(run(step, args.steps)))
            if name == "capturing":
                xp.stop_trace()
    annotate.set_enabled(True)

    base = statistics.median(per_config["off"])
    print(f"transformer example (d_model={cfg.d_model}, layers={cfg.layers}, seq={cfg.seq}, batch={cfg.batch}), "
          f"{args.rounds} rounds x {args.steps} steps, median of round medians")
    print(f"{'configuration':<14}{'ms/step':>10}{'overhead':>11}{'target':>9}")
    figures = {}
    for name in configs:
        value = statistics.median(per_config[name])
        overhead = (value / base - 1) * 100
        figures[name] = {"ms_per_step": value * 1e3, "overhead_pct": overhead}
        target = "  <1%" if name == "on" else ""
        print(f"{name:<14}{value * 1e3:>10.3f}{overhead:>10.2f}%{target:>9}")
    # The same cost measured directly: the annotation calls one steady step makes (one execution, one
    # barrier), timed in a tight loop with no capture running, against the step time.
    per_step_ns = annotation_cost_ns()
    step_ns = statistics.median(per_config["on"]) * 1e9
    print(f"annotation calls of one step, no capture: {per_step_ns:.0f} ns = {per_step_ns / step_ns * 100:.4f} % "
          f"of a {step_ns / 1e6:.3f} ms step")
    figures["direct"] = {"ns_per_step": per_step_ns, "overhead_pct": per_step_ns / step_ns * 100}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
