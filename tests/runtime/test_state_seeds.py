"""State created as a constant and updated in place is device data before its first graph (runtime/execute/seeds.py).

Adam creates `exp_avg`/`exp_avg_sq` with `zeros_like` inside its first step: that step's graph must be the graph
of every later step, so the second step compiles nothing. Real optimizer, real compiles, one graph per step.
"""

from __future__ import annotations

import inspect
import types

import torch

import xladev
from xladev.events import Compile, Execute, TransferToDevice, bus


def _counting(kinds):
    per_step: list[dict] = []

    def on_event(event) -> None:
        name = type(event).__name__
        per_step[-1][name] = per_step[-1].get(name, 0) + 1

    return per_step, bus.subscribe(on_event, kinds)


def test_adam_second_step_compiles_nothing(dev):
    from xladev.runtime.api.runtime_state import executor

    xladev.mark_step()
    executor.reset()  # a cold cache: an earlier test may have compiled this very graph
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    per_step, subscription = _counting((Compile, Execute))
    with subscription:
        for _ in range(4):
            per_step.append({})
            loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            xladev.mark_step()
    compiles = [s.get("Compile", 0) for s in per_step]
    assert compiles[0] >= 1 and compiles[1:] == [0, 0, 0], f"compiles per step: {compiles}"
    assert [s.get("Execute", 0) for s in per_step] == [1, 1, 1, 1]


def test_an_accumulator_made_before_the_loop_compiles_once_and_counts_right(dev):
    xladev.mark_step()
    total = torch.zeros((), device=dev)
    per_step, subscription = _counting((Compile,))
    with subscription:
        for step in range(3):
            per_step.append({})
            total += torch.full((4,), float(step + 1)).to(dev).sum()
            xladev.mark_step()
    assert [s.get("Compile", 0) for s in per_step][1:] == [0, 0]
    assert total.item() == 4.0 * (1 + 2 + 3)


def test_a_temporary_dead_at_the_barrier_stays_a_constant(dev):
    """Only tensors the barrier computes are seeded: a per-step mask costs no upload."""
    x = torch.randn(4, 4).to(dev)
    xladev.mark_step()
    per_step, subscription = _counting((TransferToDevice,))
    with subscription:
        per_step.append({})
        mask = torch.zeros(4, 4, device=dev)
        mask[1:3] = 1.0
        out = x * mask
        del mask
        xladev.mark_step()
    assert per_step[0].get("TransferToDevice", 0) == 0, per_step
    assert out.cpu().abs().sum() > 0


def test_a_clone_of_the_constant_keeps_its_value_when_the_original_is_updated(dev):
    zeros = torch.zeros(3, device=dev)
    copy = zeros.clone()  # shares the constant's node until either side is written
    zeros.add_(1.0)
    xladev.mark_step()
    zeros.add_(1.0)
    xladev.mark_step()
    assert copy.cpu().tolist() == [0.0, 0.0, 0.0]
    assert zeros.cpu().tolist() == [2.0, 2.0, 2.0]


def _sgd_run(dev, steps: int, skip_hook: bool = False, **options):
    """SGD on a small model for `steps` steps: (graphs compiled per step, parameters after each step, the CPU
    twin's parameters after each step, the largest gradient magnitude seen on the CPU)."""
    from xladev.runtime.api.runtime_state import executor

    xladev.mark_step()
    executor.reset()  # a cold cache: an earlier test may have compiled this very graph
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model.load_state_dict(cpu_model.state_dict())
    model.to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, **options)
    cpu_optimizer = torch.optim.SGD(cpu_model.parameters(), lr=0.1, **options)
    if skip_hook:  # torch's own first step: the buffer is a clone of the gradient
        # (unwrapped to torch's own: TorchDynamo, once imported, wraps `_init_group` around xladev's wrapper)
        optimizer._init_group = types.MethodType(inspect.unwrap(torch.optim.SGD._init_group), optimizer)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    per_step, subscription = _counting((Compile,))
    params, cpu_params, scale = [], [], 0.0
    with subscription:
        for _ in range(steps):
            per_step.append({})
            torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
            optimizer.step()
            optimizer.zero_grad()
            xladev.mark_step()
            params.append([p.detach().cpu() for p in model.parameters()])
            torch.nn.functional.mse_loss(cpu_model(x), y).backward()
            scale = max(scale, max(float(p.grad.abs().max()) for p in cpu_model.parameters()))
            cpu_optimizer.step()
            cpu_optimizer.zero_grad()
            cpu_params.append([p.detach().clone() for p in cpu_model.parameters()])
    return [s.get("Compile", 0) for s in per_step], params, cpu_params, scale


