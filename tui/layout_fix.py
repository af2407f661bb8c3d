"""A fix for Textual's layout: a widget's new content always gets its new size.

Textual (8.2.8, the newest release) caches each widget's box model, its size included, under a key
that holds a counter of the widget's layout requests (`Widget._layout_updates`). `refresh(layout=True)`
adds one to it only when no layout request of the widget is pending yet. Each widget handles its
requests in its own task, so a busy machine can leave one pending while the screen lays out again
for another widget's request and caches this widget's box model, with its old content, under the
current count. New content then (`Static.update`, a table's new rows) asks for a layout with one
already pending, the count stays, and every later layout finds the stale box model: the widget
keeps its old height until something else changes it. The TUI's snapshots caught it as a panel one
line tall showing an eight-line table below the fold, so a scrollbar's thumb ended elsewhere in one
run out of some tens under load.

`count_every_layout_request` makes every layout request count, pending or not: a request then
always invalidates the cached box model, which is what the cache key is for. A widget asked twice
before a layout is measured once more than it would be, nothing else changes.
"""

from __future__ import annotations

from textual.widget import Widget

_PATCHED = "_xladev_counts_every_layout_request"


def count_every_layout_request() -> None:
    """Makes `Widget.refresh(layout=True)` invalidate the widget's cached box model even while an
    earlier layout request of the widget is pending (see the module's docstring). Idempotent; a
    Textual without these counters (one that lays out otherwise) is left to itself.
    """
    if getattr(Widget.refresh, _PATCHED, False):
        return
    textual_refresh = Widget.refresh

    def refresh(self, *regions, repaint: bool = True, layout: bool = False, recompose: bool = False):
        if layout and getattr(self, "_layout_required", False) and hasattr(self, "_layout_updates"):
            self._layout_updates += 1  # Textual adds it only when no request is pending
        return textual_refresh(self, *regions, repaint=repaint, layout=layout, recompose=recompose)

    refresh.__doc__ = textual_refresh.__doc__
    setattr(refresh, _PATCHED, True)
    Widget.refresh = refresh
