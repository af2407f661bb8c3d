"""Helpers shared by the widgets."""

from __future__ import annotations

from textual.widgets import DataTable


def sync_rows(table: DataTable, rows: list[tuple[str, tuple]]) -> bool:
    """Puts `rows` ((key, cells) pairs) in `table`, keeping the cursor on the same key.

    Returns False (and does nothing) when the rows are the ones already shown.
    """
    rows = tuple(rows)
    if getattr(table, "_shown_rows", None) == rows:
        return False
    cursor_key = None
    if table.row_count and table.cursor_row is not None and 0 <= table.cursor_row < table.row_count:
        try:
            cursor_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            cursor_key = None
    old_keys = [key for key, _ in getattr(table, "_shown_rows", ())]
    new_keys = [key for key, _ in rows]
    if old_keys == new_keys and table.row_count == len(rows):
        # Same rows in the same order: update the cells that changed (no flicker, cursor kept).
        previous = dict(getattr(table, "_shown_rows", ()))
        columns = list(table.columns.keys())
        for key, cells in rows:
            before = previous.get(key)
            for index, cell in enumerate(cells):
                if before is None or before[index] != cell:
                    table.update_cell(key, columns[index], cell)
    else:
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        if cursor_key is not None and cursor_key in new_keys:
            table.move_cursor(row=new_keys.index(cursor_key), animate=False)
    table._shown_rows = rows
    return True
