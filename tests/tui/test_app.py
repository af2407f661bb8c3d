"""The Textual app driven headless with keys (App.run_test), on the fixed fixture log."""

from __future__ import annotations

from textual.widgets import DataTable, Static

from tests.tui.helpers import async_test, fixture_lines, option_texts, wait_for
from xladev_tui import run_model as m
from xladev_tui.app import ConfirmQuit, XladevTUI
from xladev_tui.sources import FileTailSource, FixtureSource
from xladev_tui.widgets import CountersPanel, GraphBrowser


def _text(app, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


def _loaded(app, records: int = 72):
    return lambda: app.shown.records >= records


@async_test
async def test_overview_shows_sites_alerts_transfers_and_fallbacks():
    app = XladevTUI(FixtureSource(fixture_lines()), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, _loaded(app))
        sites = app.query_one("#sites", DataTable)
        assert sites.get_row_at(0)[:3] == ["train.py:30 (train)", "2", "2"]
        alerts = "\n".join(option_texts(app, "#alerts"))
        assert "step 5" in alerts and "input 3" in alerts and "f32[8,16] -> f32[12,16]" in alerts
        assert "cause: user mark_step" in alerts
        transfers = app.query_one("#transfers", DataTable)
        assert transfers.get_row_at(0)[:4] == [".item()", "train.py:31 (train)", "12", "1.00"]
        assert app.query_one("#fallbacks", DataTable).get_row_at(0)[:3] == ["aten::nonzero", "train.py:27 (train)", "6"]
        status = _text(app, "#status-line")
        assert "finished" in status and "step 11" in status and "compiles 2" in status


@async_test
async def test_navigate_to_a_graph_and_open_its_ir():
    app = XladevTUI(FixtureSource(fixture_lines()), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, _loaded(app))
        await pilot.press("3")
        table = app.query_one("#graphs", DataTable)
        assert app.focused is table and table.row_count == 2
        await pilot.press("down", "enter")
        browser = app.query_one(GraphBrowser)
        assert browser.selected.startswith("0f1e2d")
        assert app.focused.id == "graph-detail"
        detail = _text(app, "#graph-text")
        assert "Graph 0f1e2d3c4b5a69788796a5b4c3d2e1f0" in detail
        assert "compiled in 300 ms at step 5" in detail and "steps: 5–11" in detail
        # XLA's memory analysis in PyTorch/XLA's order, and what the graph holds while it runs (1024+192+128 B).
        assert ("memory: inputs 1.00KB, outputs 192.00B, aliased 0.00B, temporaries 128.00B, program 0.00B; "
                "needs 1.31KB") in " ".join(detail.split())
        assert "%0 = f32[12,16]{1,0} xla::device_data()" in detail
        await pilot.press("escape", "up")
        assert app.focused is table and browser.selected.startswith("a1b2c3")
        assert "f32[8,16]" in _text(app, "#graph-text")


@async_test
async def test_filter_and_sort_counters():
    app = XladevTUI(FixtureSource(fixture_lines()), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, _loaded(app))
        await pilot.press("slash")
        assert app.focused.id == "counter-filter"
        await pilot.press(*"compile")
        panel = app.query_one(CountersPanel)
        table = app.query_one("#counters", DataTable)
        names = [table.get_row_at(i)[0] for i in range(table.row_count)]
        # CreateCompileHandles too: the TUI counts through the runtime's own table (xladev.schema.counters)
        assert names == ["CachedCompile", "CompileTime", "CreateCompileHandles", "UncachedCompile"]
        assert app.shown.state == m.FINISHED  # typing "q"-free text did not quit or switch tabs
        await pilot.press("enter", "s")  # back to the table; sort by count, descending
        assert panel.sort_key == "count" and panel.descending
        assert table.get_row_at(0)[:3] == ["CachedCompile", "counter", "10"]
        await pilot.press("slash", *"xla::", "enter")
        assert table.get_row_at(0)[0] == "xla::add" and table.row_count == 3


@async_test
async def test_pause_freezes_the_screen_until_resumed():
    lines = fixture_lines()
    source = FixtureSource(lines[:20])
    app = XladevTUI(source, clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, _loaded(app, 20))
        shown_steps = app.shown.steps
        await pilot.press("p")
        assert app.paused
        source.push(lines[20:])
        await wait_for(pilot, lambda: app.latest.records == 72)
        await pilot.pause(0.3)
        assert app.shown.steps == shown_steps
        status = _text(app, "#status-line")
        assert "PAUSED" in status and "+52 records" in status
        await pilot.press("p")
        assert not app.paused and app.shown.steps == 12
        assert "PAUSED" not in _text(app, "#status-line")


@async_test
async def test_quitting_asks_before_stopping_a_child_the_ui_started():
    source = FixtureSource(fixture_lines()[:30], owns_child=True, label="python train.py")
    app = XladevTUI(source, clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, _loaded(app, 30))
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmQuit)
        await pilot.press("n")
        assert not isinstance(app.screen, ConfirmQuit) and not source.stopped and app.is_running
        await pilot.press("q")
        await pilot.press("y")
        await pilot.pause(0.1)
        assert source.stopped
    assert not app.is_running


@async_test
async def test_a_crashed_child_shows_its_exit_code_and_last_output():
    output = [("stdout", "step 0 loss 1.0"), ("stderr", "Traceback (most recent call last):"),
              ("stderr", "ZeroDivisionError: division by zero")]
    source = FixtureSource(fixture_lines()[:30], output=output, owns_child=True,
                           final=(m.EXITED, "python train.py exited with code 1", 1))
    source._running = False
    app = XladevTUI(source, clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.shown.state == m.EXITED)
        notice = _text(app, "#notice")
        assert "exited with code 1" in notice and "ZeroDivisionError: division by zero" in notice
        assert "exited with code 1" in _text(app, "#status-line")
        await pilot.press("4")
        log = app.query_one("#log-pane")
        assert any("ZeroDivisionError" in line for line in log.lines)
        await pilot.press("q")  # the child is gone: no question
        await pilot.pause(0.05)
    assert not app.is_running


@async_test
async def test_missing_file_waits_with_a_clear_message(tmp_path):
    path = tmp_path / "run.events.jsonl"
    app = XladevTUI(FileTailSource(str(path)), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "waiting for" in _text(app, "#notice"))
        assert "waiting" in _text(app, "#status-line")
        path.write_text("\n".join(fixture_lines()) + "\n")
        await wait_for(pilot, lambda: app.shown.state == m.FINISHED)
        assert app.shown.steps == 12


@async_test
async def test_wide_layout_uses_the_space():
    app = XladevTUI(FixtureSource(fixture_lines()), clock=lambda: 0.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, _loaded(app))
        assert app.query_one("#overview").has_class("wide")
        assert app.screen.has_class("tall")
        assert app.query_one("#bottom-log").display
        compiles = app.query_one("#compiles").region
        transfers = app.query_one("#transfers-panel").region
        assert transfers.x > compiles.x and transfers.y == compiles.y  # side by side