def test_sgd_momentum_second_step_compiles_nothing_and_trains_as_eager(dev):
    from tests.parity_bounds import GRAD_REL, PARAM_REL

    for options in ({"momentum": 0.9}, {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-2},
                    {"momentum": 0.9, "maximize": True}, {"momentum": 0.9, "foreach": False},
                    {"momentum": 0.9, "fused": True}):
        steps = 4
        compiles, params, cpu_params, scale = _sgd_run(dev, steps, **options)
        assert compiles[0] >= 1 and compiles[1:] == [0] * (steps - 1), (options, compiles)
        # A gradient error δ ≤ GRAD_REL·G at step k moves the buffer by δ·m^(t-k) at every step t ≥ k, and the
        # weight by lr times that: Σ_t Σ_{k≤t} 0.9^(t-k) = 9.05 over 4 steps (twice that for the gradients'
        # own drift as the weights drift), plus each update's rounding.
        reach = 2 * 0.1 * sum(sum(0.9 ** (t - k) for k in range(t + 1)) for t in range(steps)) * GRAD_REL * scale
        for have, want in zip(params[-1], cpu_params[-1]):
            torch.testing.assert_close(have, want, rtol=steps * PARAM_REL, atol=reach, msg=lambda m: f"{options}: {m}")


def test_sgd_momentum_first_step_is_torchs_to_the_bit(dev):
    # torch's first step sets each buffer to the gradient; the zero buffer's update gives the gradient to the bit
    # (0·m + g is g). Compared within one program: the buffer against the gradient the step used (without
    # Nesterov, which adds the buffer into the gradient in place).
    from xladev.runtime.api.runtime_state import executor

    xladev.mark_step()
    executor.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.nn.functional.mse_loss(model(torch.randn(32, 8).to(dev)), torch.randn(32, 1).to(dev)).backward()
    optimizer.step()
    xladev.mark_step()
    for param in model.parameters():
        assert torch.equal(optimizer.state[param]["momentum_buffer"].cpu(), param.grad.cpu())
    # torch's own way gives two programs for the first two steps; the buffers made first give one.
    compiles, _, _, _ = _sgd_run(dev, 2, skip_hook=True, momentum=0.9, nesterov=True)
    assert compiles[1] >= 1
    compiles, _, _, _ = _sgd_run(dev, 2, momentum=0.9, nesterov=True)
    assert compiles[1] == 0


def test_sgd_with_dampening_keeps_torchs_first_step(dev):
    # With dampening a zero buffer's update is not the gradient: no buffer is made, and the values stay eager's
    # (the bound as above: the buffer carries 1 + 0.9 + 0.5 of the gradients' errors over two steps, under 3).
    compiles, params, cpu_params, scale = _sgd_run(dev, 2, momentum=0.9, dampening=0.5)
    assert compiles[1] >= 1
    from tests.parity_bounds import GRAD_REL, PARAM_REL

    for have, want in zip(params[-1], cpu_params[-1]):
        torch.testing.assert_close(have, want, rtol=2 * PARAM_REL, atol=2 * 0.1 * 3 * GRAD_REL * scale)
