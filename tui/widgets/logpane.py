"""The log pane: the child's output and the TUI's own notices."""

from __future__ import annotations

from textual.widgets import Log

from xladev_tui.run_model import RunView


class LogPane(Log):
    """Appends the lines of each snapshot that it has not shown yet."""

    DEFAULT_CSS = """
    LogPane { height: 1fr; border: none; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=2000, **kwargs)
        self._written = 0

    def show(self, snap: RunView) -> None:
        new = snap.log_total - self._written
        if new <= 0:
            return
        lines = snap.log[-new:] if new <= len(snap.log) else snap.log
        self.write_lines(lines)
        self._written = snap.log_total
