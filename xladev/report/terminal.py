"""Lays a `Document` out for the terminal with rich: summary, findings, then tables.

It reads well at 80 columns: findings are panels whose text wraps, and tables have at most five
narrow columns.
"""

from __future__ import annotations

import io

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text

from xladev import analysis
from xladev.report.document import Document, Section, Table

SEVERITY_STYLES = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan", "healthy": "bold green",
                   "unknown": "bold magenta"}
VERDICT_LABELS = analysis.VERDICT_LABELS


def _bullets(lines: list[str], style: str = "") -> RichTable:
    grid = RichTable.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="dim")
    grid.add_column(overflow="fold", style=style)
    for line in lines:
        grid.add_row(" •", line)
    return grid


def _labelled(label: str, text: str, label_style: str, text_style: str = "") -> Text:
    line = Text()
    line.append(label, style=label_style)
    line.append(text, style=text_style)
    return line


def _finding_panel(finding) -> Panel:
    style = SEVERITY_STYLES["healthy" if finding.rule == "healthy" else finding.severity]
    parts: list = [Text(finding.title, style="bold"), Text(finding.detail)]
    if finding.evidence:
        parts.append(_bullets(finding.evidence))
    if finding.cost_text():
        parts.append(_labelled("Cost: ", finding.cost_text(), "bold yellow"))
    parts.append(_labelled("Fix: ", finding.fix, "bold green"))
    if finding.sources:
        parts.append(_labelled("Where: ", ", ".join(finding.sources), "dim", "dim"))
    label = "OK" if finding.rule == "healthy" else finding.severity.upper()
    return Panel(Group(*parts), title=f"[{style}]{label}[/] {finding.rule}", title_align="left",
                 border_style=style.split()[-1], box=box.ROUNDED, padding=(0, 1))


def _table(table: Table) -> RichTable:
    rich_table = RichTable(title=table.title or None, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                           caption=table.note or None, caption_justify="left", pad_edge=False, expand=False)
    for column, align in zip(table.columns, table.align):
        rich_table.add_column(column, justify="right" if align == "r" else "left", overflow="fold",
                              no_wrap=align == "r" or column in ("Metric", "Counter", "Per report", "Rank", "Graph"))
    for row in table.rows:
        rich_table.add_row(*row)
    return rich_table


def _section(section: Section) -> list:
    parts: list = [Text(section.title, style="bold underline")]
    for item in section.items:
        if isinstance(item, Table):
            parts.append(_table(item))
        elif isinstance(item, list):
            parts.append(_bullets(item))
        else:
            parts.append(Text(str(item)))
    parts.append(Text(""))
    return parts


def render_terminal(document: Document, width: int | None = 80, color: bool = False,
                    console: Console | None = None) -> str:
    """Renders a document as terminal text.

    Args:
      document: what to render.
      width: the line width (80 reads well everywhere); None uses the terminal's width.
      color: emit ANSI colours.
      console: print to this console instead of returning text.

    Returns:
      The text ('' when printed to ``console``).
    """
    buffer = io.StringIO()
    target = console or Console(file=buffer, width=width, force_terminal=color, no_color=not color,
                                color_system="standard" if color else None, highlight=False, soft_wrap=False)
    verdict_style = SEVERITY_STYLES.get(document.verdict, "bold")
    header = Text()
    header.append(document.title + "\n", style="bold")
    header.append(VERDICT_LABELS.get(document.verdict, document.verdict.upper()), style=verdict_style)
    header.append(f"  {document.headline}")
    target.print(header)
    grid = RichTable.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in document.summary:
        grid.add_row(label, value)
    target.print(grid)
    target.print()
    target.print(Text("Findings", style="bold underline"))
    for finding in document.findings:
        target.print(_finding_panel(finding))
    target.print()
    for section in document.sections:
        target.print(Group(*_section(section)))
    return buffer.getvalue()
