"""Building a big graph: a chain of N elementwise ops with Python scalars, on xladev and in `jax.jit`.

The same program both ways, in one process: `y = y + 1.5` and `y = y * 0.5`, alternating, N times, on a
64-element float32 vector, then the value is read. xladev: record the ops, then compile and run the graph
at the read. jax.jit: trace, compile and run. Each side is warmed up first on a small chain of its own
(imports, first-call costs), so the figures are the cost of the big graph. Target (DESIGN.md): xladev
within 3x of jax.jit at N = 10,000.

    python tools/bench/bench_graph_build.py [--ops 10000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def xladev_chain(n: int) -> dict:
    import torch

    import xladev
    from xladev.runtime.api.introspect import graph_of

    x = torch.ones(64, device=xladev.device())
    xladev.mark_step()
    start = time.perf_counter()
    y = x
    for i in range(n):
        y = y + 1.5 if i % 2 == 0 else y * 0.5
    recorded = time.perf_counter()
    inputs = len(graph_of([y]).inputs)
    counted = time.perf_counter()
    y.cpu()
    done = time.perf_counter()
    return {"record_s": recorded - start, "compile_run_s": done - counted, "total_s": (recorded - start) + (done - counted),
            "graph_inputs": inputs}


def jax_chain(n: int) -> dict:
    import jax
    import jax.numpy as jnp

    def chain(a):
        for i in range(n):
            a = a + 1.5 if i % 2 == 0 else a * 0.5
        return a

    start = time.perf_counter()
    jax.jit(chain)(jnp.ones(64, jnp.float32)).block_until_ready()
    return {"total_s": time.perf_counter() - start}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    xladev_chain(50)
    jax_chain(50)
    ours = xladev_chain(args.ops)
    ref = jax_chain(args.ops)
    ratio = ours["total_s"] / ref["total_s"]
    print(f"chain of {args.ops} elementwise ops with Python scalars")
    print(f"  xladev : record {ours['record_s']:.2f} s + compile and run {ours['compile_run_s']:.2f} s "
          f"= {ours['total_s']:.2f} s ({ours['graph_inputs']} graph inputs)")
    print(f"  jax.jit: trace, compile and run {ref['total_s']:.2f} s")
    print(f"  ratio xladev / jax.jit: {ratio:.2f}x (target <= 3x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"ops": args.ops, "xladev": ours, "jax": ref, "ratio_vs_jax": ratio}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
