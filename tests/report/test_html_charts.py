"""`xladev report -f html` draws the run: the step timeline and its marks, the run's time by part, the per-graph
table, the per-rank chart and two runs on one axis, from every input kind, bounded for long runs.

The pages are read back with Python's HTML parser (the browser tests, `test_html_browser.py`, load them in
Chromium)."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser

import pytest

from xladev.cli.main import main
from xladev.report import svg_charts
from xladev.report.glance import MAX_BARS
from xladev.report.marks import KINDS, MarkLog

from tests.report import event_logs
from tests.report.helpers import fixture_path, write


class _Page(HTMLParser):
    """Collects every element's tag, attributes and the text of `<title>`/`<desc>` elements."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.texts: dict[int, str] = {}
        self._open: list[int] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag in ("title", "desc"):
            self._open.append(len(self.elements) - 1)

    def handle_endtag(self, tag):
        if tag in ("title", "desc") and self._open:
            self._open.pop()

    def handle_data(self, data):
        if self._open:
            index = self._open[-1]
            self.texts[index] = self.texts.get(index, "") + data

    def having(self, tag: str, css: str = "") -> list[dict]:
        return [attrs for t, attrs in self.elements if t == tag and css in attrs.get("class", "").split() + [""]]

    def ids(self) -> set[str]:
        return {attrs["id"] for _, attrs in self.elements if "id" in attrs}

    def title_after(self, element_id: str) -> str:
        """The text of the first `<title>` after the element with this id (its tooltip)."""
        start = next(i for i, (_, attrs) in enumerate(self.elements) if attrs.get("id") == element_id)
        index = next(i for i in range(start, len(self.elements)) if self.elements[i][0] == "title")
        return self.texts.get(index, "")


def _page(capsys, *argv) -> tuple[_Page, str]:
    code = main(["report", *map(str, argv), "--format", "html"])
    out = capsys.readouterr().out
    assert code in (0, 1), out[-500:]
    page = _Page()
    page.feed(out)
    return page, out


def test_event_log_timeline_marks_each_event_on_its_step_with_site_and_cause(capsys, tmp_path):
    path = write(tmp_path, "run.events.jsonl", event_logs.synthetic_log(20))
    page, text = _page(capsys, path)
    assert len(page.having("g", "bar")) == 20
    marks = {kind: sorted(int(a["id"].rsplit("-", 1)[1]) for a in page.having("a", kind)) for kind in KINDS}
    assert marks == {"compile": [0, *event_logs.RECOMPILE_STEPS], "transfer": list(event_logs.READ_STEPS),
                     "fallback": [event_logs.FALLBACK_STEP], "graph-break": [event_logs.BREAK_STEP]}
    assert page.title_after("mark-fallback-11") == ("step 11: CPU fallback ×1, 300 µs\n"
                                                    "train.py:18 (step): aten::nonzero ×1")
    assert "model.py:40 (forward): data-dependent branch" in page.title_after("mark-graph-break-15")
    # A bar's tooltip is its wall time and parts; the step with the fallback holds its CPU time.
    # 2 ms tracing + 0.3 ms CPU fallback + 5 ms execution + 1 ms after it.
    assert page.title_after("step-11") == "step 11: 8.3 ms\ntracing 2 ms; execute 5 ms; fallback 300 µs; other 1 ms"
    # Each mark links to its row in the marks table, and the row back to the mark.
    ids = page.ids()
    for attrs in page.having("a", "mark"):
        assert attrs["href"] == f"#row-{attrs['id']}" and f"row-{attrs['id']}" in ids


def test_findings_come_first_and_link_to_their_marks(capsys, tmp_path):
    path = write(tmp_path, "run.events.jsonl", event_logs.synthetic_log(20))
    _, text = _page(capsys, path)
    assert text.index('class="finding') < text.index('id="glance"')
    fallback = text[text.index("aten::nonzero runs on the CPU"):]
    links = re.findall(r'href="#([^"]+)"', fallback[:fallback.index('class="fix"')])
    assert links == ["mark-fallback-11"]
    recompiles = text[text.index("recompilation</div>"):]
    assert re.findall(r'href="#([^"]+)"', recompiles[:recompiles.index('class="fix"')]) == [
        "mark-compile-0", "mark-compile-5", "mark-compile-13"]


