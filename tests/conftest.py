"""Shared fixtures: the real xla device, and an event recorder on the real bus."""

from __future__ import annotations

import pytest
import torch

import xladev
from xladev.events import bus


@pytest.fixture
def dev() -> torch.device:
    return xladev.device()


class EventLog:
    """Collects events from the real bus while the fixture is active."""

    def __init__(self) -> None:
        self.events: list = []

    def __call__(self, event) -> None:
        self.events.append(event)

    def of(self, kind) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def clear(self) -> None:
        self.events.clear()


@pytest.fixture
def events():
    log = EventLog()
    xladev.mark_step()  # start from a clean slate: nothing pending from earlier tests
    sub = bus.subscribe(log, wants_frames=True)
    try:
        yield log
    finally:
        sub.close()
