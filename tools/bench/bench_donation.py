"""Peak device memory of the example transformer's training step, with and without buffer donation.

    python tools/bench/bench_donation.py [--steps N] [--json OUT]

The step barrier donates the old buffers of parameters and optimizer state updated in place to the
step's executable (`XLA_ENABLE_PARAM_ALIASING`, on by default). This runs the same steps of the same
model twice in one process, donation off then on, and prints for each:

- XLA's plan for the steady step's executable (its memory analysis): arguments + outputs + temporaries
  − the bytes its outputs share with donated arguments. That is the most the executable needs at once.
- Measured: the bytes of live device buffers right after the step's graph was dispatched (the moment
  the old values and the new ones both exist unless the old were donated), the maximum over the steps.
  On a GPU, the allocator's own peak (`memory_stats()["peak_bytes_in_use"]`) is printed too.
- The median step time of each after two warm-up steps (a process warm-up run comes first), so a cost
  of donation would show.

Both runs must end with the same loss: donation changes where results are written, never what they are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `examples` and `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax

import xladev
from tools.bench._workload import example_transformer
from xladev._flags import config
from xladev.events import Compile, bus
from xladev.runtime.compile.compilation import compile_cache
from xladev.runtime.execute.execution import execution


def _live_bytes() -> int:
    return sum(a.nbytes for a in jax.live_arrays() if not a.is_deleted())


def _allocator_peak() -> int | None:
    stats = jax.devices()[0].memory_stats()
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def run(donate: bool, steps: int) -> dict:
    """Trains `steps` steps of a fresh example transformer; returns its memory and time figures."""
    compile_cache.clear()  # each run compiles its own graphs, so their memory analysis is seen
    compiled: list = []
    peak = [0]
    original_run = execution.run

    def measured_run(*args, **kwargs):  # the real run; the live bytes are read as it returns
        arrays = original_run(*args, **kwargs)
        peak[0] = max(peak[0], _live_bytes())
        return arrays

    subscription = bus.subscribe(compiled.append, Compile, late_executions_ok=True)
    execution.run = measured_run
    try:
        with config.override(param_aliasing=donate):
            work = example_transformer()
            peak[0] = 0
            times = []
            for i in range(steps):
                start = time.perf_counter()
                loss = work.step(*work.batch(i))
                xladev.mark_step()
                xladev.wait_device_ops()
                times.append(time.perf_counter() - start)
            final_loss = loss.item()
    finally:
        execution.run = original_run
        bus.unsubscribe(subscription)
    step_graph = max(compiled, key=lambda e: (e.num_inputs, e.num_nodes))  # the steady step: optimizer state exists
    memory = step_graph.memory
    plan = memory.get("argument", 0) + memory.get("output", 0) + memory.get("temp", 0) - memory.get("alias", 0)
    steady = sorted(times[2:]) or sorted(times)
    return {
        "donated_buffers": step_graph.donated,
        "xla_plan_bytes": plan,
        "xla_memory": memory,
        "live_peak_bytes": peak[0],
        "allocator_peak_bytes": _allocator_peak(),
        "median_step_ms": steady[len(steady) // 2] * 1e3,
        "final_loss": final_loss,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    run(True, 3)  # warms the process (XLA's thread pools, jax's caches), so neither timed run pays for it
    off = run(False, args.steps)
    on = run(True, args.steps)
    mib = lambda b: f"{b / 2**20:8.2f} MiB"  # noqa: E731
    print(f"example transformer step, {args.steps} steps, device {jax.devices()[0].device_kind}")
    print(f"{'':34}{'no donation':>14}{'donation':>14}{'ratio':>8}")
    rows = [("buffers donated per step", off["donated_buffers"], on["donated_buffers"], None),
            ("XLA plan (args+out+temp-alias)", off["xla_plan_bytes"], on["xla_plan_bytes"], mib),
            ("live device buffers, peak", off["live_peak_bytes"], on["live_peak_bytes"], mib)]
    if off["allocator_peak_bytes"] is not None:
        rows.append(("allocator peak (GPU)", off["allocator_peak_bytes"], on["allocator_peak_bytes"], mib))
    rows.append(("median step", off["median_step_ms"], on["median_step_ms"], lambda v: f"{v:8.2f} ms"))
    for label, a, b, fmt in rows:
        shown = (fmt or str)
        ratio = f"{b / a:7.2f}x" if a else ""
        print(f"{label:34}{shown(a):>14}{shown(b):>14}{ratio:>8}")
    same = abs(off["final_loss"] - on["final_loss"]) <= 1e-6 * max(1.0, abs(off["final_loss"]))
    print(f"final loss: {off['final_loss']:.6f} without, {on['final_loss']:.6f} with donation"
          f" ({'identical' if same else 'DIFFERENT'})")
    if args.json:
        Path(args.json).write_text(json.dumps({"off": off, "on": on}, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
