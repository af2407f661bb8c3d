"""The TUI's widgets, one module per screen region; each `show(snapshot)` redraws from a RunView.

Header (every tab): `header`. Overview: `findings`, `time_panel`, `compiles`, `transfers_panel`.
Counters: `counters_panel`. Graphs: `graphs`. Log (and the pane under every view): `logpane`.
"""

from xladev_tui.widgets.compiles import CompilePanel
from xladev_tui.widgets.counters_panel import CountersPanel
from xladev_tui.widgets.findings import FindingsPanel
from xladev_tui.widgets.graphs import GraphBrowser
from xladev_tui.widgets.header import RunHeader
from xladev_tui.widgets.logpane import LogPane
from xladev_tui.widgets.time_panel import TimePanel
from xladev_tui.widgets.transfers_panel import FallbackPanel, TransfersPanel

__all__ = ["CompilePanel", "CountersPanel", "FallbackPanel", "FindingsPanel", "GraphBrowser", "LogPane", "RunHeader",
           "TimePanel", "TransfersPanel"]
