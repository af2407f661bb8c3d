"""The log pane: the child's output and the TUI's own notices, wrapped to the pane's width.

Textual's `Log` cuts a line at the pane's edge, and a notice of the UI ("disconnected: the log has no end
record ...") is longer than 80 columns. So each line is wrapped here (its continuation indented), and on a
resize the lines kept are wrapped again for the new width and the pane shows the bottom again: a smaller
terminal would otherwise leave the newest lines below the fold.
"""

from __future__ import annotations

import collections
import textwrap

from textual.widgets import Log

from xladev_tui.run_model import RunView

MAX_LINES = 2000
# Cells kept free at the right for the vertical scrollbar, so a wrapped line never runs under it.
SCROLLBAR_CELLS = 2
CONTINUATION = "  "


def wrap_line(line: str, width: int) -> list[str]:
    """`line` cut into pieces of at most `width` cells, at spaces where it can, the later ones indented.

    Args:
      line: one line of output (no newline).
      width: the cells available, at least 8 (narrower is taken as 8).

    Returns:
      The pieces, one at least (an empty line stays one empty line).
    """
    width = max(8, width)
    if len(line) <= width:
        return [line]
    return textwrap.wrap(line, width=width, subsequent_indent=CONTINUATION, break_on_hyphens=False,
                         drop_whitespace=True, replace_whitespace=False, expand_tabs=True) or [line[:width]]


class LogPane(Log):
    """Appends the lines of each snapshot that it has not shown yet, wrapped to its width."""

    DEFAULT_CSS = """
    LogPane { height: 1fr; border: none; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=MAX_LINES, **kwargs)
        self._written = 0
        self._kept: collections.deque[str] = collections.deque(maxlen=MAX_LINES)  # the lines as they came
        self._wrapped_for = 0  # the width the shown lines were wrapped for (0: not yet known)

    def _wrap_width(self) -> int:
        return self.size.width - SCROLLBAR_CELLS

    def show(self, snap: RunView) -> None:
        new = snap.log_total - self._written
        if new <= 0:
            return
        lines = snap.log[-new:] if new <= len(snap.log) else snap.log
        self._written = snap.log_total
        self._kept.extend(lines)
        if self._wrapped_for > 0:
            self.write_lines([piece for line in lines for piece in wrap_line(line, self._wrapped_for)])
        # Before the pane has a size, the lines wait for `on_resize`, which wraps them all.

    def on_resize(self, event) -> None:
        width = self._wrap_width()
        if width <= 0 or width == self._wrapped_for:
            if width > 0:
                self.scroll_end(animate=False)  # a new height: the newest lines stay in view
            return
        self._wrapped_for = width
        self.clear()
        self.write_lines([piece for line in self._kept for piece in wrap_line(line, width)], scroll_end=False)
        self.scroll_end(animate=False)