def test_host_transfer_finding_links_to_its_reads(capsys, tmp_path):
    path = write(tmp_path, "reads.events.jsonl", event_logs.synthetic_log(30, marks_every=1))  # a read every step
    _, text = _page(capsys, path)
    finding = text[text.index("host-transfers</div>"):]
    links = re.findall(r'href="#([^"]+)"', finding[:finding.index('class="fix"')])
    assert links == [f"mark-transfer-{step}" for step in range(8)]  # the first few, then how many more
    assert "… 22 more" in finding[:finding.index('class="fix"')]


def test_every_chart_has_a_text_alternative_and_the_page_a_print_style(capsys, tmp_path):
    path = write(tmp_path, "run.events.jsonl", event_logs.synthetic_log(20))
    page, text = _page(capsys, path)
    charts = page.having("svg", "chart")
    assert {c["id"] for c in charts} == {"timeline", "memory", "run-bar"}
    for chart in charts:
        title, desc = chart["aria-labelledby"].split()
        assert chart["role"] == "img" and {title, desc} <= page.ids()
    desc = page.texts[next(i for i, (t, a) in enumerate(page.elements) if a.get("id") == "timeline-d")]
    assert "compile: 3 in step 0, step 5, step 13." in desc and "cut" in desc
    assert "@media print" in text


def test_run_bar_is_the_wall_time_breakdown(capsys, tmp_path):
    path = write(tmp_path, "run.events.jsonl", event_logs.synthetic_log(20))
    page, _ = _page(capsys, path)
    tips = [page.texts[i] for i, (t, a) in enumerate(page.elements) if t == "title" and i - 1 >= 0
            and "part" in page.elements[i - 1][1].get("class", "")]
    # 20 steps: 3 compiles (2 s + 0.8 s + 0.8 s), 20 executions of 5 ms, 20 × 2 ms tracing.
    assert "XLA compile: 3.6 s (96%)" in tips and "execution: 100 ms (3%)" in tips


def test_memory_chart_draws_each_sampled_step_on_the_timelines_axis(capsys, tmp_path):
    from xladev.schema.units import format_bytes

    path = write(tmp_path, "run.events.jsonl", event_logs.synthetic_log(20))
    page, text = _page(capsys, path)
    points = page.having("g", "mem")
    assert [int(p["id"].rsplit("-", 1)[1]) for p in points] == list(range(20))
    # Each point's tooltip: live at the step's end and the step's peak, as the log says them.
    for step in (0, 7, 19):
        live = event_logs.live_bytes(step)
        assert page.title_after(f"mem-{step}") == (f"step {step}: {format_bytes(live)} live at the end, peak "
                                                   f"{format_bytes(live + event_logs.PEAK_EXTRA)}")
    # A point is in the same slot as its step's bar: the two charts share the step axis.
    timeline_rects = re.findall(r'<g class="bar" id="step-(\d+)"><title>[^<]*</title><rect x="([\d.]+)"', text)
    memory_rects = dict(re.findall(r'<g class="mem" id="mem-(\d+)"><title>[^<]*</title><rect x="([\d.]+)"', text))
    assert timeline_rects and all(abs(float(x) - float(memory_rects[step]) - 0.5) < 1e-6 for step, x in timeline_rects)
    desc = page.texts[next(i for i, (t, a) in enumerate(page.elements) if a.get("id") == "memory-d")]
    top = event_logs.live_bytes(19) + event_logs.PEAK_EXTRA
    assert "20 sampled steps" in desc and f"Highest peak: {format_bytes(top)} in step 8" in desc
    assert "Sampled at the end of 20 steps" in text and "The peak is estimated" in text


def test_memory_chart_buckets_a_long_run_by_its_most(capsys, tmp_path):
    steps = 2_000
    path = write(tmp_path, "long.events.jsonl", event_logs.synthetic_log(steps, marks_every=10))
    page, text = _page(capsys, path)
    points, bars = page.having("g", "mem"), page.having("g", "bar")
    assert len(points) == len(bars) == 400  # buckets of 5 steps, as the timeline's
    assert "One point per 5 steps" in text
    # The bucket of steps 5–9 holds the most live of them (step 8 onwards: flat) and says how many it folds.
    assert page.title_after("mem-5").startswith(f"steps 5–9: {svg_charts.format_bytes(event_logs.live_bytes(8))} "
                                               "live at the end") and "the most of 5 sampled steps" in \
        page.title_after("mem-5")


