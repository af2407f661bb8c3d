"""`xladev report` end to end: formats, output files, exit codes, comparisons and ranks."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from xladev.cli.main import main

from tests.report.helpers import fixture_path, metrics_file, step_report, write

VOID_TAGS = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}


def _run(capsys, *argv):
    code = main(["report", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


class _StrictHTML(HTMLParser):
    """Checks that tags nest and close, and collects anything that would load another file."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.external: list[str] = []
        self.fragments: list[str] = []
        self.ids: set[str] = set()
        self.tags: set[str] = set()
        self.doctype = False

    def handle_decl(self, decl):
        self.doctype = decl.lower() == "doctype html"

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        # A link inside the page (`#id`) loads nothing; any other address would.
        self.external += [f"{tag} {name}={value}" for name, value in attrs if name in ("src", "href", "srcset")
                          and not (name == "href" and value.startswith("#"))]
        self.fragments += [value[1:] for name, value in attrs if name == "href" and value.startswith("#")]
        self.ids |= {value for name, value in attrs if name == "id"}
        if tag not in VOID_TAGS:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()


def test_text_view_summary_first_and_fits_80_columns(capsys):
    code, out, err = _run(capsys, fixture_path("item_every_step.metrics.txt"))
    assert code == 0 and err == ""
    assert max(len(line) for line in out.splitlines()) <= 80
    assert out.index("WARNING") < out.index("Findings") < out.index("Key metrics")
    assert "\x1b[" not in out  # no colour when not writing to a terminal


def test_fail_on_levels(capsys):
    assert _run(capsys, fixture_path("healthy.metrics.txt"), "--fail-on", "warning")[0] == 0
    assert _run(capsys, fixture_path("item_every_step.metrics.txt"), "--fail-on", "warning")[0] == 1
    assert _run(capsys, fixture_path("item_every_step.metrics.txt"), "--fail-on", "error")[0] == 0
    assert _run(capsys, fixture_path("dynamic_shape.metrics.txt"), "--fail-on", "error")[0] == 1


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 40, "binary data"),
    (b"hello\nworld\n", "no PyTorch/XLA metrics report"),
], ids=["missing", "binary", "no report"])
def test_unreadable_input_exits_2_with_one_line(capsys, tmp_path, content, message):
    path = tmp_path / "input.txt"
    if content is not None:
        path.write_bytes(content)
    code, out, err = _run(capsys, path)
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert err.startswith("xladev report: error: ")
    # A file that is there is still reported, as unknown with the reason; a missing one is not.
    assert out == "" if content is None else ("UNKNOWN" in out and message in out)


def test_directory_and_unwritable_output_exit_2(capsys, tmp_path):
    assert _run(capsys, tmp_path)[0] == 2
    code, _, err = _run(capsys, fixture_path("healthy.metrics.txt"), "-o", tmp_path / "missing" / "out.md")
    assert code == 2 and "cannot write" in err


def compile_time_total(data: dict) -> float:
    return next(m for m in data["metrics"] if m["name"] == "CompileTime")["accumulator"]


def test_json_schema(capsys, tmp_path):
    out_path = tmp_path / "report.json"
    code, out, _ = _run(capsys, fixture_path("fallback.metrics.txt"), fixture_path("fallback.debug.txt"),
                        "--format", "json", "-o", out_path)
    assert code == 0 and out == ""
    data = json.loads(out_path.read_text())
    assert data["schema"] == "xladev.report/1" and data["verdict"] == "warning"
    assert [item["contents"] for item in data["inputs"]] == [["XLA_METRICS_FILE, 24 step records"], ["PT_XLA_DEBUG log"]]
    assert data["summary"]["steps"] == 24 and data["summary"]["fallback_calls"] == 48
    finding = next(f for f in data["findings"] if f["subject"] == "aten::nonzero")
    assert set(finding) == {"rule", "severity", "title", "detail", "fix", "evidence", "numbers", "sources", "subject",
                            "cost_ns", "saving"}
    # Estimated from the metrics' accumulated times: the compile part is the CompileTime accumulator.
    (time,) = data["time"]
    assert time["exact"] is True and time["wall_ns"] is None and time["parts"]["compile"] == compile_time_total(data)
    compile_time = next(m for m in data["metrics"] if m["name"] == "CompileTime")
    assert compile_time["unit"] == "ns" and compile_time["percentiles"]["99%"] > 0
    assert len(data["steps"][0]["columns"]["steps"]) == 24
    assert data["compile_sites"][0]["site"].endswith("scenarios.py:22")
    assert data["auto_metrics"][0] == "CompileTime too frequent: 13 counts during 24 steps"
    assert data["warnings"] == [] and data["warning_count"] == 0


