"""Model-zoo benchmark: per model, the first step on `xla` (trace, lower, compile) and the steady step
against eager PyTorch on the CPU (and `jax.jit` for the nn.TransformerEncoder LM).

    python tools/bench/bench_models.py [--cases gpt2,resnet,...] [--quick] [--steps N] [--warmup W]
                                       [--block K] [--json OUT]

The models are the test zoo's (tests/models/zoo.py): tiny transformers configurations, torch.nn
attention and recurrent modules, torchvision-style CNNs, with the zoo's optimizers (AdamW; SGD with
momentum for the encoder). For each, from one process and one run:
- the first step on xla (a fresh model): recording the ops (trace), lowering the graph to StableHLO
  (lower; measured by lowering the same graph again, since the runtime's CompileTime covers both),
  XLA's compile (CompileTime − lower) and the rest (running the graph, transfers); then the second
  step, which compiles nothing new with Adam(W) (its state is device data before step 1's graph) and a
  second graph with SGD momentum (its first step clones the gradient, later steps update the buffer);
- the steady step: ms/step on xla (forward, backward, optimizer, `mark_step`; the execution overlaps
  the next step's recording as in a training loop) and in eager PyTorch on the CPU, in alternating blocks
  of K steps (see bench_runtime.time_interleaved), and the ratio xladev / eager;
- for the encoder LM, the same model, loss and SGD step written in jax and run in one `jax.jit` (from
  the same weights; its first loss is checked against eager), and the ratio xladev / jax.jit.
The batch lives on the device throughout (no host transfer is timed).
With `PJRT_DEVICE=CUDA` (jax's CUDA plugin, torch's CUDA build) the eager column runs on the same GPU and
the jax column on xladev's device (bench_runtime.eager_device); the heading names the chips.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import transformers  # noqa: E402

import xladev  # noqa: E402  (turns on jax_enable_x64: the jax code below says float32)
import xladev.debug.metrics as met  # noqa: E402
from bench_runtime import (  # noqa: E402
    F32, Timing, cross_entropy, devices_line, eager_zoo_case, first_loss_mismatches, layer_norm, linear,
    match_jax_to_xladev, sgd_momentum_step, time_interleaved)
from tests.models import zoo  # noqa: E402
from tests.models.harness import build, convert, to_device  # noqa: E402
from xladev.events import Compile, bus  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

transformers.logging.set_verbosity_error()

CASES = ("gpt2", "bert", "t5", "llama", "vit", "whisper", "transformer_encoder", "multihead_attention", "lstm",
         "resnet", "mobilenet_v3", "efficientnet")
QUICK = ("gpt2", "transformer_encoder", "lstm", "resnet")


@dataclasses.dataclass
class FirstStep:
    """Seconds spent in one compiling step, by phase."""

    total: float
    trace: float
    lower: float
    compile: float

    @property
    def rest(self) -> float:
        return max(0.0, self.total - self.trace - self.lower - self.compile)


@dataclasses.dataclass
class CaseResult:
    name: str
    params: int
    first: FirstStep
    second: FirstStep
    xladev: Timing
    eager: Timing
    jax_jit: Timing | None
    first_loss: dict

    @property
    def ratio_eager(self) -> float:
        return self.xladev.median_ms / self.eager.median_ms

    @property
    def ratio_jax(self) -> float | None:
        return self.xladev.median_ms / self.jax_jit.median_ms if self.jax_jit else None


def _lower_seconds(graph) -> float:
    """Lowers a compiled graph (its event's `RuntimeGraphInfo`) to StableHLO again, not compiling; the seconds."""
    start = time.perf_counter()
    graph.lower()
    return time.perf_counter() - start


def _compiling_step(step) -> FirstStep:
    """Runs one step that compiles and waits for it; splits its time into trace, lower, compile and the rest."""
    compiled = []
    with bus.subscribe(compiled.append, Compile):
        start = time.perf_counter()
        step(barrier=False)
        traced = time.perf_counter()
        xladev.mark_step(wait=True)
        total = time.perf_counter() - start
    lower = sum(_lower_seconds(e.graph) for e in compiled if e.graph is not None)
    compile_total = sum(e.compile_ns for e in compiled) / 1e9
    return FirstStep(total, traced - start, lower, max(0.0, compile_total - lower))


# ---------------------------------------------------------------------------------------------
# jax.jit reference: the zoo's nn.TransformerEncoder LM (post-norm, ReLU, key padding mask), SGD momentum
# ---------------------------------------------------------------------------------------------

def encoder_lm_loss(p: dict, ids, padding, heads: int = 2, layers: int = 2):
    """EncoderLM's forward and cross-entropy in jax, from its torch parameter names."""
    B, T = ids.shape
    x = p["emb.weight"][ids]
    masked = jnp.where(padding[:, None, None, :], F32(-jnp.inf), F32(0.0))  # over the keys
    for i in range(layers):
        b = f"encoder.layers.{i}."
        D = x.shape[-1]
        qkv = x @ p[b + "self_attn.in_proj_weight"].T + p[b + "self_attn.in_proj_bias"]
        q, k, v = (t.reshape(B, T, heads, D // heads).transpose(0, 2, 1, 3) for t in jnp.split(qkv, 3, axis=-1))
        scores = q @ k.transpose(0, 1, 3, 2) * F32(1.0 / (D // heads) ** 0.5) + masked
        a = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
        x = layer_norm(p, b + "norm1", x + linear(p, b + "self_attn.out_proj", a))
        x = layer_norm(p, b + "norm2", x + linear(p, b + "linear2", jax.nn.relu(linear(p, b + "linear1", x))))
    logits = linear(p, "head", x)
    return cross_entropy(logits.reshape(B * T, -1), ids.reshape(-1))


def encoder_jax_step(model: torch.nn.Module, batch: dict, first_loss: dict):
    """A jax.jit SGD-momentum step of the encoder LM from `model`'s weights; records its first loss."""
    params = {n: jnp.asarray(p.detach().numpy(), dtype=F32) for n, p in model.named_parameters()}
    ids, padding = jnp.asarray(batch["ids"].numpy()), jnp.asarray(batch["padding"].numpy())
    first_loss["jax"] = float(encoder_lm_loss(params, ids, padding))
    s = zoo.NN_ATTENTION["transformer_encoder"].settings
    step = sgd_momentum_step(lambda p_, i_, m_: encoder_lm_loss(p_, i_, m_), s["lr"], s["momentum"])
    state = {"p": params, "b": jax.tree.map(jnp.zeros_like, params)}

    def run():
        state["p"], state["b"], loss = step(state["p"], state["b"], ids, padding)
        loss.block_until_ready()

    return run


# ---------------------------------------------------------------------------------------------
# One case
# ---------------------------------------------------------------------------------------------

def bench_case(name: str, args) -> CaseResult:
    case = zoo.ALL[name]
    base = build(case)
    batch = case.batch(0)
    first_loss = {}

    eager = eager_zoo_case(case, base, batch)
    with torch.no_grad():
        first_loss["eager"] = case.loss(eager.model, eager.batch).item()

    dev = xladev.device()
    xladev.mark_step(wait=True)
    model = convert(base, dev, torch.float32)
    optimizer = case.make_optimizer(model.parameters())
    device_batch = to_device(batch, dev, torch.float32)
    xladev.mark_step(wait=True)
    last: list = []
    losses: list = []

    def xla_step(barrier: bool = True):
        optimizer.zero_grad(set_to_none=True)
        loss = case.loss(model, device_batch)
        loss.backward()
        optimizer.step()
        last[:] = [loss.detach()]
        if not losses:
            losses.append(loss.detach())
        if barrier:
            xladev.mark_step()

    compiles_before = met.metric_data("CompileTime")
    first, second = _compiling_step(xla_step), _compiling_step(xla_step)
    first_loss["xladev"] = losses[0].item()

    steps = {"xladev": (xla_step, lambda: last[0].cpu()), "eager": (eager.step, eager.wait)}
    if name == "transformer_encoder":
        steps["jax"] = (encoder_jax_step(base, batch, first_loss), lambda: None)
    samples = time_interleaved(steps, args.warmup, args.steps, args.block, args.settle)
    compiles = met.metric_data("CompileTime")[0] - (compiles_before[0] if compiles_before else 0)
    if compiles > 2:
        print(f"warning: {name} compiled {compiles} graphs; the steady step should compile none", file=sys.stderr)
    return CaseResult(name, sum(p.numel() for p in base.parameters()), first, second,
                      Timing.of(samples["xladev"], args.steps), Timing.of(samples["eager"], args.steps),
                      Timing.of(samples["jax"], args.steps) if "jax" in samples else None, first_loss)


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

def print_report(results: list[CaseResult], args) -> None:
    print(f"\nxladev model zoo benchmark ({platform.python_implementation()} {platform.python_version()}, "
          f"torch {torch.__version__}, jax {jax.__version__}, {os.cpu_count()} CPUs; steady: median over blocks "
          f"of {args.block} steps ('of means': the ratio of the blocks' means, periodic pauses included), {args.steps} "
          f"steps per column after {args.warmup} warm-up, columns alternating; "
          f"load average before {args.load_before})")
    print(devices_line())
    print(f"\n{'case':<21}{'params':>8}  {'first step s: trace / lower / compile / rest':<46}{'2nd step s':>11}"
          f"{'xladev ms':>11}{'eager ms':>10}{'xla/eager':>10}{'of means':>10}{'jax ms':>9}{'xla/jax':>9}")
    for r in results:
        f = r.first
        phases = f"{f.total:6.2f}: {f.trace:5.2f} / {f.lower:5.2f} / {f.compile:5.2f} / {f.rest:5.2f}"
        jax_ms = f"{r.jax_jit.median_ms:9.2f}{r.ratio_jax:8.2f}x" if r.jax_jit else f"{'-':>9}{'-':>9}"
        print(f"{r.name:<21}{r.params:>8}  {phases:<46}{r.second.total:>11.2f}{r.xladev.median_ms:>11.2f}"
              f"{r.eager.median_ms:>10.2f}{r.ratio_eager:>9.2f}x{r.xladev.mean_ms / r.eager.mean_ms:>9.2f}x{jax_ms}")
    print("\nfirst loss (same weights, same batch): " + "; ".join(
        f"{r.name} " + ", ".join(f"{k} {v:.6f}" for k, v in r.first_loss.items()) for r in results))


def to_json(results: list[CaseResult], args) -> dict:
    return {
        "cases": {
            r.name: {
                "params": r.params,
                "first_step_s": dataclasses.asdict(r.first) | {"rest": r.first.rest},
                "second_step_s": dataclasses.asdict(r.second) | {"rest": r.second.rest},
                "xladev_ms": r.xladev.median_ms, "eager_ms": r.eager.median_ms, "ratio_vs_eager": r.ratio_eager,
                "ratio_of_means_vs_eager": r.xladev.mean_ms / r.eager.mean_ms,
                "jax_ms": r.jax_jit.median_ms if r.jax_jit else None, "ratio_vs_jax": r.ratio_jax,
                "ms_per_step": {"xladev": dataclasses.asdict(r.xladev), "eager": dataclasses.asdict(r.eager)},
                "first_loss": r.first_loss,
            } for r in results
        },
        "config": {"devices": devices_line(), "steps": args.steps, "warmup": args.warmup, "block": args.block,
                   "cpus": os.cpu_count(),
                   "torch": torch.__version__, "jax": jax.__version__, "load_average_before": args.load_before},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help=f"comma-separated zoo cases (default: {','.join(CASES)})")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per case and column (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after the two compiling ones (default 3)")
    parser.add_argument("--block", type=int, default=5, help="steps per timed block (default 5)")
    parser.add_argument("--settle", type=float, default=0.2, help="pause before each timed block, s (default 0.2)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    args = parser.parse_args(argv)
    args.load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    names = args.cases.split(",") if args.cases else (QUICK if args.quick else CASES)
    unknown = [n for n in names if n not in zoo.ALL]
    if unknown:
        parser.error(f"unknown cases {unknown}; the zoo has {', '.join(zoo.ALL)}")
    match_jax_to_xladev()
    results = []
    for name in names:
        results.append(bench_case(name, args))
        print(f"{name}: first step {results[-1].first.total:.2f} s, steady {results[-1].xladev.median_ms:.2f} ms",
              file=sys.stderr, flush=True)
    for r in results:  # the columns must compute the same thing
        for k, v in first_loss_mismatches(r.first_loss).items():
            print(f"warning: {r.name} first loss of {k} ({v}) differs from eager ({r.first_loss['eager']})",
                  file=sys.stderr)
    print_report(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(results, args), indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
