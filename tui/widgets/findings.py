"""The findings panel: the report's verdict and ranked findings (title, cost, fix), live.

The findings come from the same rules as `xladev report` (`tui.diagnosis`). A finding about a
graph (a recompilation, a failure) opens that graph in the Graphs tab when selected (Enter or a
click).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from xladev.analysis import ERROR, INFO, VERDICT_LABELS, WARNING
from xladev_tui.run_view import Diagnosis, FindingView, RunView
from xladev_tui.widgets.common import OpenGraph, SectionOptionList

SEVERITY_STYLES = {ERROR: "bold white on red", WARNING: "bold black on yellow", INFO: "bold black on cyan"}
VERDICT_STYLES = {"healthy": "bold black on green", INFO: "bold black on green", WARNING: "bold black on yellow",
                  ERROR: "bold white on red", "unknown": "bold black on white"}


class FindingsPanel(Vertical):
    """The verdict, then one entry per finding, most important first."""

    DEFAULT_CSS = """
    FindingsPanel { height: auto; }
    FindingsPanel .title { height: 1; text-style: bold; color: $accent; }
    FindingsPanel #verdict { height: auto; }
    FindingsPanel OptionList { height: auto; max-height: 30; border: none; padding: 0; background: $surface; }
    FindingsPanel OptionList:focus { border: none; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: Diagnosis | None = None
        self._targets: list[str | None] = []

    def compose(self) -> ComposeResult:
        yield Static("Findings (the rules of xladev report)", classes="title", id="findings-title")
        yield Static(id="verdict")
        yield SectionOptionList(id="findings")

    def show(self, snap: RunView) -> None:
        diagnosis = snap.diagnosis
        if diagnosis is self._shown:
            return
        previous = self._shown
        self._shown = diagnosis
        self.query_one("#verdict", Static).update(verdict_text(diagnosis))
        if previous is not None and previous.findings == diagnosis.findings:
            return
        options = self.query_one("#findings", OptionList)
        highlighted = options.highlighted
        options.clear_options()
        options.add_options([Option(finding_text(f)) for f in diagnosis.findings])
        self._targets = [f.graph_hash for f in diagnosis.findings]
        if diagnosis.findings:  # Enter acts on the highlighted entry: there always is one
            options.highlighted = 0 if highlighted is None else min(highlighted, len(diagnosis.findings) - 1)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_list.id != "findings":
            return
        event.stop()
        target = self._targets[event.option_index] if event.option_index < len(self._targets) else None
        if target:
            self.post_message(OpenGraph(target))
        else:
            self.app.notify("This finding is not about one graph.", timeout=3)


def verdict_text(diagnosis: Diagnosis) -> Text:
    """One line: the verdict, how many problems and notes, and how many records it covers."""
    text = Text()
    if not diagnosis.verdict:
        text.append(diagnosis.note or "no diagnosis yet", style="dim")
        return text
    text.append(f" {VERDICT_LABELS.get(diagnosis.verdict, diagnosis.verdict.upper())} ",
                style=VERDICT_STYLES.get(diagnosis.verdict, "bold"))
    text.append(f" {diagnosis.headline} ({diagnosis.records:,} records)")
    if diagnosis.note:
        text.append(f"\n{diagnosis.note}", style="italic red")
    return text


def finding_text(finding: FindingView) -> Table:
    """A finding's entry: severity and title, then what it cost, the fix and its graph (a grid, so
    that wrapped lines stay under their text)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(ratio=1)
    if finding.rule == "healthy":
        badge = Text(" OK ", style="bold black on green")
    else:
        badge = Text(f" {finding.severity.upper()} ", style=SEVERITY_STYLES.get(finding.severity, "bold"))
    grid.add_row(badge, Text(finding.title, style="bold"))
    if finding.severity == ERROR and finding.evidence:  # a failure's title is generic: its error and HLO
        grid.add_row(Text("what", style="dim"), Text(finding.evidence[0]))
    if finding.cost:
        grid.add_row(Text("cost", style="dim"), Text(finding.cost))
    if finding.fix and finding.rule != "healthy":
        grid.add_row(Text("fix", style="dim"), Text(finding.fix))  # Text: "x[mask]" is not markup
    if finding.graph_hash:
        grid.add_row(Text("graph", style="dim"), Text(f"{finding.graph_hash[:12]} (Enter opens it)", style="cyan"))
    return grid
