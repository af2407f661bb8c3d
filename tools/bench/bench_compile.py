"""torch.compile benchmark: `backend="xladev"` against the same step in `jax.jit`, the lazy path and eager CPU.

    python tools/bench/bench_compile.py [--steps N] [--warmup W] [--block K] [--models gpt2,llama,...] [--quick]
                                        [--json OUT]

Prints, from one process and one run (the columns of each table in alternating blocks of K steps, see
bench_runtime.time_interleaved; a column's figure is the median over its blocks of the mean step time):
- training steps of the example MLP (SGD momentum) and transformer (AdamW): the model with its loss, and the
  optimizer step, each through `torch.compile(backend="xladev")` (then the barrier, as on the lazy path),
  the lazy path (xladev's default), the same step hand-written in one `jax.jit`, and eager PyTorch on the CPU;
  with the ratios torch.compile / jax.jit (target <= 1.10) and / eager;
- inference: the compiled model's forward under `no_grad` against `jax.jit` of the same forward (target
  <= 1.05) and eager CPU;
- host time per compiled call: the wall time of each compiled program's call on the host (its inputs, the
  dispatch, its outputs wrapped as tensors; the device runs asynchronously), per graph, for the transformer
  (target < 1 ms), and how much of its CPU time is jax's own call of the executable;
- the tiny real models of the model zoo: a steady training step through the backend against eager CPU
  (target: no slower); a case whose graph breaks where the report gives a remedy (GPT-2's logging call) is
  timed again with each remedy.

With `PJRT_DEVICE=CUDA` (jax's CUDA plugin, torch's CUDA build) the eager column runs on the same GPU and
the jax column on xladev's device (bench_runtime.eager_device); the heading names the chips.
"""

from __future__ import annotations

import argparse
import contextlib
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
import bench_runtime as br  # noqa: E402
from examples import mlp, transformer  # noqa: E402
from examples._common import train_step  # noqa: E402
from tests.models import zoo  # noqa: E402
from tests.models.harness import build, convert, to_device  # noqa: E402
from xladev.runtime.dynamo import fx_program  # noqa: E402
from xladev.runtime.execute.execution import Execution  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

transformers.logging.set_verbosity_error()

TRAIN_TARGET, INFER_TARGET, HOST_CALL_TARGET_MS = 1.10, 1.05, 1.0
ZOO = ("gpt2", "llama", "bert", "vit", "t5", "whisper")
QUICK_ZOO = ("gpt2", "llama")


def _ms(t: br.Timing) -> float:
    return t.median_ms


def _capturable(opt: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Keeps an Adam-family optimizer's step counts on the device (docs/compile.md): with CPU step counts its
    compiled step runs lazily, op by op. The same arithmetic: only where the count lives changes."""
    if "capturable" in opt.defaults and not opt.state:
        for group in opt.param_groups:
            group["capturable"] = True
    return opt


def _compiled_step(module, cfg, x, y):
    """The model with its loss, and the optimizer step, through torch.compile (docs/compile.md); the barrier
    ends each step, as the lazy path's does."""
    dev = xladev.device()
    model = module.build(0, cfg).to(dev)
    opt = _capturable(module.make_optimizer(model, cfg))
    forward = torch.compile(lambda a, b: module.loss_fn(model(a), b), backend="xladev")
    opt_step = torch.compile(opt.step, backend="xladev")
    last: list = []

    def step():
        opt.zero_grad()
        loss = forward(x, y)
        loss.backward()
        opt_step()
        last[:] = [loss]
        xladev.mark_step()

    return step, (lambda: last[0].cpu()), forward


def compiled_training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss, batch):
    """A training step whose loss (the model's forward with it) and optimizer step go through
    torch.compile(backend="xladev") (docs/compile.md), the barrier ending it as on the lazy path.

    Args:
      model: the model, on the xla device.
      optimizer: its optimizer, not yet stepped (Adam-family ones are made capturable, see _capturable).
      loss: (model, batch) -> the scalar loss.
      batch: the batch, on the xla device.

    Returns:
      (step, wait) for bench_runtime.time_interleaved: wait returns once the last step's graph has run.
    """
    optimizer = _capturable(optimizer)
    compiled_loss = torch.compile(lambda b: loss(model, b), backend="xladev")
    opt_step = torch.compile(optimizer.step, backend="xladev")
    last: list = []

    def step():
        optimizer.zero_grad(set_to_none=True)
        value = compiled_loss(batch)
        value.backward()
        opt_step()
        last[:] = [value.detach()]
        xladev.mark_step()

    return step, (lambda: last[0].cpu())


