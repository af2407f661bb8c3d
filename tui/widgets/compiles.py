"""Compile timeline by trigger site, with the recompilation alerts and their causes.

An alert, selected (Enter or a click), opens its recompiled graph in the Graphs tab.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, OptionList, Static
from textual.widgets.option_list import Option

from xladev.schema.sites import short_site
from xladev.schema.units import compact_time_ns
from xladev_tui.run_view import Alert, RunView
from xladev_tui.widgets.common import OpenGraph, SectionOptionList, SectionTable, fit_rows, sync_rows, table_width

MAX_ALERTS_SHOWN = 6
SITE_COLUMNS = ("Site", "Compiles", "Graphs", "Compile time", "Steps", "Alerts")


class CompilePanel(Vertical):
    """A table of trigger sites (compiles, graphs, compile time, steps) and the latest alerts."""

    DEFAULT_CSS = """
    CompilePanel { height: auto; }
    CompilePanel .title { height: 1; text-style: bold; color: $accent; }
    CompilePanel DataTable { height: auto; max-height: 8; }
    CompilePanel #alerts { height: auto; max-height: 14; border: none; padding: 0; background: $surface; }
    CompilePanel #alerts:focus { border: none; }
    CompilePanel #no-alerts { height: auto; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._snap: RunView | None = None
        self._alerts: tuple[Alert, ...] | None = None
        self._targets: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static("Compiles by trigger site", classes="title")
        table = SectionTable(id="sites", cursor_type="row", zebra_stripes=True)
        table.add_columns(*SITE_COLUMNS)
        yield table
        yield Static("Recompilation alerts", classes="title", id="alerts-title")
        yield Static(Text("none: no site has compiled a second graph", style="dim"), id="no-alerts")
        yield SectionOptionList(id="alerts")

    def show(self, snap: RunView) -> None:
        self._snap = snap
        rows = []
        for site in snap.sites:
            steps = f"{site.first_step}" if site.first_step == site.last_step else f"{site.first_step}–{site.last_step}"
            rows.append((site.site, (short_site(site.site), str(site.compiles), str(site.graphs),
                                     compact_time_ns(site.compile_ns), steps, str(site.alerts) if site.alerts else "")))
        sync_rows(self.query_one("#sites", DataTable), fit_rows(rows, SITE_COLUMNS, 0, table_width(self)))
        self.query_one("#alerts-title", Static).update(
            f"Recompilation alerts ({len(snap.alerts)}, newest first; Enter opens the graph)" if snap.alerts
            else "Recompilation alerts")
        if snap.alerts == self._alerts:
            return
        self._alerts = snap.alerts
        shown = list(snap.alerts)[-MAX_ALERTS_SHOWN:][::-1]
        options = self.query_one("#alerts", OptionList)
        highlighted = options.highlighted
        options.clear_options()
        options.add_options([Option(alert_text(alert)) for alert in shown])
        if len(snap.alerts) > MAX_ALERTS_SHOWN:
            options.add_option(Option(Text(f"… {len(snap.alerts) - MAX_ALERTS_SHOWN} earlier alerts", style="dim"),
                                      disabled=True))
        self._targets = [alert.graph_hash for alert in shown]
        if shown:  # Enter acts on the highlighted entry: there always is one
            options.highlighted = 0 if highlighted is None else min(highlighted, len(shown) - 1)
        options.display = bool(shown)
        self.query_one("#no-alerts").display = not shown

    def on_resize(self, event) -> None:
        if self._snap is not None:  # the site column is clipped to the new width
            self.show(self._snap)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_list.id != "alerts":
            return
        event.stop()
        if event.option_index < len(self._targets):
            self.post_message(OpenGraph(self._targets[event.option_index]))


def alert_text(alert: Alert) -> Text:
    """One alert: where and when, every change, and the cause."""
    text = Text()
    text.append("⚠ ", style="bold red")
    text.append(f"step {alert.step} ", style="bold")
    text.append(short_site(alert.site), style="bold cyan")
    text.append(f" recompiled (graph {alert.graphs_at_site} here, {compact_time_ns(alert.compile_ns)}); "
                f"cause: {alert.cause or '?'}")
    for change in alert.changes[:4]:
        text.append(f"\n    {change}", style="yellow")
    if len(alert.changes) > 4:
        text.append(f"\n    … {len(alert.changes) - 4} more changes", style="dim")
    return text


def alerts_text(snap: RunView) -> Text:
    """The latest alerts, newest first, as one text (what the alert list shows)."""
    if not snap.alerts:
        return Text("none: no site has compiled a second graph", style="dim")
    shown = list(snap.alerts)[-MAX_ALERTS_SHOWN:][::-1]
    text = Text("\n").join(alert_text(alert) for alert in shown)
    if len(snap.alerts) > MAX_ALERTS_SHOWN:
        text.append(f"\n… {len(snap.alerts) - MAX_ALERTS_SHOWN} earlier alerts", style="dim")
    return text
