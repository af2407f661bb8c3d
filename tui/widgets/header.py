"""Top region: command, pid, device, state, step, step-time sparkline, compile count, the graph
compiling now (with its elapsed time, ticking), and the latest profile the run wrote (its steps and
the command that opens it in TensorBoard), seen from every tab."""

from __future__ import annotations

import time
from typing import Callable

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

from xladev.schema.units import compact_time_ns, format_bytes
from xladev_tui.run_view import DISCONNECTED, ERROR, EXITED, FINISHED, RUNNING, WAITING, RunView

# How often the compile line's elapsed time is redrawn, in seconds (no record arrives while XLA compiles).
TICK = 0.2

STATE_STYLES = {WAITING: "bold black on yellow", RUNNING: "bold black on green", FINISHED: "bold black on cyan",
                EXITED: "bold black on cyan", DISCONNECTED: "bold white on red", ERROR: "bold white on red"}


class RunHeader(Vertical):
    """Three lines: what runs where; its state and numbers; the step-time sparkline. One more for the device
    memory once the run sampled it, one while a graph compiles (or when the job died compiling one), and one for
    the latest profile once the run wrote one.

    Args:
      clock: the model's clock (seconds), for the elapsed compile time.
    """

    DEFAULT_CSS = """
    RunHeader { height: auto; dock: top; background: $boost; }
    RunHeader > Static { height: 1; width: 1fr; }
    RunHeader #compile-line { display: none; }
    RunHeader #compile-line.shown { display: block; }
    RunHeader #compile-line.live { background: $warning 30%; text-style: bold; }
    RunHeader #compile-line.dead { background: $error 40%; text-style: bold; }
    RunHeader #profile-line { display: none; color: $text-muted; }
    RunHeader #profile-line.shown { display: block; }
    RunHeader #spark-row { height: 1; }
    RunHeader #spark-label { width: auto; padding-right: 1; color: $text-muted; }
    RunHeader Sparkline { height: 1; width: 1fr; }
    RunHeader #memory-row { height: 1; display: none; }
    RunHeader #memory-row.shown { display: block; }
    RunHeader #memory-label { width: auto; padding-right: 1; color: $text-muted; }
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, **kwargs) -> None:
        super().__init__(**kwargs)
        self.clock = clock
        self._snap: RunView | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="title-line")
        yield Static(id="status-line")
        with Horizontal(id="spark-row"):
            yield Static("step time", id="spark-label")
            yield Sparkline([], id="step-spark", summary_function=max)
        with Horizontal(id="memory-row"):
            yield Static("memory", id="memory-label")
            yield Sparkline([], id="memory-spark", summary_function=max)
        yield Static(id="compile-line")
        yield Static(id="profile-line")

    def on_mount(self) -> None:
        self.set_interval(TICK, self._tick)

    def _tick(self) -> None:
        if self._snap is not None and self._snap.compiling and not self._snap.ended:
            self._show_compiling(self._snap)

    def _show_compiling(self, snap: RunView) -> None:
        line = self.query_one("#compile-line", Static)
        shown = bool(snap.compiling)
        line.set_class(shown, "shown")
        line.set_class(shown and not snap.ended, "live")
        line.set_class(shown and snap.ended, "dead")
        if not shown:
            return
        first = snap.compiling[0]
        more = f" (+{len(snap.compiling) - 1} more)" if len(snap.compiling) > 1 else ""
        mark = "⏳ " if not snap.ended else "✗ "
        width = (line.size.width or self.app.size.width) - cell_len(mark + more)
        text = mark + first.text(self.clock(), snap.ended, snap.died, width) + more
        line.update(Text(text, no_wrap=True, overflow="ellipsis"))

    def show(self, snap: RunView, paused: bool = False, pending: int = 0) -> None:
        self._snap = snap
        self._show_compiling(snap)
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
        if snap.last_step is None or snap.steps != snap.last_step + 1:  # else the count says nothing new
            status.append(f" ({snap.steps} done)")
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
        # The step times go with their sparkline, so that the status line keeps the counts at 80 columns.
        label = "step time"
        if snap.last_step_ns is not None:
            label = f"step {compact_time_ns(snap.last_step_ns)} (avg {compact_time_ns(snap.mean_step_ns)})"
        self.query_one("#spark-label", Static).update(label)
        spark = self.query_one("#step-spark", Sparkline)
        data = [t / 1e6 for t in snap.step_times[-200:]]
        if list(spark.data or []) != data:
            spark.data = data
        self._show_memory(snap)
        self._show_profile(snap)

    def _show_memory(self, snap: RunView) -> None:
        """The device memory live at each sampled step's end, with the latest and the highest peak."""
        row = self.query_one("#memory-row", Horizontal)
        row.set_class(bool(snap.memory), "shown")
        if not snap.memory:
            return
        step, live, _ = snap.memory[-1]
        peak = max(sample[2] for sample in snap.memory)
        self.query_one("#memory-label", Static).update(
            f"memory {format_bytes(live)} at step {step} (peak {format_bytes(peak)})")
        spark = self.query_one("#memory-spark", Sparkline)
        data = [sample[1] / 1e6 for sample in snap.memory[-200:]]
        if list(spark.data or []) != data:
            spark.data = data

    def _show_profile(self, snap: RunView) -> None:
        line = self.query_one("#profile-line", Static)
        line.set_class(bool(snap.profiles), "shown")
        if snap.profiles:
            latest = snap.profiles[-1]
            more = f" (+{len(snap.profiles) - 1} earlier, in the log)" if len(snap.profiles) > 1 else ""
            line.update(Text(f"profile: {latest.window} → {latest.command}{more}  {latest.path}", no_wrap=True,
                             overflow="ellipsis"))
