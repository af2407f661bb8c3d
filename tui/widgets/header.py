"""Top region: command, pid, device, state, step, step-time sparkline, compile count."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

from xladev.schema.units import compact_time_ns
from xladev_tui.run_model import DISCONNECTED, ERROR, EXITED, FINISHED, RUNNING, WAITING, RunView

STATE_STYLES = {WAITING: "bold black on yellow", RUNNING: "bold black on green", FINISHED: "bold black on cyan",
                EXITED: "bold black on cyan", DISCONNECTED: "bold white on red", ERROR: "bold white on red"}


class RunHeader(Vertical):
    """Three lines: what runs where; its state and numbers; the step-time sparkline."""

    DEFAULT_CSS = """
    RunHeader { height: 3; dock: top; background: $boost; }
    RunHeader > Static { height: 1; width: 1fr; }
    RunHeader #spark-row { height: 1; }
    RunHeader #spark-label { width: auto; padding-right: 1; color: $text-muted; }
    RunHeader Sparkline { height: 1; width: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="title-line")
        yield Static(id="status-line")
        with Horizontal(id="spark-row"):
            yield Static("step time", id="spark-label")
            yield Sparkline([], id="step-spark", summary_function=max)

    def show(self, snap: RunView, paused: bool = False, pending: int = 0) -> None:
        title = Text()
        title.append("xladev ", style="bold")
        title.append(snap.command or snap.source or "?", style="bold cyan")
        if snap.pid is not None:
            title.append(f"  pid {snap.pid}")
        if snap.device:
            title.append(f"  {snap.device}", style="dim")
        title.no_wrap = True
        title.overflow = "ellipsis"
        self.query_one("#title-line", Static).update(title)

        status = Text(no_wrap=True, overflow="ellipsis")
        status.append(f" {snap.state_text} ", style=STATE_STYLES.get(snap.state, "bold"))
        if paused:
            status.append(" PAUSED ", style="bold black on magenta")
            if pending:
                status.append(f" +{pending} records", style="magenta")
        step = "-" if snap.last_step is None else str(snap.last_step)
        status.append(f"  step {step}", style="bold")
        status.append(f" ({snap.steps} done)")
        if snap.last_step_ns is not None:
            status.append(f"  last {compact_time_ns(snap.last_step_ns)}")
            status.append(f" avg {compact_time_ns(snap.mean_step_ns)}")
        status.append(f"  compiles {snap.compiles}", style="bold")
        if snap.compiles:
            status.append(f" ({compact_time_ns(snap.compile_ns)})")
        if snap.alerts:
            status.append(f"  recompiles {len(snap.alerts)}", style="bold red")
        if snap.hot_spots:
            status.append(f"  d→h {sum(s.count for s in snap.hot_spots)}", style="yellow")
        if snap.fallbacks:
            status.append(f"  fallbacks {sum(f.count for f in snap.fallbacks)}", style="yellow")
        self.query_one("#status-line", Static).update(status)
        spark = self.query_one("#step-spark", Sparkline)
        data = [t / 1e6 for t in snap.step_times[-200:]]
        if list(spark.data or []) != data:
            spark.data = data
