"""Step-time overhead of the JSONL event log (XLADEV_EVENT_LOG) on the example transformer, in one process.

Two configurations, interleaved round by round so machine noise hits them alike:
  off   the default sinks (counters, compile history), no event log
  on    the same, plus the event log writing to a file (what XLADEV_EVENT_LOG=path does)

Each step is a training step of examples/transformer.py (forward, backward, AdamW, mark_step) and
a `.item()` of the loss, so every step writes its transfers, op counts, execution, step and
device→host records. Prints the median ms/step of each and the overhead. Target (DESIGN.md):
under 3 % of step time.

    python tools/bench/bench_eventlog_overhead.py [--steps 20] [--rounds 15] [--json out.json]
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

import xladev  # noqa: E402
from _workload import example_transformer  # noqa: E402
from xladev.events import bus  # noqa: E402
from xladev.sinks import eventlog_writer as eventlog  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    work = example_transformer()
    cfg = work.cfg

    cpu_times: dict[str, list[float]] = {"off": [], "on": []}

    def run(steps: int, cpu: list | None = None) -> list[float]:
        times = []
        for i in range(steps):
            x, y = work.cpu_batches[i % len(work.cpu_batches)]
            start, start_cpu = time.perf_counter(), time.process_time()
            loss = work.step(x.to(work.device), y.to(work.device))  # uploads too: transfer records
            xladev.mark_step()
            loss.item()
            times.append(time.perf_counter() - start)
            if cpu is not None:
                cpu.append(time.process_time() - start_cpu)
        return times

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.events.jsonl")
        run(5)  # warm-up without the log: compile the steady-state step
        log = eventlog.EventLog(path)  # one log for the whole run, as XLADEV_EVENT_LOG gives
        log.start()
        run(3)  # its graph records (IR text) are written once, here
        log.subscription.close()
        log.subscription = None
        per_config: dict[str, list[float]] = {"off": [], "on": []}
        for round_index in range(args.rounds):
            order = ["off", "on"] if round_index % 2 == 0 else ["on", "off"]
            for name in order:
                if name == "on":
                    log.subscription = bus.subscribe(log.on_event, wants_frames=True)
                per_config[name].extend(run(args.steps, cpu_times[name]))
                if name == "on":
                    log.subscription.close()
                    log.subscription = None
        # The sink's own time per step, measured directly (no step-to-step noise).
        spent = [0]
        handler = log.on_event

        def timed(event, handler=handler):
            start = time.perf_counter_ns()
            handler(event)
            spent[0] += time.perf_counter_ns() - start

        log.subscription = bus.subscribe(timed, wants_frames=True)
        run(args.steps)
        log.subscription.close()
        log.subscription = None
        sink_us = spent[0] / args.steps / 1e3
        log.close()
        size = os.path.getsize(path)
        lines = sum(1 for _ in open(path))
    off = statistics.median(per_config["off"]) * 1e3
    on = statistics.median(per_config["on"]) * 1e3
    overhead = (on - off) / off * 100
    mean_off = statistics.fmean(per_config["off"]) * 1e3
    mean_on = statistics.fmean(per_config["on"]) * 1e3
    print(f"transformer step (d_model={cfg.d_model}, layers={cfg.layers}, seq={cfg.seq}, batch={cfg.batch}), "
          f"{args.rounds} rounds x {args.steps} steps each")
    print(f"  event log off: median {off:.3f} ms/step (mean {mean_off:.3f})")
    print(f"  event log on : median {on:.3f} ms/step (mean {mean_on:.3f})")
    print(f"  overhead     : {overhead:+.2f} % of step time (median), {(mean_on - mean_off) / mean_off * 100:+.2f} % (mean)"
          f"  [target < 3 %]")
    cpu_off = statistics.fmean(cpu_times["off"]) * 1e3
    cpu_on = statistics.fmean(cpu_times["on"]) * 1e3
    cpu_overhead = (cpu_on - cpu_off) / cpu_off * 100
    print(f"  CPU time     : off {cpu_off:.3f} ms/step, on {cpu_on:.3f} ms/step: {cpu_overhead:+.2f} % "
          f"(process CPU time, less sensitive to other processes on the machine)")
    print(f"  sink time    : {sink_us:.1f} us per step = {sink_us / 1e3 / off * 100:.2f} % of step time "
          f"(time inside the event log's handler)")
    print(f"  the log got {lines} lines, {size / lines:.0f} bytes per line on average")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"off_ms": off, "on_ms": on, "overhead_percent": overhead, "mean_off_ms": mean_off,
                       "mean_on_ms": mean_on, "sink_us_per_step": sink_us, "cpu_overhead_percent": cpu_overhead, "steps": args.steps, "rounds": args.rounds}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