def _lazy_step(module, cfg, x, y):
    dev = xladev.device()
    model = module.build(0, cfg).to(dev)
    opt = module.make_optimizer(model, cfg)
    last: list = []

    def step():
        last[:] = [train_step(model, opt, module.loss_fn, x, y)]
        xladev.mark_step()

    return step, (lambda: last[0].cpu())


def _eager_step(module, cfg, x, y):
    dev = br.eager_device()
    model = module.build(0, cfg).to(dev)
    opt = module.make_optimizer(model, cfg)
    x, y = x.to(dev), y.to(dev)
    return (lambda: train_step(model, opt, module.loss_fn, x, y)), br.eager_wait(dev)


@dataclasses.dataclass
class Training:
    name: str
    compiled: br.Timing
    lazy: br.Timing
    jax_jit: br.Timing
    eager: br.Timing

    def ratios(self) -> dict:
        return {"compiled_over_jax": _ms(self.compiled) / _ms(self.jax_jit),
                "compiled_over_eager": _ms(self.compiled) / _ms(self.eager),
                "lazy_over_jax": _ms(self.lazy) / _ms(self.jax_jit)}


def bench_training(name: str, module, cfg, make_jax_step, args) -> Training:
    x_cpu, y_cpu = next(iter(module.make_batches(0, 1, cfg)))
    dev = xladev.device()
    x, y = x_cpu.to(dev), y_cpu.to(dev)
    params = br.torch_params(module.build(0, cfg))
    jax_run = make_jax_step(params, jnp.asarray(x_cpu.numpy()), jnp.asarray(y_cpu.numpy()))
    compiled, wait, _ = _compiled_step(module, cfg, x, y)
    steps = {"compiled": (compiled, wait), "lazy": _lazy_step(module, cfg, x, y), "jax": (jax_run, lambda: None),
             "eager": _eager_step(module, cfg, x_cpu, y_cpu)}
    samples = br.time_interleaved(steps, args.warmup, args.steps, args.block, args.settle)
    t = {k: br.Timing.of(v, args.steps) for k, v in samples.items()}
    return Training(name, t["compiled"], t["lazy"], t["jax"], t["eager"])


def _jax_mlp_step(cfg):
    def make(params, x, y):
        step = br.sgd_momentum_step(lambda p, a, b: br.mlp_loss(p, a, b, cfg), cfg.lr, cfg.momentum)
        state = {"p": params, "b": jax.tree.map(jnp.zeros_like, params)}

        def run():
            state["p"], state["b"], loss = step(state["p"], state["b"], x, y)
            loss.block_until_ready()

        return run

    return make


def _jax_tlm_step(cfg):
    def make(params, x, y):
        step = br.adamw_step(lambda p, a, b: br.tlm_loss(p, a, b, cfg), cfg.lr, cfg.weight_decay)
        zeros = lambda: jax.tree.map(jnp.zeros_like, params)  # noqa: E731
        state = {"p": params, "m": zeros(), "v": zeros(), "t": 0}

        def run():
            state["t"] += 1
            state["p"], state["m"], state["v"], loss = step(state["p"], state["m"], state["v"],
                                                            jnp.asarray(state["t"], br.F32), x, y)
            loss.block_until_ready()

        return run

    return make


# ---- inference ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Inference:
    name: str
    compiled: br.Timing
    jax_jit: br.Timing
    eager: br.Timing


def bench_inference(args) -> Inference:
    cfg = br.TLM_CFG
    x_cpu, _ = next(iter(transformer.make_batches(0, 1, cfg)))
    dev = xladev.device()
    x = x_cpu.to(dev)
    model = torch.compile(transformer.build(0, cfg).to(dev).eval(), backend="xladev")
    eager_dev = br.eager_device()
    eager = transformer.build(0, cfg).to(eager_dev).eval()
    x_eager = x_cpu.to(eager_dev)
    params = br.torch_params(transformer.build(0, cfg))
    forward = jax.jit(lambda p, i: br.tlm_logits(p, i, cfg))
    xj = jnp.asarray(x_cpu.numpy())
    last: list = []

    def compiled():
        with torch.no_grad():
            last[:] = [model(x)]

    def jax_run():
        forward(params, xj).block_until_ready()

    def eager_run():
        with torch.no_grad():
            eager(x_eager)

    samples = br.time_interleaved({"compiled": (compiled, lambda: last[0].cpu()), "jax": (jax_run, lambda: None),
                                   "eager": (eager_run, br.eager_wait(eager_dev))},
                                  args.warmup, args.steps, args.block, args.settle)
    t = {k: br.Timing.of(v, args.steps) for k, v in samples.items()}
    return Inference("transformer forward", t["compiled"], t["jax"], t["eager"])


