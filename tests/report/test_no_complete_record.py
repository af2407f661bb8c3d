"""Inputs with nothing complete in them, and damaged inputs: never a healthy verdict.

An input with no complete record (empty, binary, a gzip cut or corrupt before its first record, a
metrics file cut inside its first report, an event log with only its header) gets the verdict
``unknown`` with the reason, in every format, and exit status 2. A damaged input that still holds
complete records is judged on them, with a ``damaged-input`` warning saying where the damage is.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest

from xladev.cli.main import main
from xladev.report import load
from xladev.report.model import UnreadableInputError

from tests.report.helpers import counter_block, fixture_path, metric_block, write

EVENT_LOG = Path(__file__).resolve().parents[1] / "tui" / "fixtures" / "fixture_run.jsonl"


def _run(capsys, *argv):
    code = main(["report", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _verdict(out: str) -> str:
    """The text view's verdict and headline (the lines from the verdict to the summary), unwrapped."""
    lines = out.split("\nInput", 1)[0].splitlines()
    first = next(i for i, line in enumerate(lines) if line.split()[:1] in (["UNKNOWN"], ["WARNING"], ["HEALTHY"]))
    return " ".join(" ".join(lines[first:]).split())


def _cut_before_first_record(data: bytes, first_record_end: int, seen: bytes) -> bytes:
    """A gzip of `data` cut mid-stream where what still decompresses ends inside the first record,
    after `seen` (so the reader has part of a record in hand, not nothing)."""
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    for cut in range(11, len(packed)):
        out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(packed[:cut])
        if seen in out:
            assert len(out) < first_record_end, "the stream gives out a whole record at once"
            return packed[:cut]
    raise AssertionError("no cut gives part of the first record")


def _corrupt_at_start(data: bytes) -> bytes:
    packed = bytearray(gzip.compress(data, mtime=0))
    packed[12:28] = bytes(16)  # the first block's header: zlib fails before it gives out a byte
    return bytes(packed)


def _metrics_text() -> bytes:
    return fixture_path("healthy.metrics.txt").read_bytes()