def test_inputs_without_memory_samples_say_so_and_draw_no_memory_chart(capsys, tmp_path):
    lines = [line for line in event_logs.synthetic_log(6).splitlines()]
    stripped = []
    for line in lines:
        record = json.loads(line)
        record.pop("device_bytes", None), record.pop("peak_device_bytes", None)
        stripped.append(json.dumps(record))
    page, text = _page(capsys, write(tmp_path, "old.events.jsonl", "\n".join(stripped) + "\n"))
    assert "memory" not in {c["id"] for c in page.having("svg", "chart")}
    assert "holds no device memory per step" in text
    _, metrics = _page(capsys, fixture_path("dynamic_shape.metrics.txt"))
    assert "device memory per step are not in it" in metrics and 'id="memory"' not in metrics


def test_memory_growing_finding_links_to_the_memory_chart(capsys, tmp_path):
    from xladev.schema import records as rec

    lines = event_logs.synthetic_log(20).splitlines()
    growing = rec.MemoryGrowing(t=1, step=12, from_step=6, from_bytes=40 * event_logs.MIB,
                                to_bytes=46 * event_logs.MIB, per_step_bytes=float(event_logs.MIB),
                                holders=[{"kind": "batch", "line": event_logs.READ_SITE,
                                          "per_step_bytes": float(event_logs.MIB), "buffers": 1}])
    lines.insert(-1, rec.dumps(growing))
    _, text = _page(capsys, write(tmp_path, "run.events.jsonl", "\n".join(lines) + "\n"))
    finding = text[text.index("memory-growing</div>"):]
    assert 'href="#memory"' in finding[:finding.index('class="fix"')]


def test_graph_table_says_what_each_graph_holds_while_it_runs(capsys, tmp_path):
    from xladev.schema import memory

    path = write(tmp_path, "run.events.jsonl", event_logs.synthetic_log(20))
    page, text = _page(capsys, path)
    need = memory.need_bytes(event_logs.COMPILE_MEMORY)
    assert need == 10 * event_logs.MIB + 64 * 1024
    cells = re.findall(r'<td class="r mono" data-v="(\d+)">([^<]+)</td></tr>', text)
    assert cells == [(str(need), svg_charts.format_bytes(need))] * 3  # its last column, one row per graph


def test_graph_table_sorts_in_the_page_and_links_each_graph_to_its_ir(capsys, tmp_path):
    path = write(tmp_path, "run.events.jsonl", event_logs.synthetic_log(20))
    page, text = _page(capsys, path)
    assert len(page.having("table", "sortable")) == 1 and "<script>" in text
    for index in range(3):
        assert f'href="#ir-{index}"' in text and f"ir-{index}" in page.ids()
    assert "xla::device_data()" in text  # the IR itself
    # No table to sort: no script.
    _, plain = _page(capsys, fixture_path("dynamic_shape.metrics.txt"))
    assert "<script>" not in plain


def test_text_from_the_log_is_escaped_everywhere_it_is_drawn(capsys, tmp_path):
    evil = '</title><script>alert(1)</script> "q" a b'
    as_json = json.dumps(evil)[1:-1]
    log = event_logs.synthetic_log(20).replace(event_logs.FALLBACK_SITE, as_json).replace("ab12aaaaaaaaaaaa", as_json)
    page, text = _page(capsys, write(tmp_path, "evil.events.jsonl", log))
    assert "<script>alert" not in text and "&lt;/title&gt;&lt;script&gt;" in text
    assert len(page.having("a", "fallback")) == 1  # still drawn, with its site as text
    assert '"q" a b: aten::nonzero ×1' in page.title_after("mark-fallback-11")  # the site, short_site's way
    assert set(re.findall(r'href="#([^"]+)"', text)) <= page.ids()


def test_metrics_file_says_what_is_estimated_and_missing(capsys):
    page, text = _page(capsys, fixture_path("dynamic_shape.metrics.txt"))
    marks = page.having("a", "compile")
    assert len(marks) == 24  # the fixture compiles once in each of its 24 steps
    assert len(page.having("g", "bar")) == 23  # a bar per report after the first: the growth between two
    assert "wall time per step, the sites and causes of the marks" in text and "estimated" in text
    assert "Per graph: only an xladev event log" in text


def test_debug_log_marks_compiles_without_step_times(capsys):
    page, text = _page(capsys, fixture_path("dynamic_shape.debug.txt"))
    assert page.having("g", "bar") == [] and len(page.having("a", "compile")) > 0
    assert "no times and no device memory, so the timeline has marks but no step times" in text


