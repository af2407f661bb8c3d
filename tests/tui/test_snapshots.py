"""Screen snapshots (pytest-textual-snapshot) on fixed logs, at 80x24, 120x40 and 160x50.

The fixture log (short names) and `logs.long_run()` (long paths and names, a compile failure,
five recompiles) check that the screen stays readable at 80 and 120 columns.

Regenerate after an intended change of the screen with:
    .venv/bin/python -m pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from tests.tui.helpers import fixture_lines, settle, wait_for  # noqa: E402
from tests.tui.logs import SITE, LogBuilder, graph_hash, long_run  # noqa: E402
from xladev.schema import records as rec  # noqa: E402
from xladev_tui.app import XladevTUI  # noqa: E402
from xladev_tui.sources import FixtureSource  # noqa: E402

SIZES = [(80, 24), (160, 50)]
# Screenshots alike in a row before one is compared: a snapshot is exact, and the records and their diagnosis
# reach the screen from the reader thread. (The 80x24 long-names snapshot that once differed after five alike
# screenshots was a stale layout, not a late one: tui/layout_fix.py, tests/tui/test_layout.py.)
_ALIKE = 5
READABLE_SIZES = [(80, 24), (120, 40)]


def _app(lines=None) -> XladevTUI:
    # A fixed log, a fixed clock: the screen depends on nothing but the log.
    return XladevTUI(FixtureSource(fixture_lines() if lines is None else lines), clock=lambda: 0.0)


def _loaded(records: int = 72):
    async def loaded(pilot) -> None:
        await wait_for(pilot, lambda: pilot.app.shown.records >= records
                       and pilot.app.shown.diagnosis.records >= records)
        await settle(pilot, same=_ALIKE)
    return loaded


def _then(records: int, *keys: str):
    async def run_before(pilot) -> None:
        await _loaded(records)(pilot)
        await pilot.press(*keys)
        await settle(pilot, same=_ALIKE)
    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_overview(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_loaded())


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_graph_ir(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_then(72, "3", "down", "enter"))


def test_counters_filtered(snap_compare):
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_then(72, "slash", *"time", "enter"))


@pytest.mark.parametrize("size", READABLE_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("tab", ["1", "3"], ids=["overview", "graphs"])
def test_long_names(snap_compare, tab, size):
    lines = long_run().lines()
    assert snap_compare(_app(lines), terminal_size=size, run_before=_then(len(lines), tab))


def test_long_names_counters(snap_compare):
    lines = long_run().lines()
    assert snap_compare(_app(lines), terminal_size=(80, 24), run_before=_then(len(lines), "2"))


def test_compiling(snap_compare):
    log = LogBuilder()
    log.compile(0, graph_hash(0), 40, 8, 500_000_000)
    log.step(0, graph_hash(0), 40)
    log.add(rec.CompileStart(step=1, hash="4bc441ec" * 4, nodes=47, site=SITE), 1_000_000)
    lines = log.lines()
    assert snap_compare(_app(lines), terminal_size=(80, 24), run_before=_loaded(len(lines)))


def test_overview_lists_reached_with_the_arrow_keys(snap_compare):
    # From the findings (where the overview starts), ↓ past each list's end: the sites, the alerts, then the
    # transfer hot spots, highlighted and scrolled into view.
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_then(72, *["down"] * 5))


def test_counters_sorted_after_scrolling_show_the_top_row(snap_compare):
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_then(72, "2", *["down"] * 18, "s"))


def test_log_tab_after_shrinking_to_80x24(snap_compare):
    notice = ("the log has no end record: the process was killed or is still running, and its writer "
              "(pid 4242 on host trainer-0) is gone")
    output = [("stdout", f"epoch 0 step {i} loss {1 / (i + 1):.4f}") for i in range(60)]
    app = XladevTUI(FixtureSource(fixture_lines(), output=output, final=("disconnected", notice, None)),
                    clock=lambda: 0.0)

    async def run_before(pilot) -> None:
        await _loaded(72)(pilot)
        await pilot.press("4")
        await pilot.resize_terminal(80, 24)
        await settle(pilot, same=_ALIKE)

    assert snap_compare(app, terminal_size=(160, 50), run_before=run_before)
