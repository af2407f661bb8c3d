"""What tracking live buffers for the memory census costs, beside what recording an op costs.

The census (`xladev.debug.memory_report()`) names each live buffer's line. What that needs is paid while the
program runs, in three places, whether or not a census is ever taken:
- each graph output gets its origin (`ir.origin_of`: the op, its template and its line) when a graph runs;
- each upload (a CPU tensor moved to the device) records the user's line (`stack.user_location`);
- each write through a view remembers the view (`Storage.cache_view`), so that a barrier drops its cached node.

This measures the cost of recording one op (a chain of elementwise ops with Python scalars, as
`bench_graph_build.py`) and each of the three, per call, in one process. Target (issue 39): the tracking adds at
most 1 µs to recording an op; an op adds at most one graph output, and uploads and view writes are rarer than ops.

    python tools/bench/bench_memory_tracking.py [--ops 20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def _per_call_us(fn, calls: int) -> float:
    """The best of 5 rounds of `calls` calls, in µs per call (the least disturbed round)."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        fn(calls)
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def measure(ops: int) -> dict:
    import torch

    import xladev
    from xladev.runtime.api.introspect import graph_of
    from xladev.runtime.graph import ir
    from xladev.runtime.graph.stack import user_location

    device = xladev.device()
    x = torch.ones(64, device=device)
    xladev.mark_step()

    def record(n):
        with warnings.catch_warnings():  # one long chain per round, by design: no barrier
            warnings.simplefilter("ignore", xladev.XladevWarning)
            y = x
            for i in range(n):
                y = y + 1.5 if i % 2 == 0 else y * 0.5
        return y

    record(200)  # warm the per-signature cache
    op_us = _per_call_us(record, ops)
    roots = graph_of([record(50)]).nodes  # real nodes of a recorded graph, as a barrier's outputs are

    def origins(n):
        for i in range(n):
            ir.origin_of(roots[i % len(roots)])

    def locations(n):
        for _ in range(n):
            user_location()

    host = torch.ones(16)

    def uploads(n):
        for _ in range(n):
            host.to(device)

    base = torch.zeros(4096, device=device)
    xladev.mark_step()
    views = [base[i:i + 4] for i in range(0, 4096, 4)]
    storage = base._st

    def view_writes(n):
        for i in range(n):
            storage.cache_view(views[i % len(views)])

    result = {"record_op_us": op_us, "origin_us": _per_call_us(origins, ops),
              "user_location_us": _per_call_us(locations, ops), "upload_us": _per_call_us(uploads, max(1, ops // 20)),
              "cache_view_us": _per_call_us(view_writes, ops)}
    result["tracking_per_op_us"] = result["origin_us"]  # an op adds at most one graph output
    result["worst_case_us"] = result["origin_us"] + result["user_location_us"] + result["cache_view_us"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    figures = measure(args.ops)
    print(f"recording an op:               {figures['record_op_us']:.2f} µs")
    print(f"origin of a graph output:      {figures['origin_us']:.3f} µs")
    print(f"user line of an upload:        {figures['user_location_us']:.3f} µs (an upload: "
          f"{figures['upload_us']:.1f} µs)")
    print(f"a view write remembered:       {figures['cache_view_us']:.3f} µs")
    print(f"tracking per op, at most:      {figures['tracking_per_op_us']:.3f} µs (an op makes at most one output); "
          f"all three at once {figures['worst_case_us']:.3f} µs (target: 1 µs)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
