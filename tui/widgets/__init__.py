"""The TUI's widgets, one module per screen region; each `show(snapshot)` redraws from a RunView."""

from xladev_tui.widgets.compiles import CompilePanel
from xladev_tui.widgets.counters_panel import CountersPanel
from xladev_tui.widgets.graphs import GraphBrowser
from xladev_tui.widgets.header import RunHeader
from xladev_tui.widgets.logpane import LogPane
from xladev_tui.widgets.transfers_panel import FallbackPanel, TransfersPanel

__all__ = ["CompilePanel", "CountersPanel", "FallbackPanel", "GraphBrowser", "LogPane", "RunHeader", "TransfersPanel"]
