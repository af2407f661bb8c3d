"""Shared pieces of the TUI tests: the fixed fixture log and a wait-until helper for pilots."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time

from rich.console import Console

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "fixture_run.jsonl")


def fixture_lines() -> list[str]:
    with open(FIXTURE) as fh:
        return fh.read().splitlines()


def dead_pid() -> int:
    """The pid of a process that has exited (a log's writer that is gone)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


async def wait_for(pilot, condition, timeout: float = 10.0, step: float = 0.02) -> None:
    """Lets the app run until `condition()` holds (fails the test after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await pilot.pause(step)


async def settle(pilot, timeout: float = 10.0, same: int = 3) -> None:
    """Lets the app run until `same` screenshots 100 ms apart are alike (a loaded machine can leave a layout
    pass pending for a while, e.g. a scrollbar appearing one pass late, after a plain pause)."""
    deadline = time.monotonic() + timeout
    previous, alike = None, 0
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        shot = re.sub(r"terminal-\d+", "", pilot.app.export_screenshot())
        alike = alike + 1 if shot == previous else 0
        if alike >= same - 1:
            return
        previous = shot
    raise AssertionError(f"the screen kept changing for {timeout} s")


def async_test(fn):
    """Runs an async test function with asyncio.run (no pytest-asyncio needed)."""
    import asyncio
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def plain(renderable, width: int = 200) -> str:
    """The text a rich renderable (Text, Table ...) shows, without styles."""
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def option_texts(app, selector: str) -> list[str]:
    """The plain text of each entry of an OptionList (the alerts, the findings)."""
    from textual.widgets import OptionList

    options = app.query_one(selector, OptionList)
    return [plain(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
