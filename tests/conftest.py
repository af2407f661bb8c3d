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


# The longest test files, longest first (seconds serial on 2 cores: 81, 76, 69, 43, 39, 34, 33, 32, 30). They
# go first so that `make test`'s two workers, which take whole files in order, do not end with one of them
# running alone. A scheduling hint only: a file missing here just runs in its usual place.
_LONGEST_FIRST = ("test_demo.py", "runtime/test_opinfo.py", "test_docs.py", "test_pitfalls.py",
                  "distributed/test_torchrun_job.py", "tui/test_live.py", "debug/test_metrics.py",
                  "tui/test_snapshots.py", "debug/test_analysis.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    tests_dir = config.rootpath / "tests"

    def place(item) -> int:
        try:
            name = item.path.relative_to(tests_dir).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=place)  # stable: each file keeps its own order, and the others theirs
