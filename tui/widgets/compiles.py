"""Compile timeline by trigger site, with the recompilation alerts and their causes."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from xladev.schema.sites import short_site
from xladev.schema.units import compact_time_ns
from xladev_tui.run_model import RunView
from xladev_tui.widgets.common import sync_rows

MAX_ALERTS_SHOWN = 6


class CompilePanel(Vertical):
    """A table of trigger sites (compiles, graphs, compile time, steps) and the latest alerts."""

    DEFAULT_CSS = """
    CompilePanel { height: auto; }
    CompilePanel .title { height: 1; text-style: bold; color: $accent; }
    CompilePanel DataTable { height: auto; max-height: 8; }
    CompilePanel #alerts { height: auto; max-height: 12; }
    """

    def compose(self) -> ComposeResult:
        yield Static("Compiles by trigger site", classes="title")
        table = DataTable(id="sites", cursor_type="row", zebra_stripes=True)
        table.add_columns("Site", "Compiles", "Graphs", "Compile time", "Steps", "Alerts")
        yield table
        yield Static("Recompilation alerts", classes="title", id="alerts-title")
        yield Static("none", id="alerts")

    def show(self, snap: RunView) -> None:
        rows = []
        for site in snap.sites:
            steps = f"{site.first_step}" if site.first_step == site.last_step else f"{site.first_step}–{site.last_step}"
            rows.append((site.site, (short_site(site.site), str(site.compiles), str(site.graphs),
                                     compact_time_ns(site.compile_ns), steps, str(site.alerts) if site.alerts else "")))
        sync_rows(self.query_one("#sites", DataTable), rows)
        self.query_one("#alerts-title", Static).update(
            f"Recompilation alerts ({len(snap.alerts)})" if snap.alerts else "Recompilation alerts")
        self.query_one("#alerts", Static).update(alerts_text(snap))


def alerts_text(snap: RunView) -> Text:
    """The latest alerts, newest first: where and when, every change, and the cause."""
    text = Text()
    if not snap.alerts:
        text.append("none: no site has compiled a second graph", style="dim")
        return text
    shown = list(snap.alerts)[-MAX_ALERTS_SHOWN:][::-1]
    for index, alert in enumerate(shown):
        if index:
            text.append("\n")
        text.append("⚠ ", style="bold red")
        text.append(f"step {alert.step} ", style="bold")
        text.append(short_site(alert.site), style="bold cyan")
        text.append(f" recompiled (graph {alert.graphs_at_site} here, {compact_time_ns(alert.compile_ns)}); "
                    f"cause: {alert.cause or '?'}")
        for change in alert.changes[:4]:
            text.append(f"\n    {change}", style="yellow")
        if len(alert.changes) > 4:
            text.append(f"\n    … {len(alert.changes) - 4} more changes", style="dim")
    if len(snap.alerts) > MAX_ALERTS_SHOWN:
        text.append(f"\n… {len(snap.alerts) - MAX_ALERTS_SHOWN} earlier alerts", style="dim")
    return text
