"""The HTML report's pictures section: the SVG charts of `xladev.report.svg_charts` with their legends, the
marks table each mark links to, the sortable per-graph table (with each graph's IR when the log has it), and
the links from a finding to the marks that are its evidence.

The page stays one offline file: the only script is `SORT_SCRIPT`, inline, which sorts a table when its
heading is clicked (without it the table reads in its first order).
"""

from __future__ import annotations

import html

from xladev.report import svg_charts
from xladev.report.marks import KINDS, LABELS
from xladev.report.glance import MAX_FINDING_LINKS, RunView
from xladev.schema.sites import short_site
from xladev.schema.units import compact_time_ns, format_bytes

# Marks tables longer than this start folded (a link to a row unfolds it).
OPEN_MARK_ROWS = 40
# The class of a table the inline script sorts; the page carries the script only when it has one.
SORTABLE = 'class="sortable'
MAX_GRAPH_ROWS = 200

CSS = """
svg.chart{max-width:100%;height:auto;display:block;margin:.4rem 0}svg.defs{position:absolute}
svg.chart text{font-size:11px;fill:#24292f}svg.chart .tick{font-size:10.5px;fill:#57606a}
svg.chart .axis{stroke:#57606a;stroke-width:1}svg.chart .grid{stroke:#eaeef2;stroke-width:1}
svg.chart .peak{stroke:#1f2328;stroke-width:1.2}svg.chart text.inbar{fill:#1f2328}svg.chart text.light{fill:#fff}
svg.chart a.mark:hover path,svg.chart a.mark:focus path,svg.chart a.mark:target path{stroke:#1f2328;stroke-width:2}
svg.chart .line-a{stroke:#08306b;stroke-width:2}svg.chart .line-b{stroke:#d94801;stroke-width:2}
svg.chart polyline.rank{stroke:#4a90c8;stroke-width:1.5}svg.chart polyline.straggler{stroke:#08306b;stroke-width:3.5}
svg.chart g.bar:hover rect{opacity:.75}svg.chart .cut{fill:none;stroke:#fff;stroke-width:2.5}
.legend{font-size:.85rem;color:#57606a;margin:.2rem 0 .6rem}.legend .key{margin-right:1rem;white-space:nowrap}
.legend svg{vertical-align:-2px}.note{color:#57606a;font-size:.9rem}
tr:target{background:#fff8c5}table.marks td:first-child{white-space:nowrap}
table.sortable th{cursor:pointer}table.sortable th:after{content:" ↕";color:#8c959f}
.links a{margin-right:.5rem}details pre{max-height:20rem;overflow:auto;background:#f6f8fa;padding:.5rem}
@media print{body{max-width:none;margin:0;font-size:10pt}.finding,svg.chart,table{break-inside:avoid}
a{color:inherit;text-decoration:none}details::details-content{content-visibility:visible;display:contents}
table.sortable th:after{content:""}svg.chart{max-width:100%}
.verdict,.fix{-webkit-print-color-adjust:exact;print-color-adjust:exact}
svg,rect,path{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""

# Sorts a table.sortable by the clicked column: numbers by their data-v value, text as text; again: reversed.
SORT_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var down = th.getAttribute("aria-sort") !== "descending";
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute("data-v"), y = b.cells[col].getAttribute("data-v");
        var d = (x !== null && y !== null) ? Number(x) - Number(y) : a.cells[col].textContent.localeCompare(
          b.cells[col].textContent);
        return down ? -d : d;
      });
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", down ? "descending" : "ascending");
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def _h(text) -> str:
    return html.escape(str(text), quote=True)


def _marks_table(view: RunView) -> str:
    if not view.marks:
        return ""
    rows = []
    for group in view.marks:
        sites = "<br>".join(_h(line) for line in group.lines) + (f"<br>… {group.more} more" if group.more else "")
        rows.append(f'<tr id="row-{_h(group.anchor)}"><td class="r mono">{_h(group.steps_text())}</td>'
                    f'<td><a href="#{_h(group.anchor)}">{_h(LABELS[group.kind])}</a></td>'
                    f'<td class="r mono">{group.count:,}</td>'
                    f'<td class="r mono">{_h(compact_time_ns(group.ns) if group.ns else "-")}</td>'
                    f'<td class="mono">{sites}</td></tr>')
    table = ('<table class="marks"><thead><tr><th class="r">Steps</th><th>Mark</th><th class="r">Count</th>'
             '<th class="r">Time</th><th>Site: cause</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")
    opened = " open" if len(rows) <= OPEN_MARK_ROWS else ""
    return f"<details{opened}><summary>Every mark: its steps, sites and causes ({len(rows)})</summary>{table}</details>"


def _graph_table(view: RunView) -> str:
    if not view.graphs:
        return ""
    rows, dumps = [], []
    for index, graph in enumerate(view.graphs[:MAX_GRAPH_ROWS]):
        name = graph.graph_hash[:16]
        if graph.graph_hash in view.graph_ir:
            # Numbered ids: a hash is the log's text, and an id must hold no space (a link to it would break).
            name = f'<a href="#{view.prefix}ir-{index}">{_h(name)}</a>'
            dumps.append(f'<details id="{view.prefix}ir-{index}"><summary>IR of graph '
                         f'<code>{_h(graph.graph_hash)}</code> ({_h(short_site(graph.site) or "?")})</summary>'
                         f"<pre>{_h(view.graph_ir[graph.graph_hash])}</pre></details>")
        else:
            name = _h(name)
        rows.append(f'<tr><td class="mono">{name}</td><td class="mono">{_h(short_site(graph.site) or "?")}</td>'
                    f'<td class="r mono" data-v="{graph.nodes}">{graph.nodes:,}</td>'
                    f'<td class="r mono" data-v="{graph.compiles}">{graph.compiles:,}</td>'
                    f'<td class="r mono" data-v="{graph.compile_ns:.0f}">{_h(compact_time_ns(graph.compile_ns))}</td>'
                    f'<td class="r mono" data-v="{graph.executions}">{graph.executions:,}</td>'
                    f'<td class="r mono" data-v="{graph.execute_ns:.0f}">{_h(compact_time_ns(graph.execute_ns))}</td>'
                    f'<td class="r mono" data-v="{graph.first_step}">{graph.first_step}</td>'
                    + (f'<td class="r mono" data-v="{graph.memory_bytes:.0f}">{_h(format_bytes(graph.memory_bytes))}'
                       f'</td>' if graph.memory_bytes is not None else '<td class="r mono" data-v="-1">-</td>')
                    + '</tr>')
    more = len(view.graphs) - MAX_GRAPH_ROWS
    note = f'<p class="note">{more} more graphs in --format json.</p>' if more > 0 else ""
    table = ('<table class="sortable graphs"><caption>Click a heading to sort</caption><thead><tr>'
             '<th>Graph</th><th>Site</th><th class="r">IR nodes</th><th class="r">Compiles</th>'
             '<th class="r">Compile time</th><th class="r">Executions</th><th class="r">Execution time</th>'
             '<th class="r">First step</th><th class="r" title="What the graph holds on the device while it runs: '
             'its inputs, outputs not written into donated inputs, temporaries and program (XLA\'s memory '
             'analysis)">Memory while it runs</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")
    return table + note + "".join(dumps)


def _run_pictures(view: RunView, straggler: int | None) -> list[str]:
    parts = []
    timeline = svg_charts.timeline(view)
    if timeline:
        parts += ["<h3>Step timeline</h3>", f'<p class="note">Bar height: {_h(view.measured)}'
                  + (f"; one bar per {view.bucket} steps (its mean step; a line marks its slowest)"
                     if view.bucket > 1 else "") + ". Hover a bar or mark for its numbers; click a mark for its row "
                  "below.</p>" if view.bars else "",
                  svg_charts.legend(svg_charts.parts_drawn(view.bars)) if view.bars else "", timeline,
                  svg_charts.mark_legend([k for k in KINDS if any(g.kind == k for g in view.marks)]),
                  _marks_table(view)]
    memory = svg_charts.memory_chart(view)
    if memory:
        sampled = sum(point.samples for point in view.memory)
        parts += ["<h3>Device memory</h3>", f'<p class="note">Sampled at the end of {sampled:,} steps (each step, '
                  "or every few steps where sampling would cost over 1% of one). The peak is estimated: what was "
                  "live when the step began plus the most its graphs add while they run (XLA's memory analysis)."
                  + (f" One point per {view.bucket} steps: the most of its sampled steps." if view.bucket > 1 else "")
                  + "</p>", svg_charts.memory_legend(), memory]
    bar = svg_charts.run_bar(view)
    if bar:
        shown = list(dict.fromkeys(part for _, b in view.breakdowns for part, _, total, _, _ in b.rows() if total))
        parts += ["<h3>The run's time by part</h3>", svg_charts.legend(shown), bar]
    ranks = svg_charts.ranks_chart(view, straggler)
    if ranks:
        parts += ["<h3>Per rank</h3>", ranks]
    graphs = _graph_table(view)
    if graphs:
        parts += ["<h3>Per graph</h3>", graphs]
    return parts


def pictures(views: list[RunView], findings: list) -> str:
    """The pictures section of a report or a comparison.

    Args:
      views: one run's view, or two (A and B) for a comparison.
      findings: the page's findings (the straggler finding names the rank to draw thickest).

    Returns:
      The HTML, "" when no view has anything to draw or say.
    """
    straggler = next((int(f.numbers["rank"]) for f in findings if f.rule == "straggler" and "rank" in f.numbers),
                     None)
    body: list[str] = []
    if len(views) == 2:
        both = svg_charts.compare_timeline(*views)
        if both:
            body += ["<h3>A and B on one axis</h3>", both,
                     svg_charts.mark_legend([k for k in KINDS if any(g.kind == k for v in views for g in v.marks)])]
        for label, view in zip("AB", views):
            inner = _run_pictures(view, straggler)
            if inner:
                body += [f'<h3 class="run">{label}: {_h(view.name)}</h3>'] + inner
    else:
        for view in views:
            body += _run_pictures(view, straggler)
    if len(views) == 2:
        a, b = (view.notes for view in views)
        said = [("A and B: ", note) for note in a if note in b] + [("A: ", note) for note in a if note not in b] \
            + [("B: ", note) for note in b if note not in a]
    else:
        said = [("", note) for view in views for note in view.notes]
    notes = [f'<p class="note">{label}{_h(note)}</p>' for label, note in said]
    if not body and not notes:
        return ""
    return "\n".join(['<h2 id="glance">The run at a glance</h2>', svg_charts.defs(), *notes, *body])


def finding_links(finding, views: list[RunView]) -> str:
    """The links from a finding to the marks (or rank) that are its evidence, as one paragraph.

    Args:
      finding: a `xladev.analysis.Finding`.
      views: the page's run views.

    Returns:
      The HTML paragraph, "" when nothing on the page is its evidence.
    """
    links = []
    for view in views:
        groups = view.finding_marks(finding)
        links += [f'<a href="#{_h(g.anchor)}">{_h(g.steps_text())}</a>' for g in groups[:MAX_FINDING_LINKS]]
        if len(groups) > MAX_FINDING_LINKS:
            links.append(f"… {len(groups) - MAX_FINDING_LINKS} more")
        rank = finding.numbers.get("rank")
        if isinstance(rank, int) and any(series.rank == rank for series in view.ranks):
            links.append(f'<a href="#{view.prefix}rank-{rank}">rank {rank} on the per-rank chart</a>')
        if finding.rule == "memory-growing" and view.memory:
            links.append(f'<a href="#{view.prefix}memory">the device memory chart</a>')
        step = finding.numbers.get("step")
        if finding.rule == "graph-divergence" and isinstance(step, int) and view.ranks:
            links.append(f'<a href="#{view.prefix}ranks">step {step} on the per-rank chart</a>')
    if not links:
        return ""
    return '<p class="links">On the timeline: ' + " ".join(links) + "</p>"
