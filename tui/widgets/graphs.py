"""The graph browser: graphs by hash; select one for its IR, memory analysis, compile time and steps."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Static

from xladev.schema import memory as memory_sizes
from xladev.schema.sites import short_site
from xladev.schema.units import compact_time_ns, format_bytes
from xladev_tui.run_view import GraphRow, RunView
from xladev_tui.widgets.common import fit_rows, sync_rows, table_width

COLUMNS = ("Graph", "Nodes", "In/Out", "Compile", "Runs", "Site")



class GraphBrowser(Horizontal):
    """Graph list on one side (above at 80 columns), the selected graph's details on the other."""

    DEFAULT_CSS = """
    GraphBrowser { height: 1fr; layout: vertical; }
    GraphBrowser.wide { layout: horizontal; }
    GraphBrowser #graphs { height: auto; max-height: 7; }
    GraphBrowser.wide #graphs { width: 1fr; height: 1fr; max-height: 100%; }
    GraphBrowser #graph-detail { height: 1fr; border-top: solid $primary; }
    GraphBrowser.wide #graph-detail { width: 1fr; border-top: none; border-left: solid $primary; }
    GraphBrowser #graph-detail:focus { border-top: solid $accent; }
    GraphBrowser.wide #graph-detail:focus { border-left: solid $accent; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.selected: str | None = None
        self._rows: dict[str, GraphRow] = {}
        self._shown: tuple | None = None
        self._snap: RunView | None = None
        self._compiling: frozenset[str] = frozenset()

    def compose(self) -> ComposeResult:
        table = DataTable(id="graphs", cursor_type="row", zebra_stripes=True)
        table.add_columns(*COLUMNS)
        yield table
        with VerticalScroll(id="graph-detail", can_focus=True):
            yield Static("select a graph (↑/↓, Enter opens its IR)", id="graph-text")

    def show(self, snap: RunView) -> None:
        self._snap = snap
        self._rows = {g.graph_hash: g for g in snap.graphs}
        self._compiling = frozenset(c.graph_hash for c in snap.compiling)
        rows = [(g.graph_hash, (g.graph_hash[:12], str(g.nodes), f"{g.inputs}/{g.outputs}", self._compile_cell(g),
                                str(g.executions), short_site(g.site) if g.site else "-")) for g in snap.graphs]
        table = self.query_one("#graphs", DataTable)
        sync_rows(table, fit_rows(rows, COLUMNS, 5, table.size.width or table_width(self)))
        if self.selected is None and snap.graphs:
            self.selected = snap.graphs[table.cursor_row if 0 <= table.cursor_row < len(snap.graphs) else 0].graph_hash
        self._show_detail()

    def _compile_cell(self, graph: GraphRow) -> str:
        if graph.compile_ns is not None:
            return compact_time_ns(graph.compile_ns)
        if graph.graph_hash in self._compiling:
            return "compiling"
        return "failed" if graph.failure else "-"

    def on_resize(self, event) -> None:
        if self._snap is not None:  # the site column is clipped to the new width
            self.show(self._snap)

    def show_graph(self, graph_hash: str) -> bool:
        """Moves the list's cursor to this graph and shows its details (a jump from an alert or finding).

        Returns:
          False when the graph is not in the list.
        """
        table = self.query_one("#graphs", DataTable)
        try:
            index = table.get_row_index(graph_hash)
        except Exception:  # not listed (yet)
            return False
        self.selected = graph_hash
        table.move_cursor(row=index, animate=False)
        self._show_detail()
        self.query_one("#graph-detail", VerticalScroll).scroll_home(animate=False)
        table.focus()
        return True

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "graphs" and event.row_key is not None:
            event.stop()
            self.selected = event.row_key.value
            self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "graphs" and event.row_key is not None:
            event.stop()
            self.open(event.row_key.value)

    def open(self, graph_hash: str) -> None:
        """Shows this graph's details and IR and moves the focus there (scroll with ↑/↓, Esc back)."""
        self.selected = graph_hash
        self._show_detail()
        detail = self.query_one("#graph-detail", VerticalScroll)
        detail.scroll_home(animate=False)
        detail.focus()

    def back_to_list(self) -> None:
        self.query_one("#graphs", DataTable).focus()

    def _show_detail(self) -> None:
        graph = self._rows.get(self.selected) if self.selected else None
        compiling = graph is not None and graph.graph_hash in self._compiling
        key = (graph.graph_hash, graph.executions, graph.steps, graph.compile_ns, graph.failure, compiling,
               bool(graph.ir)) if graph else None
        if key == self._shown:
            return
        self._shown = key
        self.query_one("#graph-text", Static).update(detail_text(graph, compiling) if graph else
                                                     Text("no graph yet: graphs appear when the first step compiles",
                                                          style="dim"))


def detail_text(graph: GraphRow, compiling: bool = False) -> Text:
    """Everything known about one graph, then its IR text.

    Args:
      graph: the graph.
      compiling: its compile has started and not ended yet.
    """
    text = Text()
    text.append(f"Graph {graph.graph_hash}\n", style="bold")
    text.append(f"{graph.nodes} nodes, {graph.inputs} inputs, {graph.outputs} outputs\n")
    if graph.failure:
        text.append(f"failed: {graph.failure}\n", style="bold red")
    if compiling:
        text.append(f"compiling now, at {short_site(graph.site) if graph.site else '?'}\n", style="bold yellow")
    elif graph.compile_ns is not None:
        text.append(f"compiled in {compact_time_ns(graph.compile_ns)} at step {graph.compiled_step}, "
                    f"{short_site(graph.site)}; cause: {graph.cause}\n")
    elif not graph.failure:
        text.append("compiled before the log started\n", style="dim")
    if graph.recompile is not None:
        text.append(f"recompiled (vs graph {graph.recompile.previous_hash[:12]}): ", style="bold red")
        text.append("; ".join(graph.recompile.changes) + "\n", style="yellow")
    if graph.memory:
        # XLA's memory analysis in PyTorch/XLA's order, then what the graph holds while it runs.
        sizes = dict(graph.memory)
        shown = [f"{size.label} {format_bytes(sizes[key])}" for key, size in memory_sizes.SIZES.items()
                 if key in sizes]
        need = memory_sizes.need_bytes(sizes)
        text.append(f"memory: {', '.join(shown)}" + (f"; needs {format_bytes(need)}" if need is not None else "") + "\n")
    if graph.shardings:
        # SPMD: XLA's memory analysis above is one device's; this says how each input and output is split.
        text.append("sharding over the devices:\n" + "".join(f"  {line}\n" for line in graph.shardings))
    mean = graph.execute_ns / graph.executions if graph.executions else None
    text.append(f"executed {graph.executions} times, {compact_time_ns(graph.execute_ns)} in total"
                + (f" ({compact_time_ns(mean)} each)" if mean is not None else "") + "\n")
    if graph.steps:
        text.append(f"steps: {graph.steps}\n")
    text.append("\n")
    if graph.ir:
        text.append(graph.ir, style="green")
    else:
        text.append("(no IR text in the log for this graph)", style="dim")
    return text
