"""Recording and barriers from several threads never lose an update."""

from __future__ import annotations

import threading

import pytest
import torch

import xladev

STEPS = 30


def _run_threads(work, count: int) -> list:
    results: list = [None] * count
    errors: list[BaseException] = []

    def run(k):
        try:
            results[k] = work(k)
        except BaseException as exc:  # surfaced below with the thread's own error
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("rounds", [1, pytest.param(10, marks=pytest.mark.slow)])
def test_concurrent_in_place_updates_and_barriers_lose_nothing(rounds):
    # Each thread owns its tensors, updates them in place and marks steps; a barrier on one thread
    # syncs the other's pending writes too, so the two race on the same storages' values. More rounds give
    # a race more chances to show (the slow sweep).
    def work(k):
        whole = torch.zeros(8, device=xladev.device())
        part = torch.zeros(4, 4, device=xladev.device())
        row = part[k % 4]  # writes through a view scatter into the base
        for _ in range(STEPS):
            whole.add_(1)
            row.mul_(1).add_(2)
            xladev.mark_step()
        return whole.cpu(), part.cpu()

    for _ in range(rounds):
        for k, (whole, part) in enumerate(_run_threads(work, 3)):
            torch.testing.assert_close(whole, torch.full((8,), float(STEPS)), rtol=0, atol=0)
            expected = torch.zeros(4, 4)
            expected[k % 4] = 2.0 * STEPS
            torch.testing.assert_close(part, expected, rtol=0, atol=0)


def test_threads_training_their_own_models_match_a_serial_run():
    def build(k):
        torch.manual_seed(k)
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    # The global CPU RNG is shared by threads: initial weights are drawn here, one model after another.
    initial = [build(k).state_dict() for k in range(3)]

    def train(k, device):
        model = build(0)
        model.load_state_dict(initial[k])
        model.to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        x = torch.linspace(-1, 1, 24).reshape(4, 6).to(device)
        for _ in range(8):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            if device.type == "xla":
                xladev.mark_step()
        return [p.detach().cpu() for p in model.parameters()]

    expected = [train(k, torch.device("cpu")) for k in range(3)]
    got = _run_threads(lambda k: train(k, xladev.device()), 3)
    for want, have in zip(expected, got):
        for a, b in zip(have, want):
            # Eight SGD steps of a tiny MLP: float32 rounding differences stay at a few ulp of O(1) weights.
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
