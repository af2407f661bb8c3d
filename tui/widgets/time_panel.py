"""Where the time went: the run's wall time by part (tracing, compile, execution, transfers,
fallbacks, other), overall and in the last completed step, exact from the event log."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from xladev.schema.units import compact_time_ns
from xladev_tui.run_view import RunView, TimeView


class TimePanel(Vertical):
    """A compact table: part, total, share of the wall time, mean per step, the last step."""

    DEFAULT_CSS = """
    TimePanel { height: auto; }
    TimePanel .title { height: 1; text-style: bold; color: $accent; }
    TimePanel #time-table { height: auto; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: TimeView | None = None

    def compose(self) -> ComposeResult:
        yield Static("Where the time went", classes="title", id="time-title")
        yield Static(Text("no times yet: they come with the first records", style="dim"), id="time-table")

    def show(self, snap: RunView) -> None:
        view = snap.diagnosis.time
        if view is None or view is self._shown:
            return
        self._shown = view
        wall = next((row.total_ns for row in view.rows if row.part == "wall"), None)
        title = "Where the time went" + (f": {compact_time_ns(wall)} wall, {view.steps} step{'' if view.steps == 1 else 's'}"
                                         if wall else "")
        self.query_one("#time-title", Static).update(title)
        self.query_one("#time-table", Static).update(time_table(view))


def time_table(view: TimeView) -> Table | Group:
    """The table of a `TimeView` (the largest part in bold, the wall time last)."""
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, header_style="bold")
    table.add_column("Part", no_wrap=True)
    table.add_column("Total", justify="right", no_wrap=True)
    table.add_column("Share", justify="right", no_wrap=True)
    table.add_column("Per step", justify="right", no_wrap=True)
    table.add_column("Last step" if view.last_step is None else f"Step {view.last_step}", justify="right",
                     no_wrap=True)
    parts = [row for row in view.rows if row.part != "wall"]
    largest = max(parts, key=lambda row: row.total_ns or 0.0, default=None)
    for row in view.rows:
        style = "bold" if row is largest and row.total_ns else ("dim" if row.part == "wall" else "")
        cells = (row.short_label, _time(row.total_ns), "" if row.share is None else f"{row.share:.0%}",
                 _time(row.per_step_ns), _time(row.last_step_ns))
        table.add_row(*(Text(cell) for cell in cells), style=style)
    if not view.overlaps:
        return table
    return Group(table, Text("the parts add up to more than the wall time: asynchronous work overlapped",
                             style="dim italic"))


def _time(ns: float | None) -> str:
    return "-" if ns is None else compact_time_ns(ns)
