"""Training the examples on `xla` matches eager CPU, and a steady step compiles once.

Each example trains 20 steps on both devices from the same seed and the same CPU-generated data
(dropout 0, so both compute the same function): the losses agree step by step, the final weights
agree, and after the warm-up steps no step compiles again. A batch of a new shape compiles one new
graph; a shape seen before compiles nothing. Real compiles, no mocks.
"""

from __future__ import annotations

import pytest
import torch

from examples import cnn, mlp, transformer
from examples._common import resolve_device, run_loop
from tests.parity_bounds import (
    assert_adam_params_close, assert_sgd_params_close, gradient_scale, loss_rtol,
)
from xladev.events import Compile, Execute, bus

STEPS = 20
# The steps that may compile. SGD's momentum buffer is a clone of the first gradient, so its step 1 is other
# ops than step 0 (torch's code); AdamW's state is zeros updated in place, data before step 0's graph
# (runtime/execute/seeds.py), so its step 1 is step 0's graph.
WARMUP = {"mlp": 2, "cnn": 2, "transformer": 1}

# The transformer test runs one block (not the example's two) to keep compile time down; every op kind
# of the example is still in the graph.
CASES = {
    "mlp": (mlp, mlp.Config()),
    "cnn": (cnn, cnn.Config()),
    "transformer": (transformer, transformer.Config(dropout=0.0, layers=1)),
}


class StepEvents:
    """Counts compiles and executions per training step (read in the loop's `on_step` callback)."""

    def __init__(self) -> None:
        self.compiled = 0
        self.executed = 0
        self.per_step: list[tuple[int, int]] = []

    def __call__(self, event) -> None:
        if isinstance(event, Compile):
            self.compiled += 1
        else:
            self.executed += 1

    def on_step(self, step: int, loss) -> None:
        self.per_step.append((self.compiled, self.executed))
        self.compiled = self.executed = 0


def train_xla_counting(module, cfg, steps: int = STEPS):
    import xladev

    xladev.mark_step()  # nothing pending from earlier tests may land in this run's first graph
    # "Compiles once" needs a cold cache: an earlier test in this process may have trained the same model.
    from xladev.runtime.api.runtime_state import executor

    executor.reset()
    counter = StepEvents()
    with bus.subscribe(counter, (Compile, Execute)):
        result = module.train("xla", steps, seed=0, cfg=cfg, on_step=counter.on_step)
    return result, counter.per_step


def train_cpu(module, cfg, steps: int = STEPS):
    """The eager CPU run, keeping its optimizer (Adam's state) and last gradients for the bounds."""
    model = module.build(0, cfg)
    optimizer = module.make_optimizer(model, cfg)
    result = run_loop(model, optimizer, module.loss_fn, module.make_batches(0, steps, cfg), torch.device("cpu"))
    return result, model, optimizer


def assert_params_close(xla: dict, cpu: dict, model, optimizer) -> None:
    """Weights after training within what float32 rounding and the optimizer's steps allow (tests/parity_bounds)."""
    names = {id(p): n for n, p in model.named_parameters()}
    if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        trained = {n: t for n, t in cpu.items() if n in names.values()}
        assert_adam_params_close({n: xla[n] for n in trained}, trained, optimizer, names, STEPS)
        rest = {n: t for n, t in cpu.items() if n not in trained}
        assert_sgd_params_close({n: xla[n] for n in rest}, rest, optimizer, 0.0, STEPS)
    else:
        scale = gradient_scale({n: p.grad for n, p in model.named_parameters()})
        assert_sgd_params_close(xla, cpu, optimizer, scale, STEPS)


@pytest.mark.parametrize("name", list(CASES))
def test_training_matches_cpu_and_compiles_once(name):
    module, cfg = CASES[name]
    xla, per_step = train_xla_counting(module, cfg)
    cpu, cpu_model, cpu_optimizer = train_cpu(module, cfg)

    assert len(xla.losses) == len(cpu.losses) == STEPS
    for step, (a, b) in enumerate(zip(xla.losses, cpu.losses)):
        assert a == pytest.approx(b, rel=loss_rtol()), f"step {step}: xla loss {a} vs cpu loss {b}"
    assert cpu.losses[-1] < cpu.losses[0], "the example should learn"
    assert_params_close(xla.params, cpu.params, cpu_model, cpu_optimizer)

    compiles = [c for c, _ in per_step]
    executions = [e for _, e in per_step]
    warmup = WARMUP[name]
    assert 1 <= sum(compiles[:warmup]) <= warmup, f"warm-up compiles per step: {compiles}"
    assert compiles[warmup:] == [0] * (STEPS - warmup), f"compiles per step after warm-up: {compiles}"
    # One graph per step: the loop adds no hidden sync (reading the losses afterwards runs nothing).
    assert executions == [1] * STEPS, f"graph executions per step: {executions}"


def test_each_new_input_shape_compiles_one_graph_and_seen_shapes_none():
    cfg = mlp.Config(hidden=32, depth=1)
    device = resolve_device("xla")

    def batches_of(sizes):
        for i, size in enumerate(sizes):
            yield next(iter(mlp.make_batches(i, 1, cfg, batch=size)))

    import xladev

    xladev.mark_step()
    model = mlp.build(0, cfg).to(device)
    optimizer = mlp.make_optimizer(model, cfg)
    counter = StepEvents()
    warm, new, seen = [16] * 3, [8, 24, 40], [16, 8, 24, 40, 16]
    with bus.subscribe(counter, (Compile, Execute)):
        run_loop(model, optimizer, mlp.loss_fn, batches_of(warm + new + seen), device, on_step=counter.on_step)
    compiles = [c for c, _ in counter.per_step]

    assert compiles[len(warm) - 1] == 0, f"fixed shape must be warm after {len(warm)} steps: {compiles}"
    steady = compiles[len(warm):]
    assert steady[:len(new)] == [1] * len(new), f"each new batch size compiles exactly one graph: {compiles}"
    assert sum(steady[:len(new)]) == len(set(new))
    assert steady[len(new):] == [0] * len(seen), f"shapes seen before must hit the cache: {compiles}"


def test_the_parameter_bound_rejects_a_one_percent_learning_rate_error():
    """The bound of tests/parity_bounds is loose only where rounding is free to act, not everywhere."""
    import dataclasses

    module, cfg = CASES["transformer"]
    cpu, model, optimizer = train_cpu(module, cfg)
    off, _, _ = train_cpu(module, dataclasses.replace(cfg, lr=cfg.lr * 1.01))
    with pytest.raises(AssertionError, match="beyond the bound"):
        assert_params_close(off.params, cpu.params, model, optimizer)
