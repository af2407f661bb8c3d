"""First-step compile time of a decoder's training step with its layers scanned (`scan_layers`) and unrolled.

    python tools/bench/bench_scan.py [--layers 16] [--steps 3] [--json OUT]

The model is a stack of the example transformer's blocks (pre-LayerNorm causal attention and a GELU MLP,
dropout 0). One training step is the stack's forward, a squared-mean loss, the backward and an SGD step, then
a step barrier. Each mode runs in a child process of its own, so neither reuses the other's traces or
compiled graphs (the persistent compilation cache is off), and prints:

- compile: the CompileTime of the first step's graphs (XLA's compile of the lowered graph, as recorded by
  the runtime's compile events), and the number of IR nodes in the step's graph;
- first step: the wall time of the first step (recording, lowering, compiling and running);
- steady step: the median wall time of the later steps (cached executables);
- the first step's loss: the two modes compute the same function, so they agree to float32 rounding.

Scanned, the layer's forward and backward are traced once and each appears once in the graph (inside the
`xla::scan` nodes); unrolled, the graph holds every layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `examples` and `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def child(mode: str, layers: int, steps: int) -> dict:
    """Trains `steps` steps in this process; returns the figures as a dict."""
    import torch

    import xladev
    from examples import transformer
    from xladev.events import Compile, bus
    from xladev.runtime.record.scan import scan_layers

    cfg = transformer.Config(layers=layers, dropout=0.0, d_model=128, heads=4, seq=64, batch=8)
    device = xladev.device()
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(transformer.Block(cfg) for _ in range(layers)).to(device)
    optimizer = torch.optim.SGD(blocks.parameters(), lr=1e-3)
    x = torch.randn(cfg.batch, cfg.seq, cfg.d_model).to(device)
    xladev.mark_step(wait=True)
    compiles: list = []
    sub = bus.subscribe(lambda e: compiles.append(e), Compile)
    times, losses = [], []
    for _ in range(steps):
        start = time.perf_counter()
        h = scan_layers(blocks, x) if mode == "scan" else x
        if mode == "unrolled":
            for block in blocks:
                h = block(h)
        loss = h.square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        xladev.mark_step(wait=True)
        times.append(time.perf_counter() - start)
        losses.append(float(loss))
        if len(times) == 1:
            first = list(compiles)
    sub.close()
    return {"mode": mode, "layers": layers, "compile_s": sum(e.compile_ns for e in first) / 1e9,
            "graph_nodes": max(e.num_nodes for e in first), "first_step_s": times[0],
            "steady_step_s": statistics.median(times[1:]) if len(times) > 1 else None,
            "first_loss": losses[0], "recompiles_after_first_step": len(compiles) - len(first)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--child", choices=("scan", "unrolled"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.layers, args.steps)))
        return
    results = []
    for mode in ("unrolled", "scan"):
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--layers", str(args.layers),
                              "--steps", str(args.steps)], capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.layers}-layer decoder, training step (d_model 128, 4 heads, sequence 64, batch 8), CPU backend")
    print(f"{'mode':<10} {'compile (s)':>12} {'graph nodes':>12} {'first step (s)':>15} {'steady step (ms)':>17} "
          f"{'first loss':>12}")
    for r in results:
        steady = f"{r['steady_step_s'] * 1e3:.1f}" if r["steady_step_s"] is not None else "-"
        print(f"{r['mode']:<10} {r['compile_s']:>12.2f} {r['graph_nodes']:>12} {r['first_step_s']:>15.2f} "
              f"{steady:>17} {r['first_loss']:>12.6f}")
    unrolled, scanned = results
    print(f"compile time, scanned / unrolled: {scanned['compile_s'] / unrolled['compile_s']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