def test_compare_draws_both_runs_on_one_axis(capsys, tmp_path):
    a = write(tmp_path, "a.events.jsonl", event_logs.synthetic_log(20))
    b_text = event_logs.synthetic_log(20, slow_ns=5_000_000).replace('"pid":4242', '"pid":99')
    b = write(tmp_path, "b.events.jsonl", b_text)
    page, text = _page(capsys, "--compare", a, b)
    assert "compare-timeline" in page.ids()
    assert len(page.having("polyline", "line-a")) == 1 and len(page.having("polyline", "line-b")) == 1
    ids = [attrs["id"] for _, attrs in page.elements if "id" in attrs]
    assert len(ids) == len(set(ids))  # A's and B's marks and charts have their own ids
    assert {"a-mark-compile-5", "b-mark-compile-5", "a-timeline", "b-timeline"} <= set(ids)
    assert "taller steps run off the top" in text  # the compiles do not flatten the steady steps


def test_ranks_chart_draws_the_straggler_thickest(capsys, tmp_path):
    write(tmp_path, "job.events.jsonl.0", event_logs.synthetic_log(30, rank=0, world_size=2, wait_ns=30_000_000))
    write(tmp_path, "job.events.jsonl.1", event_logs.synthetic_log(30, rank=1, world_size=2, slow_ns=30_000_000))
    page, text = _page(capsys, tmp_path / "job.events.jsonl")
    assert [a["id"] for a in page.having("g", "rank")] == ["rank-0", "rank-1"]
    assert [a["id"] for a in page.having("g", "straggler")] == ["rank-1"]
    assert 'href="#rank-1">rank 1 on the per-rank chart' in text
    # The time by part: a bar per rank on one scale.
    tips = [page.texts[i] for i, (t, _) in enumerate(page.elements) if t == "title" and i
            and "part" in page.elements[i - 1][1].get("class", "")]
    assert {tip.split(":")[0] for tip in tips} == {"rank 0", "rank 1"}


def test_ranks_chart_shows_a_compile_one_rank_has_alone(capsys, tmp_path):
    write(tmp_path, "job.events.jsonl.0", event_logs.synthetic_log(30, rank=0, world_size=2))
    write(tmp_path, "job.events.jsonl.1", event_logs.synthetic_log(
        30, rank=1, world_size=2, recompile_steps=(*event_logs.RECOMPILE_STEPS, 22)))
    page, text = _page(capsys, tmp_path / "job.events.jsonl")
    compiles = {rank: sorted(int(g["id"].rsplit("-", 1)[1]) for g in page.having("g", "mark")
                             if g["id"].startswith(f"rank-{rank}-mark-compile-")) for rank in (0, 1)}
    assert compiles == {0: [0, 5, 13], 1: [0, 5, 13, 22]}
    assert set(re.findall(r'href="#([^"]+)"', text)) <= page.ids()  # every link in the page has its target
    assert "rank-recompiles" in text or "graph-divergence" in text  # the findings say it too


