"""Runtime benchmark: xladev training steps against the same step in `jax.jit` and in PyTorch eager.

    python tools/bench/bench_runtime.py [--steps N] [--warmup W] [--block K] [--ops N]
                                        [--only mlp|transformer|recording] [--json OUT]

Prints, from one process and one run:
- steady-state ms/step of an MLP step (SGD momentum) and a transformer LM step (AdamW),
  each as (a) xladev: forward + backward + optimizer + `mark_step`, (b) a hand-written jax version
  of the same model, loss and optimizer math in one `jax.jit` train step (parameters as a pytree,
  `block_until_ready` each step), (c) PyTorch eager on the CPU; with the ratios xladev / jax.jit
  and xladev / eager. Steps run in blocks of K that end when the device is done; a column's figure is
  the median over its blocks of the mean step time, and the three columns alternate block by block.
  The xladev step is also split into recording (Python → IR) and the barrier. The barrier dispatches
  the graph and returns (asynchronous execution), so the device execution overlaps the next step's
  recording; XLADEV_SYNC_EXECUTION=1 times the waiting barrier instead.
- the recording cost per op in µs of hot ops (elementwise, matmul, a view, an in-place update)
  against the target, and the same ops with the signature cache off (the general recording path) in
  the same process, for the ratio between them.

The jax models start from the torch models' weights; their first loss is checked against eager
PyTorch so the three columns time the same computation. The batch lives on the device throughout
(no host transfer is timed). The models and data come from `examples/`.

With `PJRT_DEVICE=CUDA` (jax's CUDA plugin, torch's CUDA build) the eager column runs on the same GPU and
the jax column on xladev's device (bench_runtime.eager_device); the heading names the chips.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from _timing import Timing, first_loss_mismatches, time_interleaved  # noqa: F401  (the other benchmarks take them from here)

import xladev  # noqa: F401  (registers the device; turns on jax_enable_x64, so jax code below says float32)
from examples import mlp, transformer
from examples._common import train_step
from xladev.events import Execute, Ops, bus
from xladev.runtime.record import recording

import jax
import jax.numpy as jnp

F32 = jnp.float32
ELEMENTWISE_TARGET_US = 10.0
STEP_RATIO_TARGET = 1.3

MLP_CFG = mlp.Config(in_features=1024, hidden=1024, depth=2, classes=10, batch=256, lr=0.01, momentum=0.9)
TLM_CFG = transformer.Config(vocab=256, d_model=128, heads=4, layers=2, seq=128, batch=8, dropout=0.0,
                             lr=1e-3, weight_decay=0.01)


# ---------------------------------------------------------------------------------------------
# Where each column runs
# ---------------------------------------------------------------------------------------------

def eager_device() -> torch.device:
    """Where the eager PyTorch reference runs: on the GPU beside `PJRT_DEVICE=CUDA` (with torch's CUDA build),
    so a ratio compares xladev with eager on the same chip; else on the CPU.

    `XLADEV_BENCH_EAGER_DEVICE=cpu` (or `cuda`) chooses. Seen on an H200 with torch 2.11: once the `xla` device is
    registered (PrivateUse1), eager CUDA's backward in the same process fails in autograd's engine
    (`opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED`, engine.cpp): torch keeps one accelerator
    per process for its stream bookkeeping. tools/bench/cuda_check.sh therefore times eager on the CPU.
    """
    from xladev._flags import config

    chosen = os.environ.get("XLADEV_BENCH_EAGER_DEVICE", "").strip().lower()
    if chosen in ("cpu", "cuda"):
        return torch.device(chosen)
    if config.pjrt_device in ("CUDA", "GPU") and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def eager_wait(device: torch.device) -> Callable[[], None]:
    """The wait of an eager column (see time_interleaved): CUDA kernels run asynchronously, CPU ones do not."""
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


@dataclasses.dataclass
class EagerZooCase:
    """A model-zoo case trained in eager PyTorch on `eager_device()`: the reference column of the zoo benchmarks."""

    model: torch.nn.Module
    batch: object
    step: Callable[[], None]
    wait: Callable[[], None]


def eager_zoo_case(case, base: torch.nn.Module, batch) -> EagerZooCase:
    """The eager reference of a zoo case (tests/models/zoo.py): a float32 copy of `base` on `eager_device()`, its
    optimizer, and its training step (zero_grad, the case's loss, backward, optimizer step).

    Args:
      case: the zoo case.
      base: its model as built on the CPU (tests.models.harness.build).
      batch: its batch, on the CPU.
    """
    from tests.models.harness import convert, to_device

    device = eager_device()
    model = convert(base, device, torch.float32)
    optimizer = case.make_optimizer(model.parameters())
    on_device = to_device(batch, device, torch.float32)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        case.loss(model, on_device).backward()
        optimizer.step()

    return EagerZooCase(model, on_device, step, eager_wait(device))


def eager_label(device: torch.device) -> str:
    """A table's column heading for eager PyTorch on `device`."""
    return f"eager {device.type.upper()}"


def match_jax_to_xladev() -> None:
    """Makes the jax references compute as xladev does: on xladev's own backend (on a machine with jax's CUDA
    plugin, jax's default device is the GPU whatever xladev uses), and float32 matmuls in full float32, as
    xladev's lowerings and eager PyTorch ask (on a GPU, jax's default precision takes TF32 passes)."""
    from xladev.runtime.graph import backend

    jax.config.update("jax_default_device", backend.jax_devices()[0])
    jax.config.update("jax_default_matmul_precision", "highest")


def devices_line() -> str:
    """Which chips the columns ran on, for a report's heading: xladev's backend device and eager's device."""
    from xladev.runtime.graph import backend

    jax_dev = backend.jax_devices()[0]
    eager = eager_device()
    eager_name = torch.cuda.get_device_name(eager) if eager.type == "cuda" else "the CPU"
    return f"xladev and jax.jit on {jax_dev.platform} ({jax_dev.device_kind}), eager PyTorch on {eager_name}"


# ---------------------------------------------------------------------------------------------
# jax references, written by hand: same layers, loss and optimizer math as the torch models
# ---------------------------------------------------------------------------------------------

def torch_params(model: torch.nn.Module) -> dict:
    """The model's parameters as float32 jax arrays, by name (torch layouts: Linear weight is [out, in])."""
    return {name: jnp.asarray(p.detach().cpu().numpy(), dtype=F32) for name, p in model.named_parameters()}


def linear(p: dict, prefix: str, x):
    return x @ p[prefix + ".weight"].T + p[prefix + ".bias"]


def cross_entropy(logits, labels):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def mlp_loss(p: dict, x, y, cfg: mlp.Config):
    h = x
    for i in range(cfg.depth):
        h = jax.nn.relu(linear(p, str(2 * i), h))
    return cross_entropy(linear(p, str(2 * cfg.depth), h), y)


def layer_norm(p: dict, prefix: str, x, eps: float = 1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p[prefix + ".weight"] + p[prefix + ".bias"]


def tlm_loss(p: dict, idx, targets, cfg: transformer.Config):
    B, T = idx.shape
    return cross_entropy(tlm_logits(p, idx, cfg).reshape(B * T, -1), targets.reshape(-1))


def tlm_logits(p: dict, idx, cfg: transformer.Config):
    B, T = idx.shape
    D, H = cfg.d_model, cfg.heads
    x = p["tok.weight"][idx] + p["pos.weight"][:T]
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))
    for i in range(cfg.layers):
        b = f"blocks.{i}"
        q, k, v = jnp.split(linear(p, b + ".qkv", layer_norm(p, b + ".ln1", x)), 3, axis=-1)
        q, k, v = (t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = (q @ k.transpose(0, 1, 3, 2)) * F32(1.0 / np.sqrt(D // H))
        scores = jnp.where(causal, scores, F32(-jnp.inf))
        a = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
        x = x + linear(p, b + ".proj", a)
        h = jax.nn.gelu(linear(p, b + ".mlp.0", layer_norm(p, b + ".ln2", x)), approximate=False)
        x = x + linear(p, b + ".mlp.2", h)
    return linear(p, "head", layer_norm(p, "ln", x))


def sgd_momentum_step(loss_fn, lr: float, momentum: float):
    """torch.optim.SGD(momentum): buf = momentum * buf + g (buf = g on step 1, the same as from zeros); p -= lr * buf."""

    def step(params, bufs, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        bufs = jax.tree.map(lambda b, g: momentum * b + g, bufs, grads)
        params = jax.tree.map(lambda p, b: p - lr * b, params, bufs)
        return params, bufs, loss

    return jax.jit(step, donate_argnums=(0, 1))


def adamw_step(loss_fn, lr: float, weight_decay: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """torch.optim.AdamW (defaults): decoupled decay, then Adam with bias corrections; `t` counts from 1."""

    def step(params, m, v, t, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        m = jax.tree.map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
        step_size = lr / (1 - b1 ** t)
        sqrt_c2 = jnp.sqrt(1 - b2 ** t)

        def update(p, m_, v_):
            p = p * (1 - lr * weight_decay)
            return p - step_size * m_ / (jnp.sqrt(v_) / sqrt_c2 + eps)

        params = jax.tree.map(update, params, m, v)
        return params, m, v, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


# ---------------------------------------------------------------------------------------------
# The three ways to run one model's step
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ModelResult:
    name: str
    sizes: str
    xladev: Timing
    xladev_record_ms: float
    xladev_barrier_ms: float
    xladev_execute_ms: float
    xladev_ops_per_step: int
    jax_jit: Timing
    eager: Timing
    first_loss: dict

    @property
    def ratio_jax(self) -> float:
        return self.xladev.median_ms / self.jax_jit.median_ms

    @property
    def ratio_eager(self) -> float:
        return self.xladev.median_ms / self.eager.median_ms


def bench_model(name: str, module, cfg, sizes: str, jax_loss, make_jax_step, args) -> ModelResult:
    x_cpu, y_cpu = next(iter(module.make_batches(0, 1, cfg)))
    first_loss = {}

    # (c) PyTorch eager on the CPU (on the GPU beside PJRT_DEVICE=CUDA).
    eager_dev = eager_device()
    eager_model = module.build(0, cfg).to(eager_dev)
    eager_opt = module.make_optimizer(eager_model, cfg)
    x_eager, y_eager = x_cpu.to(eager_dev), y_cpu.to(eager_dev)
    with torch.no_grad():
        first_loss["eager"] = module.loss_fn(eager_model(x_eager), y_eager).item()

    def eager_step():
        train_step(eager_model, eager_opt, module.loss_fn, x_eager, y_eager)

    # (b) jax.jit, from the same initial weights.
    params = torch_params(module.build(0, cfg))
    xj, yj = jnp.asarray(x_cpu.numpy()), jnp.asarray(y_cpu.numpy())
    first_loss["jax"] = float(jax_loss(params, xj, yj, cfg))
    jax_step = make_jax_step(params, xj, yj)

    # (a) xladev: record the step, then the barrier compiles (first steps) or reuses the graph and runs it.
    dev = xladev.device()
    model = module.build(0, cfg).to(dev)
    opt = module.make_optimizer(model, cfg)
    x, y = x_cpu.to(dev), y_cpu.to(dev)
    xladev.mark_step()
    phases: list[tuple[float, float]] = []
    first: list = []
    last: list = []

    def xla_step():
        start = time.perf_counter()
        loss = train_step(model, opt, module.loss_fn, x, y)
        recorded = time.perf_counter()
        xladev.mark_step()
        phases.append((recorded - start, time.perf_counter() - recorded))
        if not first:
            first.append(loss)
        last[:] = [loss]

    def xla_wait():
        last[0].cpu()  # a value read waits for the step's graph (a no-op wait while mark_step blocks)

    # The bus costs one small event per barrier; it gives the device execution time and the op count.
    executed, ops = [], []

    def on_event(event):
        if isinstance(event, Execute):
            executed.append(event.execute_ns)
        else:
            ops.append(sum(event.counts.values()))

    # late_executions_ok: hearing of an execution at the next barrier is fine here, so the bench keeps
    # the asynchronous execution a plain training run gets.
    with bus.subscribe(on_event, (Execute, Ops), late_executions_ok=True):
        samples = time_interleaved(
            {"xladev": (xla_step, xla_wait), "jax": (jax_step, lambda: None),
             "eager": (eager_step, eager_wait(eager_dev))},
            args.warmup, args.steps, args.block, args.settle)
    first_loss["xladev"] = first[0].item()
    steady = phases[args.warmup:]
    return ModelResult(
        name, sizes, Timing.of(samples["xladev"], args.steps),
        statistics.median(p[0] for p in steady) * 1e3, statistics.median(p[1] for p in steady) * 1e3,
        statistics.median(executed[args.warmup:]) / 1e6, int(statistics.median(ops[args.warmup:])),
        Timing.of(samples["jax"], args.steps), Timing.of(samples["eager"], args.steps), first_loss)


def bench_mlp(args) -> ModelResult:
    cfg = MLP_CFG
    loss = lambda p, x, y, c=cfg: mlp_loss(p, x, y, c)  # noqa: E731

    def make_step(params, x, y):
        step = sgd_momentum_step(lambda p, x_, y_: mlp_loss(p, x_, y_, cfg), cfg.lr, cfg.momentum)
        state = {"p": params, "b": jax.tree.map(jnp.zeros_like, params)}

        def run():
            state["p"], state["b"], l = step(state["p"], state["b"], x, y)
            l.block_until_ready()

        return run

    sizes = (f"batch {cfg.batch}, {cfg.in_features} -> {cfg.depth} x [Linear {cfg.hidden} + ReLU] -> {cfg.classes}, "
             f"cross-entropy, SGD momentum {cfg.momentum}")
    return bench_model("mlp", mlp, cfg, sizes, loss, make_step, args)


def bench_transformer(args) -> ModelResult:
    cfg = TLM_CFG
    loss = lambda p, x, y, c=cfg: tlm_loss(p, x, y, c)  # noqa: E731

    def make_step(params, x, y):
        step = adamw_step(lambda p, x_, y_: tlm_loss(p, x_, y_, cfg), cfg.lr, cfg.weight_decay)
        zeros = lambda: jax.tree.map(jnp.zeros_like, params)  # noqa: E731
        state = {"p": params, "m": zeros(), "v": zeros(), "t": 0}

        def run():
            state["t"] += 1
            state["p"], state["m"], state["v"], l = step(state["p"], state["m"], state["v"],
                                                         jnp.asarray(state["t"], F32), x, y)
            l.block_until_ready()

        return run

    sizes = (f"batch {cfg.batch}, seq {cfg.seq}, d_model {cfg.d_model}, {cfg.heads} heads, {cfg.layers} layers, "
             f"vocab {cfg.vocab}, dropout 0, AdamW")
    return bench_model("transformer", transformer, cfg, sizes, loss, make_step, args)


# ---------------------------------------------------------------------------------------------
# Recording cost per op
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class OpCost:
    name: str
    wall_us: float  # Python loop wall time per op
    dispatch_us: float  # time inside xladev's __torch_dispatch__ per op (the recorder's own clock)
    target_us: float | None
    general_wall_us: float = float("nan")  # the same, with the signature cache off (the general path)
    general_dispatch_us: float = float("nan")


def _record_samples(fn: Callable[[], object], n: int, repeats: int) -> tuple[list[float], list[float]]:
    """Per-op wall and in-dispatch µs of `repeats` samples of `n` calls of `fn()`, each sample synced after."""
    walls, traced = [], []
    with bus.subscribe(lambda e: traced.append(e.tracing_ns / sum(e.counts.values())), Ops):
        for _ in range(repeats):
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter_ns()
                for _ in range(n):
                    y = fn()
                walls.append((time.perf_counter_ns() - start) / n / 1e3)
            finally:
                gc.enable()
            # A live pending result (a view has none of its own, hence `marker`) makes the barrier run a
            # tiny graph (cached after the first time), and the recorder's totals arrive as Ops.
            marker = torch.zeros(1, device=xladev.device()) + 1  # noqa: F841  (2 ops of n, in the totals)
            xladev.mark_step()
            del y, marker
    return walls, [ns / 1e3 for ns in traced[-repeats:]]


def record_cost(name: str, fn: Callable[[], object], n: int, repeats: int = 5, target: float | None = None) -> OpCost:
    """Median over `repeats` of (time to record `fn()` n times, without syncing) / n, with the signature cache
    on and off (`recording.use_signature_cache`), the two alternating sample by sample."""
    for _ in range(max(1, n // 10)):  # warm the shape caches
        fn()
    xladev.mark_step()
    cached: tuple[list, list] = ([], [])
    general: tuple[list, list] = ([], [])
    try:
        for _ in range(repeats):
            for on, into in ((True, cached), (False, general)):
                recording.use_signature_cache(on)
                walls, inside = _record_samples(fn, n, 1)
                into[0].extend(walls)
                into[1].extend(inside)
    finally:
        recording.use_signature_cache(True)
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    return OpCost(name, med(cached[0]), med(cached[1]), target, med(general[0]), med(general[1]))


def bench_recording(n: int) -> list[OpCost]:
    dev = xladev.device()
    x = torch.randn(128, 128).to(dev)
    w = torch.randn(128, 128).to(dev)
    xladev.mark_step()
    p, g = torch.randn(128, 128).to(dev), torch.randn(128, 128).to(dev)
    costs = [
        record_cost("x + x (elementwise)", lambda: x + x, n, target=ELEMENTWISE_TARGET_US),
        record_cost("x * 2 (elementwise, Python scalar)", lambda: x * 2, n, target=ELEMENTWISE_TARGET_US),
        record_cost("torch.relu(x) (elementwise, unary)", lambda: torch.relu(x), n, target=ELEMENTWISE_TARGET_US),
        record_cost("x @ w (matmul)", lambda: x @ w, n),
        record_cost("x.t() (view)", lambda: x.t(), n),
        # In place ops chain on one storage: a short chain keeps the one graph it builds cheap to compile.
        record_cost("p.lerp_(g, 0.1) (in-place, as in Adam)", lambda: p.lerp_(g, 0.1), min(n, 300)),
    ]
    # The floor: the same calls on CPU tensors (real compute on 128x128) for scale.
    xc, wc = x.cpu(), w.cpu()
    eager = []
    for label, fn in (("x + x", lambda: xc + xc), ("x @ w", lambda: xc @ wc)):
        for _ in range(max(1, n // 10)):
            fn()
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        eager.append((label, (time.perf_counter_ns() - start) / n / 1e3))
    return costs, eager


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

def print_report(models: list[ModelResult], costs: list[OpCost], eager_ops, args) -> None:
    print(f"\nxladev runtime benchmark  ({platform.python_implementation()} {platform.python_version()}, "
          f"torch {torch.__version__}, jax {jax.__version__}, {os.cpu_count()} CPUs, "
          f"torch threads {torch.get_num_threads()}; median over blocks of {args.block} steps, {args.steps} steps per column after "
          f"{args.warmup} warm-up, the three columns in alternating blocks; load average before {args.load_before})")
    print(devices_line())
    for m in models:
        print(f"\n{m.name}: {m.sizes}")
        print("  first loss (same weights, same batch): " +
              ", ".join(f"{k} {v:.6f}" for k, v in m.first_loss.items()))
    print(f"\n{'ms/step: median [p10-p90]':<28}{'xladev':>22}{'jax.jit':>22}{eager_label(eager_device()):>22}"
          f"{'xladev/jax':>12}{'xladev/eager':>14}")
    for m in models:
        cell = lambda t: f"{t.median_ms:8.2f} [{t.p10_ms:.1f}-{t.p90_ms:.1f}]"  # noqa: E731
        flag = "" if m.ratio_jax <= STEP_RATIO_TARGET else f"  (> {STEP_RATIO_TARGET}x target)"
        print(f"{m.name:<28}{cell(m.xladev):>22}{cell(m.jax_jit):>22}{cell(m.eager):>22}"
              f"{m.ratio_jax:>11.2f}x{m.ratio_eager:>13.2f}x{flag}")
    print("\nxladev step split (medians):")
    for m in models:
        print(f"  {m.name:<12} record {m.xladev_record_ms:7.2f} ms ({m.xladev_ops_per_step} ops, "
              f"{m.xladev_record_ms * 1e3 / max(1, m.xladev_ops_per_step):.1f} us/op)   barrier {m.xladev_barrier_ms:7.2f} ms "
              f"(device execution {m.xladev_execute_ms:.2f} ms, from dispatch to results"
              f"{', overlapping the next step' if m.xladev_execute_ms > m.xladev_barrier_ms else ''})")
    print(f"\nrecording cost per op ({args.ops} ops (in-place: 300) per sample, median of 5 samples; "
          "'in dispatch' is xladev's own tracing clock inside __torch_dispatch__)")
    print("  'general path': the same ops with the signature cache off (recording.use_signature_cache(False)), "
          "sample by sample in turn")
    print(f"  {'op':<40}{'wall us/op':>12}{'in dispatch':>13}{'general path':>14}{'in dispatch':>13}{'wall ratio':>12}"
          f"{'target':>10}")
    for c in costs:
        target = f"{c.target_us:.0f} us" if c.target_us else "-"
        flag = "" if c.target_us is None or c.wall_us <= c.target_us else "  OVER"
        print(f"  {c.name:<40}{c.wall_us:>12.2f}{c.dispatch_us:>13.2f}{c.general_wall_us:>14.2f}"
              f"{c.general_dispatch_us:>13.2f}{c.wall_us / c.general_wall_us:>11.2f}x{target:>10}{flag}")
    print("  eager CPU, same calls for scale: " + ", ".join(f"{k} {v:.2f} us" for k, v in eager_ops))


def to_json(models, costs, eager_ops, args) -> dict:
    # Flat summary keys first (read by tools/bench/run_all.py), then the details.
    summary: dict = {
        m.name: {"xladev_ms": m.xladev.median_ms, "jax_ms": m.jax_jit.median_ms, "eager_ms": m.eager.median_ms,
                 "ratio_vs_jax": m.ratio_jax, "ratio_vs_eager": m.ratio_eager} for m in models
    }
    by_name = {c.name: c for c in costs}
    if costs:
        summary["recording"] = {"elementwise_us": by_name["x + x (elementwise)"].wall_us,
                                "matmul_us": by_name["x @ w (matmul)"].wall_us,
                                "elementwise_target_us": ELEMENTWISE_TARGET_US}
    return summary | {
        "config": {"devices": devices_line(), "steps": args.steps, "warmup": args.warmup, "ops": args.ops,
                   "cpus": os.cpu_count(),
                   "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "jax": jax.__version__,
                   "load_average_before": args.load_before},
        "targets": {"step_ratio_vs_jax": STEP_RATIO_TARGET, "elementwise_record_us": ELEMENTWISE_TARGET_US},
        "models": {
            m.name: {
                "sizes": m.sizes,
                "ms_per_step": {"xladev": dataclasses.asdict(m.xladev), "jax_jit": dataclasses.asdict(m.jax_jit),
                                "eager": dataclasses.asdict(m.eager)},
                "ratio_xladev_over_jax": m.ratio_jax,
                "ratio_xladev_over_eager": m.ratio_eager,
                "xladev_split_ms": {"record": m.xladev_record_ms, "barrier": m.xladev_barrier_ms,
                                    "device_execute": m.xladev_execute_ms},
                "xladev_ops_per_step": m.xladev_ops_per_step,
                "first_loss": m.first_loss,
            } for m in models
        },
        "recording_us_per_op": {c.name: {"wall": c.wall_us, "in_dispatch": c.dispatch_us, "target": c.target_us,
                                         "general_path_wall": c.general_wall_us,
                                         "general_path_in_dispatch": c.general_dispatch_us}
                                for c in costs},
        "eager_us_per_op": dict(eager_ops),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="timed steps per model and column (default 40)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (compiles; default 5)")
    parser.add_argument("--block", type=int, default=5, help="steps per timed block (default 5)")
    parser.add_argument("--settle", type=float, default=0.3, help="pause before each timed block, s (default 0.3)")
    parser.add_argument("--ops", type=int, default=20000, help="ops recorded per recording-cost sample")
    parser.add_argument("--only", choices=("mlp", "transformer", "recording"), help="run one part only")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    args = parser.parse_args(argv)
    args.load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    if args.warmup < 3:
        parser.error("--warmup must be at least 3 (the first two xladev steps compile)")
    match_jax_to_xladev()

    models = []
    if args.only in (None, "mlp"):
        models.append(bench_mlp(args))
    if args.only in (None, "transformer"):
        models.append(bench_transformer(args))
    costs, eager_ops = bench_recording(args.ops) if args.only in (None, "recording") else ([], [])
    for m in models:  # the three implementations must compute the same thing
        for k, v in first_loss_mismatches(m.first_loss).items():
            print(f"warning: {m.name} first loss of {k} ({v}) differs from eager ({m.first_loss['eager']})",
                  file=sys.stderr)
    print_report(models, costs, eager_ops, args)
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(models, costs, eager_ops, args), indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
