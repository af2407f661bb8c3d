"""State created as a constant and updated in place is device data before its first graph (runtime/execute/seeds.py).

Adam creates `exp_avg`/`exp_avg_sq` with `zeros_like` inside its first step: that step's graph must be the graph
of every later step, so the second step compiles nothing. Real optimizer, real compiles, one graph per step.
"""

from __future__ import annotations

import torch

import xladev
from xladev.events import GraphCompiled, GraphExecuted, TransferToDevice, bus


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
    per_step, subscription = _counting((GraphCompiled, GraphExecuted))
    with subscription:
        for _ in range(4):
            per_step.append({})
            loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            xladev.mark_step()
    compiles = [s.get("GraphCompiled", 0) for s in per_step]
    assert compiles[0] >= 1 and compiles[1:] == [0, 0, 0], f"compiles per step: {compiles}"
    assert [s.get("GraphExecuted", 0) for s in per_step] == [1, 1, 1, 1]


def test_an_accumulator_made_before_the_loop_compiles_once_and_counts_right(dev):
    xladev.mark_step()
    total = torch.zeros((), device=dev)
    per_step, subscription = _counting((GraphCompiled,))
    with subscription:
        for step in range(3):
            per_step.append({})
            total += torch.full((4,), float(step + 1)).to(dev).sum()
            xladev.mark_step()
    assert [s.get("GraphCompiled", 0) for s in per_step][1:] == [0, 0]
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
