"""The registry of pending storages: a dead tensor's entry goes (at the next barrier, or a sweep while a graph
grows without one), and only live tensors become a graph's outputs."""

from __future__ import annotations

import torch

import xladev
from xladev.events import Execute, bus
from xladev.runtime.graph import storage


def test_dead_pending_tensors_are_swept_while_recording_and_never_computed(monkeypatch):
    # A low floor, so that a thousand ops show the sweep (the default sweeps past 65536 entries).
    monkeypatch.setattr(storage, "_SWEEP_FLOOR", 64)
    monkeypatch.setattr(storage, "_sweep_at", 64)
    dev = xladev.device()
    x = torch.ones(4, device=dev)
    xladev.mark_step()
    kept = []
    for i in range(1000):
        y = x + i  # the previous y dies here: its storage's entry is dead until swept
        if i % 100 == 0:
            kept.append(y)
    # Ten live entries, so the sweep size stays at the floor: the dead ones never pile up past it.
    assert len(storage.pending) <= 64 + 1
    executed = []
    with bus.subscribe(executed.append, Execute):
        xladev.mark_step()
    assert [e.num_outputs for e in executed] == [len(kept) + 1]  # the kept tensors and the last y, nothing dead
    assert not storage.pending
    for i, t in zip(range(0, 1000, 100), kept):
        torch.testing.assert_close(t.cpu(), torch.full((4,), 1.0 + i), rtol=0, atol=0)
    torch.testing.assert_close(y.cpu(), torch.full((4,), 1000.0), rtol=0, atol=0)


def test_a_barrier_drops_the_entries_of_tensors_that_died_since_the_last_one():
    dev = xladev.device()
    x = torch.ones(4, device=dev)
    xladev.mark_step()
    for _ in range(10):
        (x * 3).sum()  # dies at once
    assert len(storage.pending) >= 10  # dead entries wait for the barrier
    xladev.mark_step()
    assert not storage.pending
