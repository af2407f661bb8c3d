"""Screen snapshots (pytest-textual-snapshot) of the fixed fixture at 80x24 and 160x50.

Regenerate after an intended change of the screen with:
    .venv/bin/python -m pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from tests.tui.helpers import fixture_lines, wait_for  # noqa: E402
from xladev_tui.app import XladevTUI  # noqa: E402
from xladev_tui.sources import FixtureSource  # noqa: E402

SIZES = [(80, 24), (160, 50)]


def _app() -> XladevTUI:
    # A fixed log, a fixed clock: the screen depends on nothing but the fixture.
    return XladevTUI(FixtureSource(fixture_lines()), clock=lambda: 0.0)


async def _loaded(pilot) -> None:
    await wait_for(pilot, lambda: pilot.app.shown.records >= 72)
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_overview(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_loaded)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_graph_ir(snap_compare, size):
    async def open_graph(pilot) -> None:
        await _loaded(pilot)
        await pilot.press("3", "down", "enter")
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=size, run_before=open_graph)


def test_counters_filtered(snap_compare):
    async def filtered(pilot) -> None:
        await _loaded(pilot)
        await pilot.press("slash", *"time", "enter")
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=filtered)
