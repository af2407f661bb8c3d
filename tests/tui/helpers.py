"""Shared pieces of the TUI tests: the fixed fixture log and a wait-until helper for pilots."""

from __future__ import annotations

import os
import time

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "fixture_run.jsonl")


def fixture_lines() -> list[str]:
    with open(FIXTURE) as fh:
        return fh.read().splitlines()


async def wait_for(pilot, condition, timeout: float = 10.0, step: float = 0.02) -> None:
    """Lets the app run until `condition()` holds (fails the test after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await pilot.pause(step)


def async_test(fn):
    """Runs an async test function with asyncio.run (no pytest-asyncio needed)."""
    import asyncio
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper
