"""The counters-and-metrics table: filter by name (`/`), sort by any column (`s` or a click)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Input, Static

from xladev.schema.units import COUNT, compact_value
from xladev_tui.run_view import CounterRow, RunView
from xladev_tui.widgets.common import fit_rows, sync_rows, table_width

SORT_KEYS = ("name", "count", "total", "per step")
COLUMNS = ("Name", "Kind", "Count", "Total", "Mean", "Per step")


class CountersPanel(Vertical):
    """Counters (integers) and metrics (samples, total, mean), per step, filtered and sorted."""

    DEFAULT_CSS = """
    CountersPanel { height: 1fr; }
    CountersPanel #counter-bar { height: 1; }
    CountersPanel #counter-filter { width: 1fr; height: 1; border: none; padding: 0 1; }
    CountersPanel #counter-sort { width: auto; height: 1; padding: 0 1; color: $text-muted; }
    CountersPanel DataTable { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sort_key = "name"
        self.descending = False
        self.filter_text = ""
        self._snap: RunView | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="counter-bar"):
            yield Input(placeholder="filter counters (/)", id="counter-filter")
            yield Static(id="counter-sort")
        table = DataTable(id="counters", cursor_type="row", zebra_stripes=True)
        table.add_column("Name", key="name")
        table.add_column("Kind", key="kind")
        table.add_column("Count", key="count")
        table.add_column("Total", key="total")
        table.add_column("Mean", key="mean")
        table.add_column("Per step", key="per step")
        yield table

    def on_mount(self) -> None:
        self._show_sort()

    def _show_sort(self) -> None:
        arrow = "▼" if self.descending else "▲"
        self.query_one("#counter-sort", Static).update(f"sort: {self.sort_key} {arrow} (s)")

    def cycle_sort(self) -> None:
        """Next sort column (name ▲, then count, total and per step ▼)."""
        index = (SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)
        self.set_sort(SORT_KEYS[index])

    def set_sort(self, key: str, descending: bool | None = None) -> None:
        if key not in SORT_KEYS:
            return
        if descending is None:
            descending = (not self.descending) if key == self.sort_key else key != "name"
        self.sort_key, self.descending = key, descending
        self._show_sort()
        self._render_rows()
        # The new order's first row is the one asked for: the table shows it, whatever it scrolled to before.
        table = self.query_one("#counters", DataTable)
        if table.row_count:
            table.move_cursor(row=0, column=table.cursor_column, animate=False, scroll=False)
        table.scroll_home(animate=False, immediate=True)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        key = event.column_key.value
        self.set_sort(key if key in SORT_KEYS else "name")

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "counter-filter":
            event.stop()
            self.filter_text = event.value.strip().lower()
            self._render_rows()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "counter-filter":
            event.stop()
            self.query_one("#counters", DataTable).focus()

    def focus_filter(self) -> None:
        self.query_one("#counter-filter", Input).focus()

    def visible_rows(self) -> list[CounterRow]:
        """The rows shown: filtered by the words typed (all must match) and sorted."""
        if self._snap is None:
            return []
        words = self.filter_text.split()
        rows = [r for r in self._snap.counters if all(w in r.name.lower() or w == r.kind for w in words)]
        key = self.sort_key
        if key == "name":
            rows.sort(key=lambda r: r.name.lower(), reverse=self.descending)
        else:
            def value(r: CounterRow) -> float:
                v = {"count": r.count, "total": r.total, "per step": r.per_step}[key]
                return -1.0 if v is None else float(v)
            rows.sort(key=lambda r: (value(r), r.name), reverse=self.descending)
        return rows

    def show(self, snap: RunView) -> None:
        self._snap = snap
        self._render_rows()

    def _render_rows(self) -> None:
        rows = []
        for r in self.visible_rows():
            kind = "counter" if r.kind == COUNT else r.kind  # time, bytes or value: a metric
            total = "" if r.kind == COUNT else compact_value(r.kind, r.total)
            mean = "" if r.mean is None else compact_value(r.kind, r.mean)
            if r.per_step is None:
                per_step = "-"
            elif r.kind == COUNT or r.kind == "value":
                per_step = f"{r.per_step:.2f}"
            else:
                per_step = compact_value(r.kind, r.per_step)
            rows.append((r.name, (r.name, kind, f"{r.count:,}", total, mean, per_step)))
        sync_rows(self.query_one("#counters", DataTable), fit_rows(rows, COLUMNS, 0, table_width(self)))

    def on_resize(self, event) -> None:
        if self._snap is not None:  # the name column is clipped to the new width
            self._render_rows()