# ---- host time per compiled call -------------------------------------------------------------------

def bench_host_calls(args) -> dict[str, dict[str, float]]:
    """Per compiled program of the transformer's training step, the median host ms per call: wall time, and the
    calling thread's CPU time (`time.thread_time`). On this 2-core machine XLA's threads, still computing the
    previous program, share the cores with the call, which stretches its wall time; the CPU time is what the
    call itself costs, as on an accelerator whose device computes elsewhere."""
    cfg = br.TLM_CFG
    x_cpu, y_cpu = next(iter(transformer.make_batches(0, 1, cfg)))
    dev = xladev.device()
    x, y = x_cpu.to(dev), y_cpu.to(dev)
    step, wait, _ = _compiled_step(transformer, cfg, x, y)
    for _ in range(args.warmup):
        step()
    wait()
    times: dict[str, list[tuple[float, float, float]]] = {}
    original, start_program = fx_program.FxProgram.__call__, Execution._start
    in_jax = [0.0]

    def timed(self, call_args):
        in_jax[0] = 0.0
        start, cpu = time.perf_counter(), time.thread_time()
        out = original(self, call_args)
        times.setdefault(self.name, []).append((time.perf_counter() - start, time.thread_time() - cpu, in_jax[0]))
        return out

    def timed_start(self, graph, entry, *rest):
        # jax's own call of the executable: its argument checks, XLA's launch and its output arrays.
        executable = entry.executable

        def call(*arrays):
            cpu = time.thread_time()
            try:
                return executable(*arrays)
            finally:
                in_jax[0] += time.thread_time() - cpu

        entry.executable = call
        try:
            return start_program(self, graph, entry, *rest)
        finally:
            entry.executable = executable

    fx_program.FxProgram.__call__, Execution._start = timed, timed_start
    try:
        for _ in range(args.steps):
            step()
            wait()  # the host call must not include waiting for the previous step's device work
    finally:
        fx_program.FxProgram.__call__, Execution._start = original, start_program
    return {name: {"wall_ms": statistics.median(w for w, _, _ in v) * 1e3,
                   "cpu_ms": statistics.median(c for _, c, _ in v) * 1e3,
                   "jax_cpu_ms": statistics.median(j for _, _, j in v) * 1e3} for name, v in times.items()}


# ---- the zoo ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class ZooCase:
    name: str
    compiled: br.Timing
    eager: br.Timing

    @property
    def ratio(self) -> float:
        return _ms(self.compiled) / _ms(self.eager)


def bench_zoo_case(name: str, args, remedy=None) -> ZooCase:
    with contextlib.ExitStack() as stack:
        return _bench_zoo_case(name, args, remedy, stack)


def _bench_zoo_case(name: str, args, remedy, stack: contextlib.ExitStack) -> ZooCase:
    # Every Adam(W) shares one code object, `step`: TorchDynamo recompiles it per optimizer, and after
    # `cache_size_limit` optimizers it stops compiling it (the step then runs lazily). Each case starts afresh.
    torch._dynamo.reset()
    case = zoo.ALL[name]
    base = build(case)
    batch = case.batch(0)
    eager = br.eager_zoo_case(case, base, batch)
    dev = xladev.device()
    model = convert(base, dev, torch.float32)
    if remedy is not None:
        stack.enter_context(remedy[1](model))
        name = f"{name}, {remedy[0]}"
    compiled = compiled_training_step(model, case.make_optimizer(model.parameters()), case.loss,
                                      to_device(batch, dev, torch.float32))
    samples = br.time_interleaved({"compiled": compiled, "eager": (eager.step, eager.wait)},
                                  args.warmup, args.steps, args.block, args.settle)
    return ZooCase(name, br.Timing.of(samples["compiled"], args.steps), br.Timing.of(samples["eager"], args.steps))


