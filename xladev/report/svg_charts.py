"""The HTML report's pictures of a run, as inline SVG strings: no script, font or image from anywhere.

- `timeline`: the step timeline: a bar per step (or bucket of steps) split into where its time went, and
  below it a row per kind of mark (compile, device→host read, CPU fallback, graph break) on the step it
  happened; each mark has a tooltip (`<title>`) naming its sites and causes, an id that findings link to,
  and links to its row in the marks table;
- `run_bar`: the run's wall time as one stacked bar;
- `compare_timeline`: two runs' step times on one axis;
- `ranks_chart`: each rank's step time on one axis, the straggler drawn thickest;
- `memory_chart`: device memory per step on the timeline's step axis: live at each sampled step's end as a line,
  the step's peak as a shaded band above it.

Every chart has a `<title>` and `<desc>` (what a screen reader says, and the text a print of the page keeps);
the parts differ in lightness and pattern, the marks in shape, so the pictures hold in grey.
"""

from __future__ import annotations

import html

from xladev.analysis import wall_time
from xladev.report.marks import KINDS, LABELS
from xladev.report.glance import MarkGroup, MemoryPoint, RankSeries, RunView, StepBar, steps_axis
from xladev.schema.units import compact_time_ns, format_bytes

WIDTH = 960
LEFT, RIGHT, TOP = 112, 12, 14
PLOT_H = 170
ROW_H = 18
# Fill per part: light and dark alternate and the transfers, fallbacks and the rest are hatched or dotted,
# so neighbouring parts differ in grey too. (fill, pattern mark colour or "" for a plain fill)
PART_STYLE = {
    "tracing": ("#c6dbef", ""),
    "compile": ("#08306b", ""),
    "execute": ("#4a90c8", ""),
    "to_device": ("#fdd0a2", "#a63603"),
    "from_device": ("#d94801", "#ffffff"),
    "fallback": ("#54278f", "#dadaeb"),
    "other": ("#e0e0e0", "#636363"),
}
_PATTERN_PATHS = {"to_device": "M0,6 L6,0", "from_device": "M0,0 L6,6", "fallback": "M0,3 H6 M3,0 V6",
                  "other": "M2.5,3 h1"}
# Mark shape per kind (path around 0,0), dark and light alternating.
MARK_SHAPES = {"compile": ("M-5,-4 H5 L0,5 Z", "#08306b"), "transfer": ("M-4.5,0 A4.5,4.5 0 1,0 4.5,0 "
                                                                      "A4.5,4.5 0 1,0 -4.5,0 Z", "#d94801"),
               "fallback": ("M-4,-4 H4 V4 H-4 Z", "#54278f"), "graph-break": ("M0,-5 L5,0 L0,5 L-5,0 Z", "#737373")}
RANK_DASHES = ("", "6 3", "2 2", "8 3 2 3", "1 3", "10 4")
# A bar taller than CLIP_ABOVE times the median bar (a compile's step) would flatten every other bar: the axis
# then stops at CLIP_TO times the median, and the taller bars are cut, marked so, and say their time.
CLIP_ABOVE, CLIP_TO = 5.0, 3.0


def _h(text) -> str:
    return html.escape(str(text), quote=True)


def _fill(part: str) -> str:
    colour, pattern = PART_STYLE[part]
    return f"url(#pat-{part})" if pattern else colour


def defs() -> str:
    """The patterns every chart's parts use, once per page.

    Returns:
      A hidden `<svg>` holding them, to put before the first chart.
    """
    patterns = []
    for part, (colour, ink) in PART_STYLE.items():
        if ink:
            patterns.append(f'<pattern id="pat-{part}" patternUnits="userSpaceOnUse" width="6" height="6">'
                            f'<rect width="6" height="6" fill="{colour}"/><path d="{_PATTERN_PATHS[part]}" '
                            f'stroke="{ink}" stroke-width="1.3"/></pattern>')
    return ('<svg class="defs" width="0" height="0" aria-hidden="true" focusable="false"><defs>'
            + "".join(patterns) + "</defs></svg>")


def _open(chart_id: str, height: int, title: str, desc: str, css: str) -> str:
    return (f'<svg id="{_h(chart_id)}" class="chart {css}" role="img" viewBox="0 0 {WIDTH} {height}" '
            f'width="{WIDTH}" height="{height}" aria-labelledby="{_h(chart_id)}-t {_h(chart_id)}-d" '
            f'xmlns="http://www.w3.org/2000/svg">'
            f'<title id="{_h(chart_id)}-t">{_h(title)}</title><desc id="{_h(chart_id)}-d">{_h(desc)}</desc>')


