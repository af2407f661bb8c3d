"""Keys that must reach what the screen shows: the overview's lists with ↑/↓ and PgUp/PgDn alone, the counters'
sorted top row after `s`, and the Log tab's notices whole and its newest line in view after a resize."""

from __future__ import annotations

from textual.widgets import DataTable

from tests.tui.helpers import async_test, fixture_lines, wait_for
from xladev_tui import run_model as m
from xladev_tui.app import XladevTUI
from xladev_tui.sources import FixtureSource
from xladev_tui.widgets import LogPane


def _app() -> XladevTUI:
    return XladevTUI(FixtureSource(fixture_lines()), clock=lambda: 0.0)


async def _loaded(pilot, app) -> None:
    await wait_for(pilot, lambda: app.shown.records >= 72 and app.shown.diagnosis.records >= 72)


async def _down_until_focus_leaves(pilot, app, key: str = "down", most: int = 40) -> str:
    start = app.focused.id
    for _ in range(most):
        await pilot.press(key)
        if app.focused.id != start:
            return app.focused.id
    raise AssertionError(f"{key} never left #{start}")


@async_test
async def test_the_overviews_lists_are_reached_with_the_arrow_and_page_keys():
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        assert app.focused.id == "findings"  # where the overview starts: no Tab needed
        order = [await _down_until_focus_leaves(pilot, app) for _ in range(4)]
        assert order == ["sites", "alerts", "transfers", "fallbacks"]
        fallbacks = app.query_one("#fallbacks", DataTable)
        assert fallbacks.cursor_row == 0 and app.query_one("#overview-scroll").scroll_y > 0  # scrolled to it
        await pilot.press("up")  # back past the first row: the list above, at its last entry
        transfers = app.query_one("#transfers", DataTable)
        assert app.focused is transfers and transfers.cursor_row == transfers.row_count - 1
        # PgUp goes back list by list too, up to the findings.
        assert [await _down_until_focus_leaves(pilot, app, "pageup") for _ in range(3)] == ["alerts", "sites", "findings"]
        assert await _down_until_focus_leaves(pilot, app, "pagedown") == "sites"


@async_test
async def test_sorting_shows_the_new_top_row():
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        await pilot.press("2")
        table = app.query_one("#counters", DataTable)
        await pilot.press(*["down"] * (table.row_count - 1))  # the last row: the table scrolled down to it
        await pilot.pause(0.1)
        assert table.scroll_y > 0
        await pilot.press("s")  # by count, most first
        await pilot.pause(0.1)
        assert table.cursor_row == 0 and table.scroll_y == 0
        largest = max(app.shown.counters, key=lambda row: row.count)
        assert table.get_row_at(0)[0] == largest.name  # the largest count, on screen


@async_test
async def test_the_log_tab_wraps_notices_and_keeps_its_newest_line_in_view_after_a_resize():
    notice = ("the log has no end record: the process was killed or is still running, and its writer "
              "(pid 4242 on host trainer-0) is gone")
    output = [("stdout", f"epoch 0 step {i} loss {1 / (i + 1):.4f}") for i in range(60)]
    app = XladevTUI(FixtureSource(fixture_lines(), output=output, final=(m.DISCONNECTED, notice, None)),
                    clock=lambda: 0.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await _loaded(pilot, app)
        await wait_for(pilot, lambda: any(notice[:40] in line for line in app.shown.log))
        await pilot.press("4")
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.2)
        pane = app.query_one("#log-pane", LogPane)
        width = pane.size.width
        assert width <= 80 and all(len(line) <= width - 2 for line in pane.lines)  # nothing cut at the edge
        assert " ".join(line.strip() for line in pane.lines[-3:]).endswith("(pid 4242 on host trainer-0) is gone")
        assert pane.max_scroll_y > 0 and pane.scroll_y == pane.max_scroll_y  # the newest line in view