def _zero_record_inputs() -> dict[str, tuple[bytes, str]]:
    """name -> (file content, what the reason must say)."""
    metrics = _metrics_text()
    first_record = metrics.find(b"\n[MetricsData", 1)
    log = EVENT_LOG.read_bytes()
    header = log[:log.index(b"\n") + 1]
    debug = fixture_path("healthy.debug.txt").read_bytes()
    return {
        "gzip metrics cut in its first record": (_cut_before_first_record(metrics, first_record, b"  TotalSamples: "),
                                                 "the gzip data ends early"),
        "gzip metrics corrupt at the start": (_corrupt_at_start(metrics), "the gzip data is corrupt"),
        "gzip debug log corrupt at the start": (_corrupt_at_start(debug), "the gzip data is corrupt"),
        "gzip event log cut in its header": (_cut_before_first_record(log, len(header), b'"pid"'),
                                             "the gzip data ends early"),
        "plain event log cut in its header": (header[:len(header) // 2], "no PyTorch/XLA metrics report"),
        "plain debug log cut in its first line": (debug[:debug.index(b"Analysis")], "no PyTorch/XLA metrics report"),
        "plain metrics cut in its first record": (metrics[:metrics.index(b"  Accumulator") + 20], "cut short"),
        "event log with only its header": (header, "no events after its header"),
        "empty file": (b"", "empty file"),
        "empty gzip": (gzip.compress(b"", mtime=0), "nothing in it once decompressed"),
        "binary garbage": (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 40, "binary data"),
    }


_ZERO_RECORD_NAMES = ["gzip metrics cut in its first record", "gzip metrics corrupt at the start",
                      "gzip debug log corrupt at the start", "gzip event log cut in its header",
                      "plain metrics cut in its first record", "plain event log cut in its header",
                      "plain debug log cut in its first line", "event log with only its header", "empty file",
                      "empty gzip", "binary garbage"]


@pytest.mark.parametrize("name", _ZERO_RECORD_NAMES)
def test_no_complete_record_is_unknown_with_the_reason_in_every_format(capsys, tmp_path, name):
    content, reason = _zero_record_inputs()[name]
    path = write(tmp_path, "input.gz" if content[:2] == b"\x1f\x8b" else "input.txt", content)
    code, out, err = _run(capsys, path)
    assert code == 2, (name, out, err)
    assert _verdict(out).startswith("UNKNOWN No complete record") and reason in _verdict(out), (name, out)
    assert "HEALTHY" not in out and "Traceback" not in out + err
    assert err.count("\n") == 1 and err.startswith("xladev report: error: ") and reason in err, err
    for level in ("warning", "error"):
        assert _run(capsys, path, "--fail-on", level)[0] == 2, (name, level)
    code, out, _ = _run(capsys, path, "-f", "json")
    data = json.loads(out)
    assert code == 2 and data["verdict"] == "unknown" and reason in data["headline"], (name, data["headline"])
    assert [f["rule"] for f in data["findings"]] == ["no-complete-record"]
    assert reason in data["inputs"][0]["problem"]
    # An empty file is what XLA_METRICS_FILE stays when no step was ever marked: the finding says so.
    assert (name == "empty file") == any("no step was ever marked" in line for line in data["findings"][0]["evidence"])
    for fmt in ("markdown", "html"):
        code, out, _ = _run(capsys, path, "-f", fmt)
        assert code == 2 and reason in out and "UNKNOWN" in out, (name, fmt)


def test_load_still_raises_for_an_input_with_no_complete_record(tmp_path):
    with pytest.raises(UnreadableInputError, match="empty file"):
        load(write(tmp_path, "empty.txt", b""))


def test_a_complete_report_of_zero_steps_is_unknown_and_fails_the_warning_gate(capsys, tmp_path):
    """Printed before the first step: a whole report, but nothing ran, so nothing shows the run is healthy."""
    path = write(tmp_path, "before.txt", counter_block("CreateXlaTensor", 4) + counter_block("MarkStep", 0))
    report = load(path)
    assert report.verdict() == "unknown" and "healthy" not in {f.rule for f in report.findings}
    code, out, _ = _run(capsys, path)
    assert code == 0 and _verdict(out).startswith("UNKNOWN")
    assert _run(capsys, path, "--fail-on", "warning")[0] == 1
    assert _run(capsys, path, "--fail-on", "error")[0] == 0  # no error can hide in it: errors need no step count


def test_unknown_for_want_of_a_step_count_fails_the_warning_gate_only(capsys, tmp_path):
    text = (metric_block("CompileTime", 3, 6e9) + metric_block("ExecuteTime", 300, 1e9)
            + counter_block("UncachedCompile", 3))
    path = write(tmp_path, "pasted.txt", text)
    assert _run(capsys, path)[0] == 0
    assert _run(capsys, path, "--fail-on", "warning")[0] == 1
    assert _run(capsys, path, "--fail-on", "error")[0] == 0


def _damaged(data: bytes) -> dict[str, bytes]:
    """The gzip of `data` cut in its middle, and with 16 bytes zeroed in its middle."""
    packed = gzip.compress(data, compresslevel=1, mtime=0)
    middle = len(packed) // 2
    corrupt = bytearray(packed)
    corrupt[middle:middle + 16] = bytes(16)
    return {"truncated": packed[:middle], "corrupt": bytes(corrupt)}


@pytest.mark.parametrize("kind", ["truncated", "corrupt"])
def test_damaged_gzip_metrics_file_is_judged_on_its_complete_records_with_a_warning(capsys, tmp_path, kind):
    path = write(tmp_path, f"{kind}.metrics.txt.gz", _damaged(_metrics_text())[kind])
    report = load(path)
    source = report.sources[0]
    assert 0 < source.snapshots < 24
    # Exactly what the undamaged file says up to that record: corrupt data that decoded as garbled text
    # before zlib noticed (here only at the checksum) is not read, nor is the record it cut.
    text = _metrics_text()
    records = text.split(b"[MetricsData; step=")[1:source.snapshots + 1]
    clean = load(write(tmp_path, "clean.txt", b"".join(b"[MetricsData; step=" + r for r in records)))
    assert source.final.counters == clean.sources[0].final.counters
    assert source.series.columns() == clean.sources[0].series.columns()
    if kind == "corrupt":
        assert "the text is garbled from line" in source.damage
    damaged = next(f for f in report.findings if f.rule == "damaged-input")
    assert damaged.severity == "warning" and report.verdict() == "warning"
    assert f"{source.snapshots} complete metrics reports" in " ".join(damaged.evidence)
    assert "healthy" not in {f.rule for f in report.findings}
    code, out, err = _run(capsys, path, "--width", "400")
    assert code == 0 and err == "" and _verdict(out).startswith("WARNING")
    assert f"{path} is damaged: the gzip data" in _verdict(out) and "Traceback" not in out
    assert _run(capsys, path, "--fail-on", "warning")[0] == 1
    assert _run(capsys, path, "--fail-on", "error")[0] == 0
    data = json.loads(_run(capsys, path, "-f", "json")[1])
    assert data["verdict"] == "warning" and data["inputs"][0]["damage"].startswith("the gzip data")


def test_damaged_gzip_event_log_is_judged_on_its_complete_records_with_a_warning(tmp_path):
    lines = EVENT_LOG.read_text().splitlines()
    padded = [lines[0]] + [line for line in lines[1:-1] for _ in range(30)]
    for kind, content in _damaged(("\n".join(padded) + "\n").encode()).items():
        report = load(write(tmp_path, f"{kind}.jsonl.gz", content))
        assert report.sources[0].input_kind == "event-log" and report.sources[0].final is not None, kind
        assert report.verdict() in ("warning", "error"), kind
        assert any(f.rule == "damaged-input" and f.severity == "warning" for f in report.findings), kind


def test_an_unreadable_input_beside_a_good_one_is_a_warning_not_a_stop(capsys, tmp_path):
    garbage = write(tmp_path, "debug.bin", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 40)
    code, out, err = _run(capsys, fixture_path("healthy.metrics.txt"), garbage, "--width", "400")
    assert code == 0 and err == "" and _verdict(out).startswith("WARNING")
    assert f"{garbage} could not be read: binary data" in _verdict(out)
    assert _run(capsys, fixture_path("healthy.metrics.txt"), garbage, "--fail-on", "warning")[0] == 1


def test_every_verdict_badge_of_the_html_report_has_a_colour(capsys, tmp_path):
    """The badge's text is white: a verdict without a background of its own (unknown had none) is invisible."""
    import re

    from xladev.analysis import VERDICT_LABELS

    code, html, _ = _run(capsys, write(tmp_path, "empty.txt", b""), "-f", "html")
    assert code == 2 and '<span class="verdict unknown">UNKNOWN</span>' in html
    css = html[html.index("<style>"):html.index("</style>")]
    coloured = {name for selectors, _ in re.findall(r"([.\w,]+)\{background:(#[0-9a-f]{6})\}", css)
                for name in selectors.split(",") if name.startswith(".")}
    assert {f".{verdict}" for verdict in VERDICT_LABELS} <= coloured, coloured


def test_comparing_with_a_run_that_has_no_complete_record_is_one_error_line(capsys, tmp_path):
    """Two event logs of different runs are compared; one with only its header cannot be: exit 2, and no
    report of the other run alone passed off as the answer."""
    log = EVENT_LOG.read_text()
    header = json.loads(log.splitlines()[0])
    header["pid"] += 1  # another run
    other = write(tmp_path, "b.events.jsonl", json.dumps(header) + "\n")
    code, out, err = _run(capsys, write(tmp_path, "a.events.jsonl", log), other)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "b.events.jsonl: an xladev event log with no events after its header" in err


def test_a_gzip_whose_only_damage_is_its_checksum_claims_no_garbled_line(tmp_path):
    """Every byte decodes right, only the CRC at the end is wrong: the report warns about the damage, drops
    the last report (nothing says it ended where the data stops) and does not call any line garbled."""
    packed = bytearray(gzip.compress(_metrics_text(), mtime=0))
    packed[-8:-4] = bytes(b ^ 0xFF for b in packed[-8:-4])  # the CRC32 of the gzip trailer
    source = load(write(tmp_path, "crc.metrics.txt.gz", bytes(packed))).sources[0]
    assert source.damage.startswith("the gzip data is corrupt") and "incorrect data check" in source.damage
    assert "garbled" not in source.damage and source.snapshots == 23 and source.final.step == 22
