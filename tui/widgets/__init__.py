"""The TUI's widgets, one module per screen region; each `show(snapshot)` redraws from a Snapshot."""

from tui.widgets.compiles import CompilePanel
from tui.widgets.counters import CountersPanel
from tui.widgets.graphs import GraphBrowser
from tui.widgets.header import RunHeader
from tui.widgets.logpane import LogPane
from tui.widgets.transfers import FallbackPanel, TransfersPanel

__all__ = ["CompilePanel", "CountersPanel", "FallbackPanel", "GraphBrowser", "LogPane", "RunHeader", "TransfersPanel"]