def test_long_run_is_drawn_per_bucket_and_keeps_every_event(capsys, tmp_path):
    steps, every = 5_000, 10
    path = write(tmp_path, "long.events.jsonl", event_logs.synthetic_log(steps, marks_every=every))
    page, text = _page(capsys, path)
    bars = page.having("g", "bar")
    assert len(bars) == math.ceil(steps / math.ceil(steps / MAX_BARS)) == 385  # buckets of 13 steps
    def total(pattern: str) -> int:
        return sum(int(m.group(1).replace(",", "")) for m in re.finditer(pattern, text))

    # Every read counted once in the marks' tooltips; per site again in the tooltips and in the marks table.
    assert total(r"device→host read ×([\d,]+)") == steps // every
    assert total(r"\.item\(\) ×([\d,]+)") == 2 * (steps // every)


def test_steps_past_the_logs_step_time_bound_keep_their_marks_and_say_so(capsys, tmp_path, monkeypatch):
    from xladev.report import eventlog_input, glance

    monkeypatch.setattr(eventlog_input, "MAX_STEP_TIMES", 10)
    monkeypatch.setattr(glance, "MAX_STEP_TIMES", 10)
    page, text = _page(capsys, write(tmp_path, "run.events.jsonl", event_logs.synthetic_log(20)))
    assert len(page.having("g", "bar")) == 10
    assert {"mark-compile-13", "mark-graph-break-15"} <= page.ids()
    assert "keeps the times of its first 10 steps" in text


def test_event_log_with_nothing_to_draw_says_so(capsys, tmp_path):
    header = event_logs.synthetic_log(0).splitlines()[0]
    code = main(["report", write(tmp_path, "empty.events.jsonl", header + "\n"), "--format", "html"])
    out = capsys.readouterr().out
    assert code == 2  # no complete record; the page is still written
    assert "holds no step and no compile" in out and "only an xladev event log" not in out


def test_run_resumed_at_a_late_step_gets_a_bar_per_step(capsys, tmp_path):
    # A run resumed from a checkpoint numbers its steps from there: 20 steps from 5,000 are 20 bars, not 20 steps
    # squeezed into the buckets of 5,020.
    log = re.sub(r'"step":(\d+)', lambda m: f'"step":{int(m.group(1)) + 5000}', event_logs.synthetic_log(20))
    page, _ = _page(capsys, write(tmp_path, "resumed.events.jsonl", log))
    assert sorted(int(g["id"].split("-")[1]) for g in page.having("g", "bar")) == list(range(5000, 5020))
    assert "mark-compile-5005" in page.ids()


def test_mark_log_merges_into_wider_buckets_without_losing_events():
    log = MarkLog(max_marks=8)
    for step in range(100):
        log.add(step, "transfer", "train.py:20 (train)", ".item()", line=step + 1, ns=10.0)
    marks = log.marks()
    assert len(marks) <= 8 and log.stride == 16
    assert sum(m.count for m in marks) == 100 and sum(m.ns for m in marks) == 1000.0
    assert [(m.step, m.steps) for m in marks[:2]] == [(0, 16), (16, 16)]
    assert marks[0].line == 1  # the first event's line survives the merge


def _lightness(colour: str) -> float:
    """Relative luminance (Rec. 709 weights, as a grey print or screen renders colour)."""
    r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_parts_and_marks_hold_in_grey():
    # Two parts with the same fill kind (plain, or the same pattern) must differ in lightness by a fifth of the
    # range; otherwise they differ in pattern. Marks differ in shape.
    styles = svg_charts.PART_STYLE
    for first in styles:
        for second in styles:
            if first < second:
                same_texture = bool(styles[first][1]) == bool(styles[second][1]) and (
                    not styles[first][1] or svg_charts._PATTERN_PATHS[first] == svg_charts._PATTERN_PATHS[second])
                if same_texture:
                    assert abs(_lightness(styles[first][0]) - _lightness(styles[second][0])) >= 0.2, (first, second)
    assert len({shape for shape, _ in svg_charts.MARK_SHAPES.values()}) == len(KINDS)


def test_ranks_chart_shows_every_kind_of_mark_per_rank(capsys, tmp_path):
    # Rank 0 has the synthetic run's graph break; rank 1 none, but a read every 5 steps: each rank's rows show its own.
    write(tmp_path, "job.events.jsonl.0", event_logs.synthetic_log(40, rank=0, world_size=2))
    write(tmp_path, "job.events.jsonl.1", event_logs.synthetic_log(40, rank=1, world_size=2, marks_every=5))
    page, text = _page(capsys, tmp_path / "job.events.jsonl")
    marks = {rank: {g["id"][len(f"rank-{rank}-mark-"):] for g in page.having("g", "mark")
                    if g["id"].startswith(f"rank-{rank}-mark-")} for rank in (0, 1)}
    kinds = {rank: {mark.rsplit("-", 1)[0] for mark in marks[rank]} for rank in (0, 1)}
    assert {"compile", "transfer", "fallback"} <= kinds[1] and "graph-break" not in kinds[1], kinds
    assert "graph-break" in kinds[0], kinds
    assert {f"transfer-{step}" for step in range(4, 40, 5)} <= marks[1], marks[1]
    assert "rank 0 graph break" in text and "rank 1 graph break" not in text
    assert re.search(r"rank 1: [^;]+ in steps, compiles in [^;]+; device→host reads in step 4, step 9", text)


@pytest.mark.parametrize("first, last", [(-(2**70), 12), (0, 10**30), (-5, 5), (7, 7), (1, 400), (399, 1198)])
def test_steps_of_any_size_make_at_most_the_bars_asked_for(first, last):
    # Found by the fuzz test: a damaged log's step of -2**70 next to step 12 once took the bucket search
    # minutes, one step wider at a time.
    from xladev.report.glance import bucket_for

    bucket = bucket_for(first, last, 400)
    assert bucket >= 1 and last // bucket - first // bucket + 1 <= 400
    if last - first < 400:
        assert bucket == 1
