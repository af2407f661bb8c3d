"""The Textual app: a background reader feeds the model; the screen redraws from snapshots.

The reader thread applies every item a source returns to a `RunModel` and posts a snapshot at
most every `refresh_interval` seconds (100 ms), and never more than one at a time: at thousands of
records a second the screen is redrawn ten times a second from the latest state, so the lag
between a record written and a record shown stays bounded. The same thread recomputes the report's
findings at most once a second (`RunModel.update_diagnosis`).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Footer, Label, OptionList, Static, TabbedContent, TabPane

from xladev_tui.layout_fix import count_every_layout_request
from xladev_tui.run_model import DISCONNECTED, ERROR, EXITED, RunModel, RunView, WAITING
from xladev_tui.sources import Source
from xladev_tui.widgets import (
    CompilePanel, CountersPanel, FallbackPanel, FindingsPanel, GraphBrowser, LogPane, RunHeader, TimePanel,
    TransfersPanel,
)
from xladev_tui.widgets.common import LeaveSection, OpenGraph

# From this width the findings and the time breakdown sit side by side; from WIDER the overview's
# tables take two columns too, and the graph list sits beside the graph's details (narrower, its
# site column would be cut to nothing).
WIDE_COLUMNS = 120
WIDER_COLUMNS = 160
TALL_ROWS = 40
# The widget each tab key focuses (each tab has one, so the key never leaves the focus behind).
TAB_FOCUS = {"overview": "#findings", "counters": "#counters", "graphs": "#graphs", "log": "#log-pane"}
# The overview's lists, top to bottom: ↑/↓ and PgUp/PgDn go from one to the next past an end (LeaveSection).
OVERVIEW_LISTS = ("#findings", "#sites", "#alerts", "#transfers", "#fallbacks")


class SnapshotReady(Message):
    """The reader has a newer snapshot (read it from `XladevTUI.latest`)."""


class ConfirmQuit(ModalScreen[bool]):
    """Asks before stopping a child the UI started."""

    DEFAULT_CSS = """
    ConfirmQuit { align: center middle; }
    ConfirmQuit > Vertical { width: 60; max-width: 90%; height: auto; border: thick $error; background: $surface;
                             padding: 1 2; }
    ConfirmQuit Label { width: 100%; margin-bottom: 1; }
    ConfirmQuit Horizontal { height: auto; align: center middle; }
    ConfirmQuit Button { margin: 0 1; }
    """
    BINDINGS = [Binding("y", "answer(True)", "stop it"), Binding("n,escape", "answer(False)", "keep running")]

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"{self.what} is still running. Stop it and quit?")
            with Horizontal():
                yield Button("Stop and quit (y)", variant="error", id="yes")
                yield Button("Keep running (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class XladevTUI(App):
    """The live (or replayed) view of one run.

    Args:
      source: where records come from (`tui.sources`).
      clock: monotonic seconds for the model (tests pass a fixed one).
      refresh_interval: the most often the screen is redrawn, in seconds.
    """

    TITLE = "xladev tui"
    ENABLE_COMMAND_PALETTE = False
    # No automatic focus (Textual's would scroll the overview): `on_mount` focuses the findings.
    AUTO_FOCUS = None
    CSS = """
    Screen { layout: vertical; }
    #body { height: 1fr; }
    #overview-scroll { height: 1fr; }
    #overview-top { layout: vertical; height: auto; }
    #overview-top.wide { layout: grid; grid-size: 2; grid-columns: 1fr 52; grid-gutter: 0 2; }
    #overview-top > * { height: auto; margin-bottom: 1; }
    #overview-top.wide { margin-bottom: 1; }
    #overview-top.wide > * { margin-bottom: 0; }
    #overview { layout: vertical; height: auto; }
    #overview.wide { layout: grid; grid-size: 2; grid-columns: 1fr 1fr; grid-gutter: 0 2; }
    #overview.wide > .column { height: auto; }
    #notice { height: auto; display: none; padding: 0 1; }
    #notice.shown { display: block; }
    #notice.bad { background: $error 20%; }
    #notice.info { background: $warning 15%; }
    #bottom-log { display: none; height: 10; border-top: solid $primary; }
    Screen.tall #bottom-log { display: block; }
    Screen.tall GraphBrowser #graphs { max-height: 12; }
    TabPane { padding: 0; }
    """
    BINDINGS = [
        Binding("q", "quit_app", "Quit"),
        Binding("ctrl+c", "quit_app", "Quit", show=False, priority=True),
        Binding("p", "toggle_pause", "Pause"),
        Binding("1", "show_tab('overview')", "Overview"),
        Binding("2", "show_tab('counters')", "Counters"),
        Binding("3", "show_tab('graphs')", "Graphs"),
        Binding("4", "show_tab('log')", "Log"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self, source: Source, clock: Callable[[], float] = time.monotonic,
                 refresh_interval: float = 0.1, **kwargs) -> None:
        count_every_layout_request()  # else a loaded machine can leave a panel at its old height
        super().__init__(**kwargs)
        self.source = source
        self.model = RunModel(source.label, clock=clock)
        self.refresh_interval = refresh_interval
        self.latest: RunView = self.model.snapshot()
        self.shown: RunView = self.latest
        self.shown_at = 0.0
        self.paused = False
        self.renders = 0
        self._stop = threading.Event()
        self._pending = threading.Event()
        self._reader: threading.Thread | None = None
        self._source_stopped = False

    # ---- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield RunHeader(clock=self.model.clock, id="header")
        with TabbedContent(initial="tab-overview", id="body"):
            with TabPane("Overview", id="tab-overview"):
                with VerticalScroll(id="overview-scroll"):
                    yield Static(id="notice")
                    with Grid(id="overview-top"):
                        yield FindingsPanel(id="findings-panel")
                        yield TimePanel(id="time-panel")
                    with Grid(id="overview"):
                        with Vertical(classes="column"):
                            yield CompilePanel(id="compiles")
                        with Vertical(classes="column"):
                            yield TransfersPanel(id="transfers-panel")
                            yield FallbackPanel(id="fallbacks-panel")
            with TabPane("Counters", id="tab-counters"):
                yield CountersPanel(id="counters-panel")
            with TabPane("Graphs", id="tab-graphs"):
                yield GraphBrowser(id="graph-browser")
            with TabPane("Log", id="tab-log"):
                yield LogPane(id="log-pane")
        yield LogPane(id="bottom-log")
        yield Footer()

    def on_mount(self) -> None:
        self._layout_for(self.size.width, self.size.height)
        # The overview starts on its findings, so ↑/↓ move through them (and on to the other lists) at once; it
        # keeps its scroll position, the findings' title and verdict in view.
        self.query_one("#findings").focus(scroll_visible=False)
        self._render(self.latest)
        self._reader = threading.Thread(target=self._read_loop, name="xladev-tui-reader", daemon=True)
        self._reader.start()

    def on_resize(self, event) -> None:
        self._layout_for(event.size.width, event.size.height)

    def _layout_for(self, width: int, height: int) -> None:
        wide = width >= WIDE_COLUMNS
        self.query_one("#overview-top").set_class(wide, "wide")
        self.query_one("#overview").set_class(width >= WIDER_COLUMNS, "wide")
        self.query_one(GraphBrowser).set_class(width >= WIDER_COLUMNS, "wide")
        self.screen.set_class(height >= TALL_ROWS, "tall")

    # ---- the reader thread --------------------------------------------------------------------
    def _read_loop(self) -> None:
        try:
            self.source.start()
        except Exception as exc:  # a source that cannot start is a state, not a crash
            self.model.set_state(ERROR, f"cannot start {self.source.label}: {exc}")
        last_post = 0.0
        model = self.model
        while not self._stop.is_set():
            try:
                items = self.source.read(0.05)
            except Exception as exc:
                model.set_state(DISCONNECTED, f"reading {self.source.label} failed: {type(exc).__name__}: {exc}")
                items = []
                self._stop.wait(0.5)
            if items:
                model.apply_all(items)
            model.update_diagnosis()  # at most once a second, and once more when the run ends
            now = time.monotonic()
            if model.version != self.latest.version and now - last_post >= self.refresh_interval:
                self.latest = model.snapshot()
                last_post = now
                if not self._pending.is_set():
                    self._pending.set()
                    self.post_message(SnapshotReady())

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        self._pending.clear()
        snap = self.latest
        if self.paused:
            self.query_one(RunHeader).show(self.shown, paused=True, pending=snap.records - self.shown.records)
            return
        self._render(snap)

    def _render(self, snap: RunView) -> None:
        self.query_one(RunHeader).show(snap, paused=self.paused)
        self._show_notice(snap)
        self.query_one(FindingsPanel).show(snap)
        self.query_one(TimePanel).show(snap)
        self.query_one(CompilePanel).show(snap)
        self.query_one(TransfersPanel).show(snap)
        self.query_one(FallbackPanel).show(snap)
        self.query_one(CountersPanel).show(snap)
        self.query_one(GraphBrowser).show(snap)
        for pane in self.query(LogPane):
            pane.show(snap)
        self.shown = snap
        self.shown_at = time.monotonic()
        self.renders += 1

    def _show_notice(self, snap: RunView) -> None:
        notice = self.query_one("#notice", Static)
        text = Text()
        bad = False
        if snap.state == WAITING:
            text.append(f"Waiting: {self.model.state_detail}", style="bold")
        elif snap.state == ERROR:
            text.append(f"Error: {self.model.state_detail}", style="bold")
            bad = True
        elif snap.state == DISCONNECTED:
            text.append(f"Disconnected: {self.model.state_detail}", style="bold")
            if snap.output_lines:  # a replay with the job's saved output: how it ended
                text.append("\nIts last output:", style="bold")
                for line in [line for line in snap.log if not line.startswith("[xladev tui]")][-8:]:
                    text.append("\n  " + line)
            bad = True
        elif snap.state == EXITED and snap.exit_code != 0:
            text.append(f"The job {snap.state_text}. Its last output:", style="bold")
            for line in snap.log[-8:]:
                text.append("\n  " + line)
            bad = True
        if snap.truncated and snap.state != EXITED:
            text.append("\n" if text else "")
            text.append("The log's last line was cut short (ignored).")
        notice.update(text)
        notice.set_class(bool(text), "shown")
        notice.set_class(bad, "bad")
        notice.set_class(bool(text) and not bad, "info")

    # ---- actions ------------------------------------------------------------------------------
    def action_show_tab(self, tab: str) -> None:
        # Drop the focus before switching: a focused widget in the pane being hidden would hand the
        # focus to its neighbour in that pane, and a pane whose widget gets the focus becomes the
        # active one again (keys 1 and 4 did nothing on the Graphs tab).
        self.set_focus(None)
        self.query_one(TabbedContent).active = f"tab-{tab}"
        # The overview keeps its scroll position (the findings' title and verdict stay in view).
        self.query_one(TAB_FOCUS[tab]).focus(scroll_visible=tab != "overview")

    def on_leave_section(self, message: LeaveSection) -> None:
        """↑/↓ or PgUp/PgDn went past the end of an overview list: the next list with entries, at its near end."""
        message.stop()
        focused = self.focused
        ids = [selector[1:] for selector in OVERVIEW_LISTS]
        if focused is None or focused.id not in ids:
            return
        index = ids.index(focused.id) + message.direction
        while 0 <= index < len(ids):
            target = self.query_one(OVERVIEW_LISTS[index])
            entries = target.option_count if isinstance(target, OptionList) else target.row_count
            if target.display and entries:
                near = 0 if message.direction > 0 else entries - 1
                if isinstance(target, OptionList):
                    target.highlighted = near
                else:
                    target.move_cursor(row=near, animate=False, scroll=False)
                target.focus(scroll_visible=False)
                target.scroll_visible(animate=False)  # the whole list in the overview's view, its title above it
                return
            index += message.direction

    def on_open_graph(self, message: OpenGraph) -> None:
        """An alert or a finding was selected: the Graphs tab, at that graph."""
        message.stop()
        self.action_show_tab("graphs")
        if not self.query_one(GraphBrowser).show_graph(message.graph_hash):
            self.notify(f"graph {message.graph_hash[:12]} is not in the list", severity="warning", timeout=3)

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.paused:
            self.query_one(RunHeader).show(self.shown, paused=True)
        else:
            self._render(self.latest)

    def action_filter(self) -> None:
        self.query_one(TabbedContent).active = "tab-counters"
        self.query_one(CountersPanel).focus_filter()

    def action_sort(self) -> None:
        self.query_one(TabbedContent).active = "tab-counters"
        self.query_one(CountersPanel).cycle_sort()

    def action_back(self) -> None:
        if self.query_one(TabbedContent).active == "tab-graphs":
            self.query_one(GraphBrowser).back_to_list()
        elif self.focused is not None and self.focused.id == "counter-filter":
            self.query_one("#counters", DataTable).focus()

    def check_action(self, action: str, parameters) -> bool | None:
        # While typing in the filter box the single-letter keys are text, not commands.
        if action in ("quit_app", "show_tab", "toggle_pause", "sort", "filter") and self._typing():
            return False
        return True

    def _typing(self) -> bool:
        focused = self.focused
        return focused is not None and focused.id == "counter-filter"

    def action_quit_app(self) -> None:
        if self.source.owns_child and self.source.child_running():
            self.push_screen(ConfirmQuit(self.source.label), self._quit_answer)
            return
        self._stop_and_exit()

    def _quit_answer(self, stop: bool | None) -> None:
        if stop:
            self._stop_and_exit()

    def _stop_and_exit(self) -> None:
        self._stop.set()
        if not self._source_stopped:
            self._source_stopped = True
            self.source.stop()
        self.exit(self.model.exit_code)

    def on_unmount(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(timeout=2)
        if not self._source_stopped:  # the UI is gone: release the file, stop a child it started
            self._source_stopped = True
            self.source.stop()