def legend(parts: list[str]) -> str:
    """An HTML legend of the parts' fills.

    Args:
      parts: parts of `wall_time.PARTS`, or ``other``.

    Returns:
      A `<div>` with a swatch and label per part.
    """
    items = "".join(f'<span class="key"><svg width="14" height="14" aria-hidden="true"><rect width="14" '
                    f'height="14" fill="{_fill(part)}" stroke="#555"/></svg> {_h(wall_time.LABELS[part])}</span>'
                    for part in parts)
    return f'<div class="legend">{items}</div>'


def mark_legend(kinds: list[str]) -> str:
    """An HTML legend of the marks' shapes.

    Args:
      kinds: kinds of `xladev.report.marks.KINDS`.

    Returns:
      A `<div>` with a shape and label per kind.
    """
    items = "".join(f'<span class="key"><svg width="14" height="14" viewBox="-7 -7 14 14" aria-hidden="true">'
                    f'<path d="{MARK_SHAPES[kind][0]}" fill="{MARK_SHAPES[kind][1]}" stroke="#fff"/></svg> '
                    f'{_h(LABELS[kind])}</span>' for kind in kinds)
    return f'<div class="legend">{items}</div>'


def parts_drawn(bars: list[StepBar]) -> list[str]:
    """The parts a timeline draws.

    Args:
      bars: the timeline's bars.

    Returns:
      The parts any bar has time in, in `wall_time.PARTS` order, then ``other`` when some bar has time outside them.
    """
    parts = [part for part in wall_time.PARTS if any(bar.parts.get(part) for bar in bars)]
    return parts + (["other"] if any(bar.other_ns() for bar in bars) else [])


