"""Lays a `Document` out as Markdown or as one self-contained HTML file.

The HTML has its style and its pictures (SVG) inline, and no image, font, script or link from outside the file.
Every piece of text from the inputs is escaped.
"""

from __future__ import annotations

import re

import html

from xladev import analysis
from xladev.report import html_charts
from xladev.report.document import Document, Section, Table

SEVERITY_MARKS = {"error": "✖ ERROR", "warning": "⚠ WARNING", "info": "ℹ INFO"}
VERDICT_TEXT = analysis.VERDICT_LABELS


# ---------------------------------------------------------------- Markdown


_CODE_SPAN = re.compile(r"(`[^`\n]*`)")


def _md_escape(text: str) -> str:
    """Text safe in a Markdown line or table cell; code spans stay as written (an entity would show literally)."""
    parts = _CODE_SPAN.split(str(text).replace("\n", " "))
    return "".join(part.replace("|", "\\|") if i % 2 else
                   part.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
                   for i, part in enumerate(parts))


def _md_table(table: Table) -> list[str]:
    lines = [f"**{_md_escape(table.title)}**", ""] if table.title else []
    lines.append("| " + " | ".join(_md_escape(column) for column in table.columns) + " |")
    lines.append("|" + "|".join("---:" if align == "r" else "---" for align in table.align) + "|")
    lines += ["| " + " | ".join(_md_escape(cell) for cell in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", f"*{_md_escape(table.note)}*"]
    return lines + [""]


def _md_section(section: Section) -> list[str]:
    lines = [f"## {_md_escape(section.title)}", ""]
    for item in section.items:
        if isinstance(item, Table):
            lines += _md_table(item)
        elif isinstance(item, list):
            lines += [f"- {_md_escape(f'`{line}`')}" if line.startswith("pt-xla-profiler") else f"- {_md_escape(line)}"
                      for line in item] + [""]
        else:
            lines += [_md_escape(item), ""]
    return lines


def render_markdown(document: Document) -> str:
    """Renders a document as GitHub-flavoured Markdown.

    Args:
      document: what to render.

    Returns:
      The Markdown text.
    """
    lines = [f"# {_md_escape(document.title)}", "",
             f"**{VERDICT_TEXT.get(document.verdict, document.verdict)}**: {_md_escape(document.headline)}", "",
             "| | |", "|---|---|"]
    lines += [f"| {_md_escape(label)} | {_md_escape(value)} |" for label, value in document.summary]
    lines += ["", "## Findings", ""]
    for finding in document.findings:
        mark = "✔ OK" if finding.rule == "healthy" else SEVERITY_MARKS.get(finding.severity, finding.severity)
        lines += [f"### {mark}: {_md_escape(finding.title)}", "", f"*{finding.rule}*. {_md_escape(finding.detail)}", ""]
        lines += [f"- {_md_escape(line)}" for line in finding.evidence]
        if finding.cost_text():
            lines += ["", f"**Cost:** {_md_escape(finding.cost_text())}"]
        lines += ["", f"**Fix:** {_md_escape(finding.fix)}", ""]
        if finding.sources:
            lines += ["Where: " + ", ".join(f"`{source}`" for source in finding.sources), ""]
    for section in document.sections:
        lines += _md_section(section)
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;
color:#1f2328;line-height:1.45}
h1{font-size:1.4rem;word-break:break-all}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #d0d7de}
.verdict{display:inline-block;padding:.15rem .6rem;border-radius:1rem;font-weight:600;color:#fff}
.healthy,.info{background:#1a7f37}.unknown{background:#8250df}.warning{background:#9a6700}.error{background:#cf222e}
table{border-collapse:collapse;margin:.5rem 0 1rem}td,th{padding:.2rem .6rem;border-bottom:1px solid #eaeef2;
text-align:left;vertical-align:top}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
caption{text-align:left;font-weight:600;padding:.3rem 0}.summary th{white-space:nowrap}
.finding{border:1px solid #d0d7de;border-left:.35rem solid #57606a;border-radius:.4rem;padding:.6rem 1rem;margin:.8rem 0}
.finding.error{border-left-color:#cf222e;background:#fff}.finding.warning{border-left-color:#9a6700;background:#fff}
.finding.info{border-left-color:#0969da;background:#fff}.finding.ok{border-left-color:#1a7f37}
.finding h3{margin:.1rem 0 .4rem;font-size:1.02rem}.rule{color:#57606a;font-size:.85rem}
.fix{background:#dafbe1;padding:.3rem .6rem;border-radius:.3rem}.where{color:#57606a;font-size:.85rem}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em}
"""


def _h(text) -> str:
    return html.escape(str(text), quote=True)


def _html_table(table: Table, css_class: str = "") -> str:
    parts = [f'<table class="{_h(css_class)}">' if css_class else "<table>"]
    if table.title:
        parts.append(f"<caption>{_h(table.title)}</caption>")
    parts.append("<thead><tr>" + "".join(f'<th class="{_h(align)}">{_h(column)}</th>'
                                         for column, align in zip(table.columns, table.align)) + "</tr></thead>")
    parts.append("<tbody>")
    for row in table.rows:
        parts.append("<tr>" + "".join(f'<td class="{_h(align)} mono">{_h(cell)}</td>'
                                      for cell, align in zip(row, table.align)) + "</tr>")
    parts.append("</tbody></table>")
    if table.note:
        parts.append(f"<p><em>{_h(table.note)}</em></p>")
    return "\n".join(parts)


def _html_finding(finding, views: list) -> str:
    css = "ok" if finding.rule == "healthy" else finding.severity
    mark = "✔ OK" if finding.rule == "healthy" else SEVERITY_MARKS.get(finding.severity, finding.severity)
    parts = [f'<div class="finding {_h(css)}">', f"<h3>{_h(mark)}: {_h(finding.title)}</h3>",
             f'<div class="rule">{_h(finding.rule)}</div>', f"<p>{_h(finding.detail)}</p>"]
    if finding.evidence:
        parts.append("<ul>" + "".join(f"<li>{_h(line)}</li>" for line in finding.evidence) + "</ul>")
    links = html_charts.finding_links(finding, views)
    if links:
        parts.append(links)
    if finding.cost_text():
        parts.append(f"<p><strong>Cost:</strong> {_h(finding.cost_text())}</p>")
    parts.append(f'<p class="fix"><strong>Fix:</strong> {_h(finding.fix)}</p>')
    if finding.sources:
        parts.append('<p class="where">Where: ' + ", ".join(f"<code>{_h(source)}</code>"
                                                           for source in finding.sources) + "</p>")
    parts.append("</div>")
    return "\n".join(parts)


def _html_section(section: Section) -> str:
    parts = [f"<h2>{_h(section.title)}</h2>"]
    for item in section.items:
        if isinstance(item, Table):
            parts.append(_html_table(item))
        elif isinstance(item, list):
            parts.append("<ul>" + "".join(f'<li class="mono">{_h(line)}</li>' for line in item) + "</ul>")
        else:
            parts.append(f"<p>{_h(item)}</p>")
    return "\n".join(parts)


def render_html(document: Document) -> str:
    """Renders a document as one self-contained HTML page: inline CSS and SVG, no file or address outside it (its
    one script, inline, sorts the per-graph table).

    Args:
      document: what to render.

    Returns:
      The HTML text.
    """
    verdict = document.verdict
    pictures = html_charts.pictures(document.views, document.findings)
    summary = "".join(f"<tr><th>{_h(label)}</th><td>{_h(value)}</td></tr>" for label, value in document.summary)
    body = [
        f"<h1>{_h(document.title)}</h1>",
        f'<p><span class="verdict {_h(verdict)}">{_h(VERDICT_TEXT.get(verdict, verdict))}</span> '
        f"{_h(document.headline)}</p>",
        f'<table class="summary"><tbody>{summary}</tbody></table>',
        "<h2>Findings</h2>",
        # A comparison's findings are B's (those new in B): their evidence is on B's timeline.
        *(_html_finding(finding, document.views[-1:]) for finding in document.findings),
        pictures,
        *(_html_section(section) for section in document.sections),
    ]
    script = f"<script>{html_charts.SORT_SCRIPT}</script>\n" if html_charts.SORTABLE in pictures else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{_h(document.title)}</title>\n<style>{_CSS}{html_charts.CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n" + script + "</body>\n</html>\n")
