"""Device→host transfer hot spots and CPU fallback ops, by user line."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from xladev.schema.sites import short_site
from xladev.schema.units import format_bytes
from xladev_tui.run_view import RunView
from xladev_tui.widgets.common import SectionTable, fit_rows, sync_rows, table_width

TRANSFER_COLUMNS = ("Kind", "User line", "Count", "Per step", "Bytes", "Last step")
FALLBACK_COLUMNS = ("Op", "User line", "Calls", "Per step")


class TransfersPanel(Vertical):
    """Device→host transfers grouped by (kind, user line): count, per step, bytes, last step."""

    DEFAULT_CSS = """
    TransfersPanel { height: auto; }
    TransfersPanel .title { height: 1; text-style: bold; color: $accent; }
    TransfersPanel DataTable { height: auto; max-height: 8; }
    """

    def compose(self) -> ComposeResult:
        yield Static("Transfer hot spots (device → host)", classes="title", id="transfers-title")
        table = SectionTable(id="transfers", cursor_type="row", zebra_stripes=True)
        table.add_columns(*TRANSFER_COLUMNS)
        yield table

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._snap: RunView | None = None

    def on_resize(self, event) -> None:
        if self._snap is not None:  # the user-line column is clipped to the new width
            self.show(self._snap)

    def show(self, snap: RunView) -> None:
        self._snap = snap
        rows = [(f"{s.kind}|{s.site}", (s.kind, short_site(s.site), str(s.count), f"{s.per_step:.2f}",
                                         format_bytes(s.nbytes), str(s.last_step))) for s in snap.hot_spots]
        sync_rows(self.query_one("#transfers", DataTable), fit_rows(rows, TRANSFER_COLUMNS, 1, table_width(self)))
        total = sum(s.count for s in snap.hot_spots)
        self.query_one("#transfers-title", Static).update(
            f"Transfer hot spots (device → host): {total}" if total else "Transfer hot spots (device → host): none")


class FallbackPanel(Vertical):
    """Ops that ran on the CPU fallback, by op and user line."""

    DEFAULT_CSS = """
    FallbackPanel { height: auto; }
    FallbackPanel .title { height: 1; text-style: bold; color: $accent; }
    FallbackPanel DataTable { height: auto; max-height: 8; }
    """

    def compose(self) -> ComposeResult:
        yield Static("CPU fallback ops", classes="title", id="fallbacks-title")
        table = SectionTable(id="fallbacks", cursor_type="row", zebra_stripes=True)
        table.add_columns(*FALLBACK_COLUMNS)
        yield table

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._snap: RunView | None = None

    def on_resize(self, event) -> None:
        if self._snap is not None:
            self.show(self._snap)

    def show(self, snap: RunView) -> None:
        self._snap = snap
        rows = [(f"{f.op}|{f.site}", (f.op, short_site(f.site), str(f.count), f"{f.per_step:.2f}"))
                for f in snap.fallbacks]
        sync_rows(self.query_one("#fallbacks", DataTable), fit_rows(rows, FALLBACK_COLUMNS, 1, table_width(self)))
        self.query_one("#fallbacks-title", Static).update(
            f"CPU fallback ops: {len({f.op for f in snap.fallbacks})}" if snap.fallbacks else "CPU fallback ops: none")