def axis_top(heights: list[float]) -> tuple[float, bool]:
    """Where a time axis stops (see `CLIP_ABOVE`).

    Args:
      heights: the bars' heights in ns.

    Returns:
      The axis's top in ns, and whether taller bars are cut.
    """
    if not heights:
        return 0.0, False
    ordered = sorted(heights)
    median = ordered[len(ordered) // 2]
    if median > 0 and ordered[-1] > CLIP_ABOVE * median:
        return CLIP_TO * median, True
    return ordered[-1], False


class _Axis:
    """Steps to x and nanoseconds to y for one plot."""

    def __init__(self, first: int, last: int, bucket: int, top_ns: float):
        # Aligned as the bars are (a bar starts at a multiple of the bucket), so a mark in a bar's steps is in its slot.
        self.first, self.bucket = first // bucket * bucket, bucket
        self.slots = max(1, last // bucket - first // bucket + 1)
        self.slot_w = (WIDTH - LEFT - RIGHT) / self.slots
        self.top_ns = top_ns if top_ns > 0 else 1.0

    def x(self, step: int) -> float:
        return LEFT + (step - self.first) // self.bucket * self.slot_w

    def centre(self, step: int) -> float:
        return self.x(step) + self.slot_w / 2

    def y(self, ns: float) -> float:
        return TOP + PLOT_H - min(1.0, ns / self.top_ns) * PLOT_H


def _frame(axis: _Axis, first: int, last: int, label: str, top_text: str | None = None) -> list[str]:
    """Axes: the y range (in time unless `top_text` says the top otherwise), a few step numbers along x."""
    bottom = TOP + PLOT_H
    top_text = compact_time_ns(axis.top_ns) if top_text is None else top_text
    out = [f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}"/>',
           f'<line class="axis" x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}"/>',
           f'<text class="tick" x="{LEFT - 4}" y="{TOP + 9}" text-anchor="end">{_h(top_text)}</text>',
           f'<text class="tick" x="{LEFT - 4}" y="{bottom}" text-anchor="end">0</text>',
           f'<text class="tick" x="{LEFT - 4}" y="{TOP + PLOT_H // 2}" text-anchor="end">{_h(label)}</text>']
    ticks = sorted({first, last} | {first + (last - first) * i // 4 for i in range(1, 4)})
    for step in ticks:  # the last number ends at the plot's edge rather than past it
        anchor = "end" if step == last and len(ticks) > 1 and axis.slots > 8 else "middle"
        x = min(axis.centre(step), WIDTH - RIGHT)
        out.append(f'<text class="tick" x="{x:.1f}" y="{bottom + 13}" text-anchor="{anchor}">{step}</text>')
    return out


def _bar(axis: _Axis, bar: StepBar, parts: list[str], prefix: str) -> str:
    steps = f"step {bar.first}" if bar.first == bar.last else f"steps {bar.first}–{bar.last}"
    if bar.wall_ns is not None:
        head = f"{steps}: {compact_time_ns(bar.wall_ns)}" + ("" if bar.steps == 1 else
                                                             f" mean, slowest {compact_time_ns(bar.peak_ns)}")
    else:
        head = f"{steps}: {compact_time_ns(bar.height_ns)} device time (estimated)"
    values = {part: bar.parts.get(part, 0.0) for part in parts if part != "other"}
    if "other" in parts:
        values["other"] = bar.other_ns()
    detail = "; ".join(f"{wall_time.SHORT_LABELS[p]} {compact_time_ns(ns)}" for p, ns in values.items() if ns)
    x = axis.x(bar.first) + (0.5 if axis.slot_w > 3 else 0)
    w = max(0.6, axis.slot_w - (1 if axis.slot_w > 3 else 0))
    out = [f'<g class="bar" id="{prefix}step-{bar.first}"><title>{_h(head)}\n{_h(detail)}</title>']
    scale = bar.height_ns / sum(values.values()) if sum(values.values()) > bar.height_ns > 0 else 1.0
    base = 0.0
    for part, ns in values.items():
        if ns <= 0:
            continue
        y0, y1 = axis.y(base + ns * scale), axis.y(base)
        out.append(f'<rect x="{x:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{max(0.0, y1 - y0):.1f}" '
                   f'fill="{_fill(part)}"/>')
        base += ns * scale
    if bar.steps > 1 and bar.peak_ns > bar.height_ns:
        y = axis.y(bar.peak_ns)
        out.append(f'<line class="peak" x1="{x:.1f}" x2="{x + w:.1f}" y1="{y:.1f}" y2="{y:.1f}"/>')
    if bar.height_ns > axis.top_ns:  # cut: a white zig-zag across its top, and its time above it
        y = TOP + 6
        out.append(f'<path class="cut" d="M{x:.1f},{y + 3} l{w / 4:.1f},-4 l{w / 4:.1f},4 l{w / 4:.1f},-4 '
                   f'l{w / 4:.1f},4"/>')
        if axis.slot_w >= 24:
            out.append(f'<text class="tick" x="{x + w / 2:.1f}" y="{TOP - 3}" text-anchor="middle">'
                       f'{_h(compact_time_ns(bar.height_ns))}</text>')
    return "".join(out) + "</g>"


def _mark(axis: _Axis, group: MarkGroup, y: float, id_prefix: str = "", row_link: bool = True) -> str:
    """One mark: a link to its row in the marks table (`row_link`), else only its tooltip."""
    shape, colour = MARK_SHAPES[group.kind]
    x = axis.centre(group.first)
    tag, href = ("a", f' href="#row-{_h(group.anchor)}"') if row_link else ("g", "")
    return (f'<{tag} class="mark {group.kind}" id="{id_prefix}{_h(group.anchor)}"{href}>'
            f'<title>{_h(group.tooltip())}</title>'
            f'<path transform="translate({x:.1f},{y:.1f})" d="{shape}" fill="{colour}" stroke="#fff" '
            f'stroke-width="0.8"/></{tag}>')


def _mark_rows(axis: _Axis, groups: list[MarkGroup], top: float, label_prefix: str = "",
               id_prefix: str = "", row_link: bool = True) -> tuple[list[str], float]:
    kinds = [kind for kind in KINDS if any(group.kind == kind for group in groups)]
    out = []
    for row, kind in enumerate(kinds):
        y = top + row * ROW_H + ROW_H / 2
        out.append(f'<text class="tick" x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{_h(label_prefix)}'
                   f'{_h(LABELS[kind])}</text>')
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out += [_mark(axis, group, y, id_prefix, row_link) for group in groups if group.kind == kind]
    return out, top + len(kinds) * ROW_H


def _timeline_desc(view: RunView) -> str:
    bars = view.bars
    parts = [f"{len(bars)} bars" + (f", {view.bucket} steps each" if view.bucket > 1 else "") + f": {view.measured}."
             if bars else "No step times in this input."]
    if bars:
        slowest = max(bars, key=lambda b: b.height_ns)
        ordered = sorted(b.height_ns for b in bars)
        parts.append(f"Median {compact_time_ns(ordered[len(ordered) // 2])}; slowest "
                     f"{'step' if slowest.first == slowest.last else 'steps'} {slowest.first}"
                     f"{'' if slowest.first == slowest.last else '–' + str(slowest.last)} at "
                     f"{compact_time_ns(slowest.height_ns)}.")
    for kind in KINDS:
        groups = [g for g in view.marks if g.kind == kind]
        if groups:
            count = sum(g.count for g in groups)
            steps = ", ".join(g.steps_text() for g in groups[:5]) + (", …" if len(groups) > 5 else "")
            parts.append(f"{LABELS[kind]}: {count:,} in {steps}.")
    return " ".join(parts)


def timeline(view: RunView) -> str:
    """The step timeline of one run: stacked step bars, then a row of marks per kind.

    Args:
      view: the run's `RunView`.

    Returns:
      The `<svg>` element, or "" when the run has neither step times nor marks.
    """
    if not view.bars and not view.marks:
        return ""
    first, last = steps_axis([view])
    top, cut = axis_top([bar.height_ns for bar in view.bars])
    axis = _Axis(first, last, view.bucket, top)
    parts = parts_drawn(view.bars)
    body = _frame(axis, first, last, "step time" if view.exact else "device time")
    body += [_bar(axis, bar, parts, view.prefix) for bar in view.bars]
    rows, bottom = _mark_rows(axis, view.marks, TOP + PLOT_H + 20)
    height = int(bottom + 8)
    title = f"Step timeline of {view.name}"
    desc = _timeline_desc(view) + (f" The axis stops at {compact_time_ns(top)}: taller bars are cut." if cut else "")
    return _open(f"{view.prefix}timeline", height, title, desc, "timeline") + "".join(body + rows) \
        + "</svg>"


def _whole(breakdown: wall_time.TimeBreakdown) -> float:
    """What a breakdown's bar spans: its wall time, or its parts' sum when they overlap or the wall is unknown."""
    parts = sum(total for _, _, total, _, _ in breakdown.rows() if total)
    return breakdown.wall_ns if breakdown.wall_ns and not breakdown.overlaps() else parts


def run_bar(view: RunView) -> str:
    """The run's wall time as one stacked bar of its parts, each labelled with its share; a bar per rank, on one
    scale, for a run of several ranks.

    Args:
      view: the run's `RunView`.

    Returns:
      The `<svg>` element, or "" when the run has no time breakdown.
    """
    rows = [(label, b) for label, b in view.breakdowns if not b.is_empty() and _whole(b)]
    if not rows:
        return ""
    scale = max(_whole(b) for _, b in rows)
    span = WIDTH - LEFT - RIGHT
    body, descs = [], []
    for i, (label, breakdown) in enumerate(rows):
        y, whole, x = TOP + 36 * i, _whole(breakdown), float(LEFT)
        parts = [(part, total) for part, _, total, _, _ in breakdown.rows() if total]
        for part, total in parts:
            w, share = total / scale * span, total / whole
            who = f"{label}: " if len(rows) > 1 else ""
            body.append(f'<g class="part {part}"><title>{_h(who)}{_h(wall_time.LABELS[part])}: '
                        f'{_h(compact_time_ns(total))} ({share:.0%})</title><rect x="{x:.1f}" y="{y}" '
                        f'width="{w:.1f}" height="28" fill="{_fill(part)}" stroke="#fff" stroke-width="0.5"/>')
            if w > 60:
                dark = PART_STYLE[part][0] in ("#08306b", "#d94801", "#54278f", "#4a90c8")
                body.append(f'<text class="inbar{" light" if dark else ""}" x="{x + 4:.1f}" y="{y + 18}">'
                            f'{_h(wall_time.SHORT_LABELS[part])} {share:.0%}</text>')
            body.append("</g>")
            x += w
        body.append(f'<text class="tick" x="{LEFT - 4}" y="{y + 18}" text-anchor="end">{_h(label)}'
                    f'{"" if breakdown.exact else " (est.)"}</text>')
        descs.append(f"{label}: {breakdown.headline()}. "
                     + "; ".join(f"{wall_time.LABELS[p]} {compact_time_ns(t)}" for p, t in parts))
    return _open(f"{view.prefix}run-bar", TOP + 36 * len(rows) + 4, f"Where the time went in {view.name}",
                 " ".join(descs), "runbar") + "".join(body) + "</svg>"


def _polyline(axis: _Axis, bars: list[StepBar], css: str, dash: str = "") -> str:
    points = " ".join(f"{axis.centre(bar.first):.1f},{axis.y(bar.height_ns):.1f}" for bar in bars)
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<polyline class="{css}" points="{points}" fill="none"{dashes}/>'


def compare_timeline(a: RunView, b: RunView) -> str:
    """Two runs' step times on one axis (A solid, B dashed), with their marks in rows below.

    Args:
      a: the baseline run's view (ids prefixed ``a-``).
      b: the other run's view (ids prefixed ``b-``), bucketed as `a`.

    Returns:
      The `<svg>` element, or "" when neither run has step times or marks.
    """
    if not (a.bars or a.marks or b.bars or b.marks):
        return ""
    first, last = steps_axis([a, b])
    # Cut as one run's bars are (the steady steps are where two runs differ); a cut step runs off the top.
    top, cut = axis_top([bar.height_ns for bar in a.bars + b.bars])
    axis = _Axis(first, last, max(a.bucket, b.bucket), top)
    body = _frame(axis, first, last, "step time" if a.exact and b.exact else "time")
    for i, (view, css, dash, label) in enumerate(((a, "line-a", "", "A"), (b, "line-b", "6 3", "B"))):
        if view.bars:
            body.append(f'<g class="series {css}"><title>{label}: {_h(view.name)}: {_h(view.measured)}</title>'
                        + _polyline(axis, view.bars, css, dash) + "</g>")
            y = TOP + 12 + 13 * i
            dashes = f' stroke-dasharray="{dash}"' if dash else ""
            body.append(f'<line class="{css}" x1="{WIDTH - RIGHT - 30}" x2="{WIDTH - RIGHT - 4}" y1="{y - 4}" '
                        f'y2="{y - 4}"{dashes}/>'
                        f'<text class="tick" x="{WIDTH - RIGHT - 34}" y="{y}" text-anchor="end">{label}</text>')
    y = TOP + PLOT_H + 20
    for view, label in ((a, "A "), (b, "B ")):
        rows, y = _mark_rows(axis, view.marks, y, label, "both-")  # each run's own timeline has the plain ids
        body += rows
    desc = (f"A: {a.name}, {len(a.bars)} bars, solid line. B: {b.name}, {len(b.bars)} bars, dashed line. "
            + _timeline_desc(a) + " " + _timeline_desc(b)
            + (f" The axis stops at {compact_time_ns(top)}: taller steps run off the top." if cut else ""))
    return _open("compare-timeline", int(y + 8), f"Step times of A and B on one axis", desc, "timeline") \
        + "".join(body) + "</svg>"


def ranks_chart(view: RunView, straggler: int | None) -> str:
    """Each rank's work per step (its step time less its wait for the others) on one axis; the straggler's line
    thickest, each rank's dash different.

    Args:
      view: the run's view with its `RankSeries`.
      straggler: the rank the straggler finding names, or None.

    Returns:
      The `<svg>` element, or "" when the run has fewer than two ranks with step times.
    """
    ranks: list[RankSeries] = view.ranks
    if len(ranks) < 2:
        return ""
    bars = [bar for series in ranks for bar in series.bars]
    first, last = min(bar.first for bar in bars), max(bar.last for bar in bars)
    axis = _Axis(first, last, view.bucket, axis_top([bar.height_ns for bar in bars])[0])
    body = _frame(axis, first, last, "work per step")
    y = TOP + PLOT_H + 20
    for i, series in enumerate(ranks):
        css = "rank straggler" if series.rank == straggler else "rank"
        dash = RANK_DASHES[i % len(RANK_DASHES)]
        wait = sum(series.wait_ns) / max(1, len(series.wait_ns))
        body.append(f'<g class="{css}" id="{view.prefix}rank-{series.rank}"><title>rank {series.rank}: '
                    f'{_h(compact_time_ns(series.total_ns))} of steps, {_h(compact_time_ns(wait))} waiting for the '
                    f'others per step{" (straggler)" if series.rank == straggler else ""}</title>'
                    + _polyline(axis, series.bars, css, dash) + "</g>")
        body.append(f'<text class="tick" x="{WIDTH - RIGHT - 4}" y="{TOP + 12 + 13 * i}" text-anchor="end">'
                    f'{"▶ " if series.rank == straggler else ""}rank {series.rank} '
                    f'<tspan class="swatch">{"━━" if not dash else "╍╍"}</tspan></text>')
        # Each rank's marks in rows of their own, on the same steps: a graph one rank compiles alone, or a read
        # one rank makes, stands out.
        rows, y = _mark_rows(axis, series.marks, y, f"rank {series.rank} ", row_link=False)  # no table of them
        body += rows
    desc = "; ".join(f"rank {s.rank}: {compact_time_ns(s.total_ns)} in steps, " + _rank_marks_text(s) for s in ranks)
    if straggler is not None:
        desc = f"Rank {straggler} is the straggler. " + desc
    return _open(f"{view.prefix}ranks", int(y + 8), "Work per step and compiles of each rank", desc, "ranks") \
        + "".join(body) + "</svg>"


def _rank_marks_text(series: RankSeries) -> str:
    """Where a rank's marks are, per kind, in words (the chart's text alternative)."""
    kinds = [kind for kind in KINDS if any(group.kind == kind for group in series.marks)]
    if not kinds:
        return "no compile in any step"
    return "; ".join(f"{LABELS[kind]}s in " + ", ".join([g.steps_text() for g in series.marks if g.kind == kind][:5])
                     for kind in kinds)


def memory_legend() -> str:
    """The HTML legend of `memory_chart`: its line and its band."""
    return ('<div class="legend"><span class="key"><svg width="22" height="14" aria-hidden="true"><line x1="1" y1="7" '
            'x2="21" y2="7" stroke="#08306b" stroke-width="2"/><circle cx="11" cy="7" r="2.5" fill="#08306b"/></svg> '
            'live at the step\'s end</span><span class="key"><svg width="14" height="14" aria-hidden="true"><rect '
            'width="14" height="14" fill="#c6dbef" stroke="#4a90c8"/></svg> up to the step\'s peak (estimated)'
            '</span></div>')


def _memory_desc(view: RunView) -> str:
    points = view.memory
    first, last = points[0], points[-1]
    peak = max(points, key=lambda p: p.peak)
    samples = sum(p.samples for p in points)
    return (f"{samples:,} sampled steps" + (f" in {len(points)} bars of {view.bucket} steps" if view.bucket > 1 else "")
            + f". Live at the step's end: {format_bytes(first.live)} in {first.steps_text()}, "
            f"{format_bytes(last.live)} in {last.steps_text()}; highest {format_bytes(max(p.live for p in points))}. "
            f"Highest peak: {format_bytes(peak.peak)} in {peak.steps_text()}.")


def memory_chart(view: RunView) -> str:
    """Device memory per step, on the step timeline's axis: live at each sampled step's end (a line with a dot per
    bar), and each step's peak (a shaded band from the live line up). A bar's hover says its numbers.

    Args:
      view: the run's `RunView` with its `MemoryPoint`s.

    Returns:
      The `<svg>` element, or "" when the run sampled no device memory.
    """
    points: list[MemoryPoint] = view.memory
    if not points:
        return ""
    first, last = steps_axis([view])
    first, last = min(first, points[0].first), max(last, points[-1].first)
    axis = _Axis(first, last, view.bucket, max(p.peak for p in points))
    body = _frame(axis, first, last, "device memory", format_bytes(axis.top_ns))
    band_top = " ".join(f"{axis.centre(p.first):.1f},{axis.y(p.peak):.1f}" for p in points)
    band_foot = " ".join(f"{axis.centre(p.first):.1f},{axis.y(p.live):.1f}" for p in reversed(points))
    body.append(f'<polygon class="mem-peak" points="{band_top} {band_foot}" fill="#c6dbef" stroke="#4a90c8" '
                f'stroke-width="0.8"/>')
    body.append(f'<polyline class="mem-live" points="{band_foot}" fill="none" stroke="#08306b" stroke-width="2"/>')
    for point in points:
        x = axis.centre(point.first)
        counted = "" if point.samples == 1 else f" (the most of {point.samples} sampled steps)"
        body.append(f'<g class="mem" id="{view.prefix}mem-{point.first}"><title>{_h(point.steps_text())}: '
                    f'{_h(format_bytes(point.live))} live at the end, peak {_h(format_bytes(point.peak))}{counted}'
                    f'</title><rect x="{axis.x(point.first):.1f}" y="{TOP}" width="{max(0.6, axis.slot_w):.1f}" '
                    f'height="{PLOT_H}" fill="transparent"/>'
                    f'<circle cx="{x:.1f}" cy="{axis.y(point.live):.1f}" r="{2.5 if axis.slot_w >= 4 else 1.2}" '
                    f'fill="#08306b"/></g>')
    return _open(f"{view.prefix}memory", TOP + PLOT_H + 26, f"Device memory of {view.name}", _memory_desc(view),
                 "memory") + "".join(body) + "</svg>"
