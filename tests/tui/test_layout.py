"""The screen's layout follows the content, whatever order Textual's tasks run in (tui/layout_fix.py).

On a loaded machine a widget's own task may not have handled its last layout request yet when the
screen lays out again for another widget, and when new content arrives. The test makes that
interleaving happen on purpose, in one turn of the event loop, with the real app and its real
rendering of a real log; a snapshot test met it by chance, about once in some tens of runs.
"""

from __future__ import annotations

from textual.widgets import Static

from tests.tui.helpers import async_test, plain, settle
from tests.tui.logs import long_run
from xladev_tui.app import XladevTUI
from xladev_tui.run_model import model_from_lines
from xladev_tui.sources import FixtureSource
from xladev_tui.widgets.time_panel import time_table


@async_test
async def test_new_content_gets_its_height_while_a_layout_request_is_pending():
    snap = model_from_lines(long_run().lines(), "fixture").snapshot()
    expected = plain(time_table(snap.diagnosis.time), width=78).rstrip("\n").count("\n") + 1
    assert expected >= 8  # a table, where the placeholder is one line
    app = XladevTUI(FixtureSource([]), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.query_one("#time-table", Static)
        title = app.query_one("#time-title", Static)
        assert table.size.height == 1
        # The table asks for a layout (a style change does, say); before its task handles that, the
        # title's task handles its own request and the screen lays out, caching the table's box
        # model with its old content ...
        table.refresh(layout=True)
        title.update("Where the time went")
        title._check_refresh()
        app.screen._refresh_layout()
        # ... and the snapshot with the time breakdown is shown in the same turn.
        app._render(snap)
        await settle(pilot)
        assert table.size.height == expected
        assert app.query_one("#time-panel").size.height == expected + 1  # and the title
