"""The app headless (App.run_test): findings and time panels, the compiling line, jumps from an
alert or a finding to its graph, the tab keys from every tab, and readable columns."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static, TabbedContent

from tests.tui.helpers import async_test, fixture_lines, option_texts, plain, wait_for
from tests.tui.logs import FAILED_HASH, SITE, LogBuilder, graph_hash, long_run
from xladev.report import load
from xladev.schema import records as rec
from xladev.schema.units import compact_time_ns
from xladev_tui import run_model as m
from xladev_tui.app import XladevTUI
from xladev_tui.sources import FixtureSource
from xladev_tui.widgets import GraphBrowser

TABS = {"1": "tab-overview", "2": "tab-counters", "3": "tab-graphs", "4": "tab-log"}


def _text(app, selector: str) -> str:
    return plain(app.query_one(selector, Static).content).rstrip("\n")


def _long_app(**kwargs) -> XladevTUI:
    lines = long_run().lines()
    return XladevTUI(FixtureSource(lines), clock=lambda: 0.0, **kwargs), len(lines)


def _done(app, records: int):
    return lambda: app.shown.records >= records and app.shown.diagnosis.records >= records


@async_test
async def test_findings_panel_shows_the_reports_verdict_findings_costs_and_fixes(tmp_path):
    app, records = _long_app()
    report = load(long_run().write(tmp_path / "run.jsonl"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, _done(app, records))
        await pilot.pause()
        # The report's own headline: the graph that failed to compile ran out of memory.
        assert "ERROR" in _text(app, "#verdict") and "3 problems found. Most important: The device ran out of " \
            f"memory: graph deadbeefdeadbeef at " in _text(app, "#verdict")
        assert f"conformer_encoder.py:214. ({records} records)" in _text(app, "#verdict")
        entries = [" ".join(text.split()) for text in option_texts(app, "#findings")]
        assert len(entries) == len(report.findings)
        for entry, finding in zip(entries, report.findings):  # in the report's order, with its words
            assert " ".join(finding.title.split()) in entry
            assert "fix " + " ".join(finding.fix.split()) in entry  # all of it: brackets are not markup
            if finding.cost_text():
                assert "cost " + " ".join(finding.cost_text().split()) in entry
        assert "RESOURCE_EXHAUSTED" in entries[0]  # a failure says what failed
        assert "deadbeefdead (Enter opens it)" in entries[0]


@async_test
async def test_time_panel_shows_overall_and_last_step(tmp_path):
    app, records = _long_app()
    breakdown = load(long_run().write(tmp_path / "run.jsonl")).time_breakdowns[None]
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, _done(app, records))
        await pilot.pause()
        assert _text(app, "#time-title") == f"Where the time went: {compact_time_ns(breakdown.wall_ns)} wall, 24 steps"
        table = _text(app, "#time-table").splitlines()
        assert table[0].split() == ["Part", "Total", "Share", "Per", "step", "Step", "23"]
        compile_row = next(line.split() for line in table if line.startswith("compile"))
        total = breakdown.parts["compile"]
        assert compile_row[1:3] == compact_time_ns(total).split() and compile_row[3] == \
            f"{total / breakdown.wall_ns:.0%}"
        execute_row = next(line for line in table if line.startswith("execute"))
        assert execute_row.split()[-2:] == ["25", "ms"]  # the last step's execution


@async_test
async def test_findings_update_while_the_run_goes_on():
    lines = long_run().lines()
    first_failure = next(i for i, line in enumerate(lines) if '"compile_failed"' in line)
    source = FixtureSource(lines[:first_failure])
    app = XladevTUI(source, clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, _done(app, first_failure))
        assert "ERROR" not in _text(app, "#verdict")
        source.push(lines[first_failure:])  # ends with the end record: diagnosed again at once
        await wait_for(pilot, lambda: "ERROR" in _text(app, "#verdict"))
        assert "The device ran out of memory: graph deadbeefdeadbeef" in option_texts(app, "#findings")[0]


@async_test
async def test_finding_text_is_shown_as_written():
    app = XladevTUI(FixtureSource(fixture_lines()), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, _done(app, 72))
        await pilot.pause()
        fallback = next(text for text in option_texts(app, "#findings") if "aten::nonzero" in text)
        assert "boolean-mask indexing (x[mask])" in fallback  # not eaten as console markup


def _compiling_lines() -> list[str]:
    log = LogBuilder()
    log.compile(0, graph_hash(0), 40, 8, 500_000_000)
    log.step(0, graph_hash(0), 40)
    log.add(rec.CompileStart(step=1, hash="4bc441ec" * 4, nodes=47, site=SITE), 1_000_000)
    return log.lines()


@async_test
async def test_a_compile_shows_its_elapsed_time_ticking_until_it_ends():
    now = [50.0]
    source = FixtureSource(_compiling_lines())
    app = XladevTUI(source, clock=lambda: now[0])
    async with app.run_test(size=(120, 30)) as pilot:
        line = app.query_one("#compile-line", Static)
        await wait_for(pilot, lambda: "compiling graph 4bc441ec" in _text(app, "#compile-line"))
        assert line.display and line.has_class("live")
        assert _text(app, "#compile-line").strip() == \
            "⏳ compiling graph 4bc441ec (47 nodes) at conformer_encoder.py:214 (forward_with_cache) — 0.0 s"
        now[0] = 62.3  # no record arrives while XLA compiles: the line ticks on its own
        await wait_for(pilot, lambda: _text(app, "#compile-line").strip().endswith("— 12.3 s"))
        await pilot.press("3")  # seen from every tab, and the graph is listed as compiling
        assert line.region.height == 1
        table = app.query_one("#graphs", DataTable)
        assert table.get_row("4bc441ec" * 4)[3] == "compiling"
        source.push([rec.dumps(rec.Compile(t=9_000_000_000, step=1, hash="4bc441ec" * 4, nodes=47,
                                           compile_ns=12_300_000_000, site=SITE))])
        await wait_for(pilot, lambda: not line.display)
        assert table.get_row("4bc441ec" * 4)[3] == "12.3 s"


@async_test
async def test_a_replay_that_died_while_compiling_says_so():
    source = FixtureSource(_compiling_lines(), final=(m.DISCONNECTED, "the writer (pid 7) is gone", None))
    app = XladevTUI(source, clock=lambda: 0.0)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: app.shown.state == m.DISCONNECTED)
        line = app.query_one("#compile-line", Static)
        assert line.display and line.has_class("dead")
        text = _text(app, "#compile-line")
        assert text.startswith("✗ graph 4bc441ec (47 nodes) at conforme")  # the site, cut to fit 120 columns
        assert text.endswith(" never finished compiling: the process died while compiling it "
                             "(it started 536 ms into the run)")


@async_test
async def test_selecting_a_finding_or_an_alert_opens_its_graph():
    app, records = _long_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, _done(app, records))
        browser = app.query_one(GraphBrowser)
        table = app.query_one("#graphs", DataTable)
        tabs = app.query_one(TabbedContent)
        await pilot.press("1", "enter")  # the first finding: the compile failure
        assert tabs.active == "tab-graphs" and browser.selected == FAILED_HASH and app.focused is table
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == FAILED_HASH
        assert "failed: failed to compile at step 16: RESOURCE_EXHAUSTED" in _text(app, "#graph-text")
        await pilot.press("1", "down", "enter")  # the recompilation: the site's latest recompiled graph
        assert tabs.active == "tab-graphs" and browser.selected == graph_hash(5)
        assert "recompiled (vs graph 040404040404)" in _text(app, "#graph-text")
        await pilot.press("1")
        app.query_one("#alerts").focus()
        await pilot.press("down", "enter")  # the second newest alert
        assert tabs.active == "tab-graphs" and browser.selected == graph_hash(4)
        await pilot.press("1", "down", "down", "enter")  # host transfers: about no graph, stays
        assert tabs.active == "tab-overview" and browser.selected == graph_hash(4)


# Every ordered pair of tab keys once (a de Bruijn sequence): each key pressed on each tab.
EVERY_PAIR = "11213142232433441"


@async_test
async def test_every_tab_key_works_from_every_tab():
    assert {EVERY_PAIR[i:i + 2] for i in range(len(EVERY_PAIR) - 1)} == {a + b for a in TABS for b in TABS}
    app = XladevTUI(FixtureSource(fixture_lines()), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.shown.records >= 72)
        tabs = app.query_one(TabbedContent)
        await pilot.press(EVERY_PAIR[0])
        for before, key in zip(EVERY_PAIR, EVERY_PAIR[1:]):
            await pilot.press(key)
            assert tabs.active == TABS[key], f"{key} on {TABS[before]}"
            # the focus follows, so the next key is not eaten by a widget of the tab left behind
            assert app.focused is not None and tabs.active_pane in app.focused.ancestors
        for key in "124":  # with the focus in a graph's IR
            await pilot.press("3", "enter")
            assert app.focused.id == "graph-detail"
            await pilot.press(key)
            assert tabs.active == TABS[key]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
@async_test
async def test_tables_fit_their_width_with_long_names(size):
    app, records = _long_app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, _done(app, records))
        for key, tables in (("1", ("#sites", "#transfers", "#fallbacks")), ("2", ("#counters",)),
                            ("3", ("#graphs",))):
            await pilot.press(key)
            await pilot.pause()
            for selector in tables:
                table = app.query_one(selector, DataTable)
                assert table.row_count and table.virtual_size.width <= table.size.width, selector
        await pilot.press("3")
        row = app.query_one("#graphs", DataTable).get_row(graph_hash(0))
        assert row[5].startswith("conformer_encoder.py:214")  # the site, clipped at most at its end