# ---- output --------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per column (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (compiles; default 5)")
    parser.add_argument("--block", type=int, default=5, help="steps per timed block (default 5)")
    parser.add_argument("--settle", type=float, default=0.3, help="pause before each timed block, s (default 0.3)")
    parser.add_argument("--models", help=f"zoo models, comma-separated (default {','.join(ZOO)})")
    parser.add_argument("--quick", action="store_true", help=f"zoo models {','.join(QUICK_ZOO)} only")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    args = parser.parse_args(argv)
    if args.warmup < 3:
        parser.error("--warmup must be at least 3 (the first steps compile)")
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    models = args.models.split(",") if args.models else (QUICK_ZOO if args.quick else ZOO)
    br.match_jax_to_xladev()
    eager = br.eager_label(br.eager_device())

    training = [bench_training("mlp", mlp, br.MLP_CFG, _jax_mlp_step(br.MLP_CFG), args),
                bench_training("transformer", transformer, br.TLM_CFG, _jax_tlm_step(br.TLM_CFG), args)]
    inference = bench_inference(args)
    host = bench_host_calls(args)
    cases = [bench_zoo_case(name, args) for name in models]
    cases += [bench_zoo_case(name, args, remedy) for name in models for remedy in zoo.BREAK_REMEDIES.get(name, ())]

    print(f"\nxladev torch.compile benchmark ({platform.python_version()}, torch {torch.__version__}, jax "
          f"{jax.__version__}, {os.cpu_count()} CPUs, load average before {load}; median over blocks of {args.block} "
          f"steps, {args.steps} steps per column after {args.warmup} warm-up, columns alternating)")
    print(br.devices_line())
    cell = lambda t: f"{t.median_ms:8.2f} [{t.p10_ms:.1f}-{t.p90_ms:.1f}]"  # noqa: E731
    print(f"\n{'training ms/step':<20}{'torch.compile':>22}{'lazy':>22}{'jax.jit':>22}{eager:>22}"
          f"{'compile/jax':>13}{'compile/eager':>15}")
    for t in training:
        r = t.ratios()
        flag = "" if r["compiled_over_jax"] <= TRAIN_TARGET else f"  (> {TRAIN_TARGET}x target)"
        print(f"{t.name:<20}{cell(t.compiled):>22}{cell(t.lazy):>22}{cell(t.jax_jit):>22}{cell(t.eager):>22}"
              f"{r['compiled_over_jax']:>12.2f}x{r['compiled_over_eager']:>14.2f}x{flag}")
    ratio = _ms(inference.compiled) / _ms(inference.jax_jit)
    print(f"\n{'inference ms/call':<20}{'torch.compile':>22}{'jax.jit':>22}{eager:>22}{'compile/jax':>13}")
    print(f"{inference.name:<20}{cell(inference.compiled):>22}{cell(inference.jax_jit):>22}{cell(inference.eager):>22}"
          f"{ratio:>12.2f}x" + ("" if ratio <= INFER_TARGET else f"  (> {INFER_TARGET}x target)"))
    print("\nhost time per compiled call, transformer training step (median ms; the device runs asynchronously):")
    print(f"  {'graph':<40}{'wall':>9}{'thread CPU':>12}{'of which jax':>14}{'xladev':>9}")
    for name, ms in host.items():
        print(f"  {name:<40}{ms['wall_ms']:9.3f}{ms['cpu_ms']:12.3f}{ms['jax_cpu_ms']:14.3f}"
              f"{ms['cpu_ms'] - ms['jax_cpu_ms']:9.3f}" + ("" if ms["cpu_ms"] < HOST_CALL_TARGET_MS else "  OVER"))
    print(f"\n{'zoo, ms/step':<20}{'torch.compile':>22}{eager:>22}{'compile/eager':>15}")
    for c in cases:
        print(f"{c.name:<20}{cell(c.compiled):>22}{cell(c.eager):>22}{c.ratio:>14.2f}x"
              + ("" if c.ratio <= 1.0 else "  (slower than eager)"))
    if args.json:
        out = {
            "training": {t.name: {"compiled_ms": _ms(t.compiled), "lazy_ms": _ms(t.lazy), "jax_ms": _ms(t.jax_jit),
                                  "eager_ms": _ms(t.eager), **t.ratios()} for t in training},
            "inference": {"compiled_ms": _ms(inference.compiled), "jax_ms": _ms(inference.jax_jit),
                          "eager_ms": _ms(inference.eager), "compiled_over_jax": ratio},
            "host_call_ms": host,
            "zoo": {c.name: {"compiled_ms": _ms(c.compiled), "eager_ms": _ms(c.eager), "ratio": c.ratio} for c in cases},
            "targets": {"train_over_jax": TRAIN_TARGET, "infer_over_jax": INFER_TARGET,
                        "host_call_ms": HOST_CALL_TARGET_MS},
            "config": {"devices": br.devices_line(), "steps": args.steps, "warmup": args.warmup,
                       "load_average_before": load},
        }
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
