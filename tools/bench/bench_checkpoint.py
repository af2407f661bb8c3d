"""Peak temporary memory of an 8-layer decoder's forward and backward, with and without gradient checkpointing.

    python tools/bench/bench_checkpoint.py [--layers 8] [--json OUT]

The model is a stack of the example transformer's blocks (dropout 0). The graph is one backward of a
squared-mean loss, each block run plainly or through `torch.utils.checkpoint.checkpoint` (`use_reentrant` True
and False) or `torch_xla.utils.checkpoint.checkpoint`'s implementation. The figure is XLA's own memory
analysis of the compiled graph (`compiled.memory_analysis()`, recorded by the runtime at compile time): `temp`
is the most memory the program's intermediate values take at once, activations included; `argument` and
`output` are its inputs and results. It depends on the graph alone, not on timing.

Each block's recomputation starts from an optimization barrier; on the CPU backend the graph is compiled with
the barrier kept to the end (graph_lowering.compiler_options), so XLA neither merges the recomputation with
the forward nor keeps the forward's activations for it. The gradients of all variants are compared too.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `examples` and `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.utils.checkpoint as torch_checkpoint

import xladev
from examples import transformer
from xladev.events import Execute, bus
from xladev.runtime.record import checkpoint as xla_checkpoint
from xladev.runtime.compile.compilation import compile_cache

VARIANTS = {
    "none": lambda block, h: block(h),
    "torch.utils.checkpoint(use_reentrant=True)": lambda block, h: torch_checkpoint.checkpoint(
        block, h, use_reentrant=True),
    "torch.utils.checkpoint(use_reentrant=False)": lambda block, h: torch_checkpoint.checkpoint(
        block, h, use_reentrant=False),
    "torch_xla.utils.checkpoint": lambda block, h: xla_checkpoint.checkpoint(block, h, use_reentrant=True),
}


def measure(layers: int, variant: str) -> tuple[dict, torch.Tensor]:
    """The memory analysis of the graph computing the input's gradient through `layers` blocks, and that gradient."""
    cfg = transformer.Config(layers=layers, dropout=0.0, d_model=128, heads=4, seq=64, batch=8)
    device = xladev.device()
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(transformer.Block(cfg) for _ in range(layers)).to(device)
    x = torch.randn(cfg.batch, cfg.seq, cfg.d_model).to(device).requires_grad_()
    xladev.mark_step(wait=True)
    ran: list = []
    sub = bus.subscribe(lambda e: ran.append(e.graph_hash), Execute)
    h = x
    for block in blocks:
        h = VARIANTS[variant](block, h)
    h.square().mean().backward()
    xladev.mark_step(wait=True)
    sub.close()
    # The graph may have compiled for an earlier variant (torch_xla's is torch's reentrant one): the cache's entry.
    return dict(compile_cache.by_hash[ran[-1]].memory), x.grad.cpu()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    results = {}
    reference = None
    print(f"{args.layers}-layer decoder (d_model 128, 4 heads, sequence 64, batch 8): one backward, "
          f"XLA's memory analysis of the compiled graph (MB)")
    print(f"{'checkpointing':<46} {'temp':>9} {'argument':>9} {'output':>9} {'max |grad diff|':>16}")
    for variant in VARIANTS:
        memory, grad = measure(args.layers, variant)
        reference = grad if reference is None else reference
        diff = float((grad - reference).abs().max())
        results[variant] = {"memory": memory, "max_grad_diff": diff}
        mb = {k: memory.get(k, 0) / 1e6 for k in ("temp", "argument", "output")}
        print(f"{variant:<46} {mb['temp']:>9.2f} {mb['argument']:>9.2f} {mb['output']:>9.2f} {diff:>16.2e}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
