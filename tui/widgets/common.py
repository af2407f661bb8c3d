"""Helpers shared by the widgets: syncing table rows, fitting a table to its width, the jump message."""

from __future__ import annotations

from rich.cells import cell_len
from textual.message import Message
from textual.widgets import DataTable, OptionList

# Cells a DataTable spends around each column (one each side), and on its vertical scrollbar.
CELL_PADDING = 2
SCROLLBAR = 2


class OpenGraph(Message):
    """Asks the app to show a graph in the Graphs tab (posted by an alert or a finding).

    Args:
      graph_hash: the graph to show.
    """

    def __init__(self, graph_hash: str) -> None:
        super().__init__()
        self.graph_hash = graph_hash


def clip(text: str, width: int) -> str:
    """`text` cut to `width` cells, with an ellipsis when cut."""
    if cell_len(text) <= width:
        return text
    out = ""
    for char in text:
        if cell_len(out + char) > width - 1:
            break
        out += char
    return out + "…"


def fit_rows(rows: list[tuple[str, tuple]], headers: tuple[str, ...], flex: int, width: int,
             min_width: int = 12) -> list[tuple[str, tuple]]:
    """Clips the text of column `flex` so that a table of `rows` fits in `width` cells.

    The other columns keep their full width (numbers are never cut); the flexible one (a site, a
    name) is shortened with an ellipsis, never below `min_width`.

    Args:
      rows: (key, cells) pairs, cells as text.
      headers: the column labels.
      flex: the index of the column that may be clipped.
      width: the cells the table has, its scrollbar included.
      min_width: the narrowest the flexible column gets.

    Returns:
      The rows, with column `flex` clipped where needed.
    """
    if width <= 0 or not rows:
        return rows
    widths = [cell_len(h) for h in headers]
    for _, cells in rows:
        for index, cell in enumerate(cells):
            widths[index] = max(widths[index], cell_len(str(cell)))
    others = sum(w + CELL_PADDING for index, w in enumerate(widths) if index != flex)
    room = max(min_width, width - others - CELL_PADDING - SCROLLBAR)
    if widths[flex] <= room:
        return rows
    return [(key, tuple(clip(str(cell), room) if index == flex else cell for index, cell in enumerate(cells)))
            for key, cells in rows]


def sync_rows(table: DataTable, rows: list[tuple[str, tuple]]) -> bool:
    """Puts `rows` ((key, cells) pairs, cells as text) in `table`, keeping the cursor on the same key.

    Cells that changed are updated in place while the rows and the columns' widths stay the same;
    otherwise the table is rebuilt, so that every column is as wide as its widest cell, narrower
    too (a site clipped after a resize). Rebuilding is rare (a count gains a digit); in place, an
    update that shrinks a cell would make the table measure its whole column again, per cell.

    Returns False (and does nothing) when the rows are the ones already shown.
    """
    rows = tuple(rows)
    if getattr(table, "_shown_rows", None) == rows:
        return False
    widths = [cell_len(str(column.label)) for column in table.columns.values()]
    for _, cells in rows:
        for index, cell in enumerate(cells):
            width = cell_len(str(cell))
            if width > widths[index]:
                widths[index] = width
    cursor_key = None
    if table.row_count and table.cursor_row is not None and 0 <= table.cursor_row < table.row_count:
        try:
            cursor_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            cursor_key = None
    old_keys = [key for key, _ in getattr(table, "_shown_rows", ())]
    new_keys = [key for key, _ in rows]
    if old_keys == new_keys and table.row_count == len(rows) and widths == getattr(table, "_shown_widths", None):
        # Same rows, same widths: update the cells that changed (no flicker, cursor kept).
        previous = dict(getattr(table, "_shown_rows", ()))
        columns = list(table.columns.keys())
        for key, cells in rows:
            before = previous.get(key)
            for index, cell in enumerate(cells):
                if before is None or before[index] != cell:
                    table.update_cell(key, columns[index], cell)
    else:
        table.clear()
        for column in table.columns.values():  # clear() keeps the widths of the old rows
            column.content_width = cell_len(str(column.label))
        for key, cells in rows:
            table.add_row(*cells, key=key)
        if cursor_key is not None and cursor_key in new_keys:
            table.move_cursor(row=new_keys.index(cursor_key), animate=False)
    table._shown_rows = rows
    table._shown_widths = widths
    return True


def table_width(widget) -> int:
    """The cells a widget's tables have: its own width once laid out, else the screen's."""
    return widget.content_size.width or widget.app.size.width


class LeaveSection(Message):
    """A list of the overview was moved past its last entry (`direction` 1) or its first (-1) with ↑/↓ or
    PgUp/PgDn: the app moves the focus to the next (or previous) list of the overview.

    Args:
      direction: 1 or -1.
    """

    def __init__(self, direction: int) -> None:
        super().__init__()
        self.direction = direction


class _SectionKeys:
    """Arrow and page keys that go on to the next list of the overview past a list's last entry, and back to the one
    before past its first (a `LeaveSection` message); the widget says where its cursor is (`_cursor`)."""

    def _cursor(self) -> tuple[int | None, int]:
        """(the highlighted entry or None, the last entry's index)."""
        raise NotImplementedError

    def _leave(self, direction: int) -> bool:
        at, last = self._cursor()
        if at is None or last < 0 or (direction > 0 and at >= last) or (direction < 0 and at <= 0):
            self.post_message(LeaveSection(direction))
            return True
        return False

    def action_cursor_down(self) -> None:
        if not self._leave(1):
            super().action_cursor_down()

    def action_cursor_up(self) -> None:
        if not self._leave(-1):
            super().action_cursor_up()

    def action_page_down(self) -> None:
        if not self._leave(1):
            super().action_page_down()

    def action_page_up(self) -> None:
        if not self._leave(-1):
            super().action_page_up()


class SectionOptionList(_SectionKeys, OptionList):
    """An overview list (the findings, the recompilation alerts) whose keys go on to the next list."""

    def _cursor(self) -> tuple[int | None, int]:
        return self.highlighted, self.option_count - 1


class SectionTable(_SectionKeys, DataTable):
    """An overview table (compiles by site, transfer hot spots, CPU fallbacks) whose keys go on to the next list."""

    def _cursor(self) -> tuple[int | None, int]:
        return self.cursor_row, self.row_count - 1