def test_markdown(capsys):
    code, out, _ = _run(capsys, fixture_path("dynamic_shape.metrics.txt"), "--format", "markdown")
    assert code == 0
    assert out.startswith("# xladev report:") and "**ERROR**" in out
    assert "## Findings" in out and "**Fix:**" in out and "| Metric | Samples | Total | Mean |" in out


def test_html_is_well_formed_and_self_contained(capsys, tmp_path):
    out_path = tmp_path / "report.html"
    code, _, _ = _run(capsys, fixture_path("fallback.metrics.txt"), fixture_path("fallback.debug.txt"),
                      "--format", "html", "-o", out_path)
    assert code == 0
    text = out_path.read_text()
    parser = _StrictHTML()
    parser.feed(text)
    parser.close()
    assert parser.doctype and parser.stack == []
    assert parser.external == []
    assert set(parser.fragments) <= parser.ids  # every link inside the page has its target
    assert not parser.tags & {"link", "img", "iframe", "object"}  # a script is inline (no src: external above)
    assert text.count("url(") == text.count("url(#") and "@import" not in text  # fills from the page's patterns
    assert "aten::median.dim_values runs on the CPU" in text


def test_html_escapes_input_text(capsys, tmp_path):
    text = metrics_file([step_report(s, compiles=1, fallbacks={"aten::<script>alert(1)</script>": s + 1})
                         for s in range(3)])
    path = write(tmp_path, "evil.txt", text)
    code, out, _ = _run(capsys, path, "--format", "html")
    assert code == 0 and "<script>" not in out and "&lt;script&gt;" in out


def test_two_runs_are_compared(capsys):
    code, out, _ = _run(capsys, fixture_path("healthy.metrics.txt"), fixture_path("dynamic_shape.metrics.txt"),
                        "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["schema"] == "xladev.report.compare/1"
    compiles = next(row for row in data["rows"] if row["item"] == "compiles per step")
    assert compiles["verdict"] == "worse" and compiles["ratio"] == 24
    assert data["a"]["verdict"] == "healthy" and data["b"]["verdict"] == "error"
    assert data["a"]["name"] == str(fixture_path("healthy.metrics.txt"))
    code, out, _ = _run(capsys, fixture_path("dynamic_shape.metrics.txt"), fixture_path("healthy.metrics.txt"),
                        "--fail-on", "warning")
    assert code == 0  # B (healthy) decides the exit status
    # The title names the runs by what tells them apart, so it fits one line however deep the folders are.
    assert out.splitlines()[0].strip() == "xladev report: dynamic_shape.metrics.txt vs healthy.metrics.txt"
    assert "".join(out.split()).count(str(fixture_path("healthy.metrics.txt")).replace(" ", "")) == 1  # row B, folded


def test_compare_title_keeps_what_tells_runs_apart(capsys, tmp_path):
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 6)
    first, second = deep / "run1" / "metrics.txt", deep / "run2" / "metrics.txt"
    for path, compiles in ((first, lambda s: 1), (second, lambda s: s + 1)):
        path.parent.mkdir(parents=True)
        path.write_text(metrics_file([step_report(s, compiles=compiles(s)) for s in range(3)]))
    code, out, _ = _run(capsys, str(first), str(second))
    assert code == 0
    assert out.splitlines()[0].strip() == "xladev report: run1/metrics.txt vs run2/metrics.txt"


def test_same_run_inputs_are_not_compared(capsys):
    code, out, _ = _run(capsys, fixture_path("healthy.metrics.txt"), fixture_path("healthy.stdout.txt"))
    assert code == 0 and " vs " not in out.splitlines()[0] and "HEALTHY" in out
    code, out, _ = _run(capsys, fixture_path("healthy.metrics.txt"), fixture_path("dynamic_shape.metrics.txt"),
                        "--single-run")
    assert " vs " not in out.splitlines()[0]
    code, _, err = _run(capsys, fixture_path("healthy.metrics.txt"), "--compare")
    assert code == 2 and "exactly two" in err


def test_ranks_are_lined_up_and_a_diverging_rank_is_flagged(capsys, tmp_path):
    for rank in range(4):
        compiles = (lambda step: 1 + step // 2) if rank == 2 else (lambda step: 1)
        write(tmp_path, f"metrics.txt.{rank}", metrics_file([step_report(s, compiles=compiles(s)) for s in range(16)]))
    code, out, _ = _run(capsys, tmp_path / "metrics.txt", "--format", "json")
    data = json.loads(out)
    assert [item["rank"] for item in data["inputs"]] == [0, 1, 2, 3]
    divergence = [f for f in data["findings"] if f["rule"] == "rank-divergence"]
    assert [f["numbers"]["rank"] for f in divergence] == [2]
    recompile = next(f for f in data["findings"] if f["rule"] == "recompilation")
    assert "on rank 2" in recompile["evidence"]
    code, out, _ = _run(capsys, tmp_path / "metrics.txt")
    assert "Ranks" in out and "rank-divergence" in out
