"""Every grammar variant of FORMATS.md section 1, written by hand, and the input containers."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from xladev.report import load
from xladev.schema import units
from xladev.report.inputs import expand_rank_paths, rank_of, read_source
from xladev.report.model import SourceResult, UnreadableInputError
from xladev.report.names import canonical_numbers
from xladev.report.text_reader import TextReader

from tests.report.helpers import counter_block, metric_block, metrics_file, step_report, write

XRT_REPORT = """\
Metric: CompileTime
  TotalSamples: 202
  Counter: 06m09s401ms746.001us
  ValueRate: 778ms572.062us / second
  Rate: 0.425201 / second
  Percentiles: 1%=001ms32.778us; 5%=001ms61.283us; 10%=001ms79.236us; 20%=001ms110.973us; 50%=001ms228.773us; \
80%=001ms339.183us; 90%=001ms434.305us; 95%=002ms921.063us; 99%=21s102ms853.173us
Metric: XrtExecute
  TotalSamples: 30
  Counter: 60s700ms000.000us
  Mean: 02s023ms333.333us
  StdDev: 191ms81.607us
  Percentiles: 25%=01s000ms000.000us; 50%=02s000ms000.000us; 80%=03s000ms000.000us; 90%=03s500ms000.000us; \
95%=03s700ms000.000us; 99%=03s900ms000.000us
Metric: TransferFromServerTime
  TotalSamples: 12
  Counter: 012ms000.000us
  Percentiles: 50%=001ms000.000us
Metric: InboundData
  TotalSamples: 0
  Accumulator: nanB
  Percentiles: \n\
Counter: CachedSyncTensors
  Value: 395
Counter: MarkStep
  Value: 11
Counter: XrtCompile
  Value: 3
Counter: aten::_ctc_loss
  Value: 11
"""


def _read(text: str, name: str = "input.txt", fast: bool = True) -> SourceResult:
    source = SourceResult(path=name, name=name)
    reader = TextReader(source)
    reader.read_stream(io.BytesIO(text.encode()), use_fast_path=fast)
    reader.finish()
    return source


def test_xrt_era_report_with_counter_lines_mean_stddev_and_old_names():
    source = _read(XRT_REPORT)
    assert source.warnings == []
    compile_time = source.final.metrics["CompileTime"]
    assert compile_time.accumulator == 369_401_746_001
    assert compile_time.percentiles[1] == ("5%", 1_061_283)
    execute = source.final.metrics["XrtExecute"]
    assert execute.accumulator == 60_700_000_000 and execute.stddev == 191_081_607
    assert execute.mean == 2_023_333_333 and [label for label, _ in execute.percentiles] == [
        "25%", "50%", "80%", "90%", "95%", "99%"]
    inbound = source.final.metrics["InboundData"]
    assert inbound.kind == units.BYTES and inbound.accumulator != inbound.accumulator and inbound.percentiles == []
    final = source.final
    samples = {name: block.total_samples for name, block in final.metrics.items()}
    accumulators = {name: block.accumulator for name, block in final.metrics.items()}
    numbers = canonical_numbers(final.counters, samples, accumulators)
    assert numbers["transfers_from_device"] == 12 and numbers["cached_compiles"] == 395
    assert numbers["compiles"] == 202 and numbers["executions"] == 30 and numbers["fallback_calls"] == 11


def test_xrt_era_report_is_diagnosed(tmp_path):
    report = load(write(tmp_path, "xrt.txt", XRT_REPORT))
    rules_found = {f.rule for f in report.findings}
    assert {"recompilation", "host-transfers", "cpu-fallback"} <= rules_found


@pytest.mark.parametrize("prefix", ["I0612 12:00:00.123456  4242 train.py:88] ", "INFO:root:", "[rank0]: ",
                                    "2024-05-01 10:11:12,345 - trainer - INFO - "])
def test_log_prefix_on_every_line(prefix):
    clean = metrics_file([step_report(step, compiles=1) for step in range(3)])
    prefixed = "".join(prefix + line + "\n" for line in clean.splitlines())
    plain, logged = _read(clean), _read(prefixed)
    assert logged.warnings == []
    assert logged.snapshots == plain.snapshots == 3 and logged.step_records == 3
    assert logged.final.counters == plain.final.counters
    assert {n: b.accumulator for n, b in logged.final.metrics.items()} == {
        n: b.accumulator for n, b in plain.final.metrics.items()}
    assert logged.series.columns()["steps"] == [1.0, 2.0, 3.0]


def test_report_glued_to_the_end_of_a_printed_line():
    report = step_report(23, compiles=2, items=24, transfers=24)
    text = "step 22 loss 1.3523\nstep 23 loss 1.3471" + report + "done\n"
    source = _read(text)
    assert source.warnings == []
    assert source.final.counters["aten::_local_scalar_dense"] == 24
    assert source.final.metrics["CompileTime"].total_samples == 2
    assert source.other_lines == 2  # the two printed lines; the glued one holds a header


def test_concatenated_reports_without_markers_give_a_series():
    text = "".join("epoch done\n" + step_report(step, compiles=1 + step // 5) for step in range(0, 30, 3))
    source = _read(text)
    assert source.snapshots == 10 and source.step_records == 0
    columns = source.series.columns()
    assert columns["steps"] == [float(step + 1) for step in range(0, 30, 3)]
    assert columns["compiles"][-1] == 6


def test_concatenated_reports_with_markers_and_other_output_between(tmp_path):
    text = "".join(f"step {step}\n[MetricsData; step={step}]\n{step_report(step, compiles=1)}"
                   for step in range(12))
    source = _read(text)
    assert source.snapshots == source.step_records == 12
    assert source.final.step == 11 and source.other_lines == 12


def test_crlf_line_endings():
    text = metrics_file([step_report(step, compiles=1) for step in range(4)]).replace("\n", "\r\n")
    source = _read(text)
    assert source.warnings == [] and source.snapshots == 4
    assert source.final.counters["MarkStep"] == 4
    assert source.final.metrics["CompileTime"].accumulator == 2.5e8


def test_gzip_and_utf16_inputs(tmp_path):
    text = metrics_file([step_report(step, compiles=1) for step in range(3)])
    gz = tmp_path / "metrics.txt.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    utf16 = write(tmp_path, "ps.txt", text.encode("utf-16"))
    for path in (str(gz), utf16):
        source = read_source(path)
        assert source.warnings == [] and source.snapshots == 3 and source.final.counters["MarkStep"] == 3


def _damaged_gzips(tmp_path, data: bytes) -> dict[str, str]:
    """A truncated and a corrupted gzip of `data` (the damage in the middle), written under tmp_path."""
    # Incompressible filler between records keeps the compressed stream long, so the damage lands mid-file.
    packed = gzip.compress(data, compresslevel=1)
    middle = len(packed) // 2
    corrupt = bytearray(packed)
    corrupt[middle:middle + 16] = bytes(16)
    paths = {"truncated": tmp_path / "cut.gz", "corrupt": tmp_path / "bad.gz"}
    paths["truncated"].write_bytes(packed[:middle])
    paths["corrupt"].write_bytes(bytes(corrupt))
    return {k: str(v) for k, v in paths.items()}


def test_damaged_gzip_keeps_the_records_before_the_damage(tmp_path):
    import random

    noise = random.Random(0)
    records = [step_report(step, compiles=1) + "".join(
        f"log {noise.getrandbits(64):x}\n" for _ in range(40)) for step in range(60)]
    for kind, path in _damaged_gzips(tmp_path, metrics_file(records).encode()).items():
        source = read_source(path)
        # What came before the damage; a corruption zlib only notices at the checksum can let all through.
        assert 10 < source.snapshots <= 60 and (kind == "corrupt" or source.snapshots < 60), kind
        assert source.final.counters["MarkStep"] == source.final.step + 1, kind
        assert any("reading stopped early" in w.message for w in source.warnings), kind


def test_damaged_gzip_event_log_keeps_its_complete_records(tmp_path):
    fixture = Path(__file__).resolve().parents[1] / "tui" / "fixtures" / "fixture_run.jsonl"
    lines = fixture.read_text().splitlines()
    padded = [lines[0]] + [line for line in lines[1:-1] for _ in range(30)]
    for kind, path in _damaged_gzips(tmp_path, ("\n".join(padded) + "\n").encode()).items():
        source = read_source(path)
        assert source.input_kind == "event-log", kind
        assert source.final is not None and source.final.counters["MarkStep"] > 10, kind
        assert any("reading stopped early" in w.message for w in source.warnings), kind


def test_gzip_that_is_not_gzip_is_one_clear_error(tmp_path):
    path = tmp_path / "fake.gz"
    path.write_bytes(b"\x1f\x8b" + b"not really compressed" * 4)
    assert read_source(str(path)).damage.startswith("the gzip data is corrupt at its start")
    with pytest.raises(UnreadableInputError, match="fake.gz: the gzip data is corrupt at its start .*; no complete"):
        load(str(path))


def test_fast_path_and_line_reader_agree_even_around_a_dirty_record():
    records = [step_report(step, compiles=1 + step // 4, transfers=step, fallbacks={"aten::nonzero": step + 1})
               for step in range(20)]
    records[7] = records[7].replace("Counter: MarkStep", "some log line\nCounter: MarkStep")
    records[9] = records[9].replace("  TotalSamples: 10\n", "  TotalSamples: ten\n", 1)
    records[11] = records[11].replace("Counter: MarkStep\n", "Counter: MarkStep  \n")
    records[12] = records[12].replace("  Value: 13\n", "  Value: 1\r3\n")
    records[13] = records[13].replace("Metric: ExecuteTime\n  TotalSamples: 14\n", "Metric: ExecuteTime\n")
    records[14] = records[14].replace("Counter: MarkStep\n  Value: 15\n", "Counter: MarkStep\n")
    text = metrics_file(records)
    fast, slow = _read(text, fast=True), _read(text, fast=False)
    assert fast.series.columns() == slow.series.columns()
    assert [str(w) for w in fast.warnings] == [str(w) for w in slow.warnings]
    assert fast.warnings and all(w.line > 0 for w in fast.warnings)
    assert fast.final == slow.final and fast.lines == slow.lines and fast.snapshots == slow.snapshots == 20


def test_truncated_last_record_falls_back_to_the_previous_one():
    text = metrics_file([step_report(step, compiles=1, items=step + 1) for step in range(5)])
    cut = text[: text.rindex("Counter: MarkStep") + len("Counter: MarkStep\n  Val")]
    source = _read(cut)
    assert source.final.step == 3 and source.snapshots == 4
    assert any("incomplete" in w.message for w in source.warnings)
    assert source.series.columns()["steps"] == [1.0, 2.0, 3.0, 4.0]


def test_a_last_record_cut_before_its_counters_is_not_a_new_run():
    """Cut inside its first block, the last record lacks the counters, which looks like counters dropping back
    (a new run appended to the file): the cut line says otherwise, so the complete report before it is used."""
    text = metrics_file([step_report(step, compiles=1) for step in range(5)])
    cut = text[: text.rindex("  Accumulator: ") + len("  Accumulator: 250m")]
    source = _read(cut)
    assert source.restarts == [] and not any("new run" in w.message for w in source.warnings)
    assert source.final.step == 3 and source.final.counters["MarkStep"] == 4
    assert source.series.columns()["steps"] == [1.0, 2.0, 3.0, 4.0]
    assert any("its line" in w.message and "is cut off" in w.message for w in source.warnings)


def test_a_paste_cut_right_after_a_step_marker_keeps_the_report_before_it():
    # Found by test_fuzz: the lone marker read as an empty report, its zeros as counters dropping back (a new
    # run), and the run was left with no report at all.
    text = metrics_file([step_report(step, compiles=1, items=step + 1) for step in range(5)]) + "[MetricsData; step=5]\n"
    source = _read(text)
    assert source.final is not None and source.final.step == 4 and source.snapshots == 5
    assert source.restarts == [] and not any("new run" in w.message for w in source.warnings)


def test_a_metrics_file_cut_inside_its_only_record_has_no_report():
    text = metrics_file([step_report(0, compiles=1)])
    source = _read(text[: text.index("  Accumulator: ") + len("  Accumulator: 250m")])
    assert source.final is None and source.snapshots == 0 and source.cut_report_line == 1


def test_malformed_values_give_warnings_with_line_numbers():
    text = metric_block("CompileTime", 3, 3e8) + counter_block("MarkStep", 2)
    text = text.replace("  Accumulator: 300ms000.000us", "  Accumulator: 300 ms").replace("  Value: 2", "  Value: two")
    source = _read(text)
    messages = {w.line: w.message for w in source.warnings}
    assert 3 in messages and "CompileTime" in messages[3]
    assert 8 in messages and "MarkStep" in messages[8]
    assert source.final.metrics["CompileTime"].total_samples == 3


def test_field_outside_a_block_and_repeated_field_are_reported():
    text = "  TotalSamples: 4\n" + counter_block("MarkStep", 2) + "  Value: 3\n"
    source = _read(text)
    assert [w.line for w in source.warnings] == [1, 4]
    assert source.final.counters == {"MarkStep": 2}


def test_thinned_series_keeps_exact_trackers_and_the_last_row():
    records = [step_report(step, compiles=1 + (step >= 40) + (step >= 90)) for step in range(101)]
    source = SourceResult(path="big", name="big")
    reader = TextReader(source, max_rows=16)
    reader.read_stream(io.BytesIO(metrics_file(records).encode()))
    reader.finish()
    series = source.series
    assert len(series) == 101 and series.stride > 1 and series.stored_rows < 16
    columns = series.columns()
    assert columns["steps"][0] == 1.0 and columns["steps"][-1] == 101.0
    assert series.increases_after_warmup["compiles"] == 2
    assert series.last_increase_steps["compiles"] == 91 and series.at_warmup["steps"] == 10


def test_rank_files_are_found_and_lined_up(tmp_path):
    for rank in range(3):
        write(tmp_path, f"metrics.txt.{rank}", metrics_file([step_report(s, compiles=1) for s in range(12)]))
    paths = expand_rank_paths(str(tmp_path / "metrics.txt"))
    assert [rank_of(path)[1] for path in paths] == [0, 1, 2]
    assert rank_of("run.metrics.txt") == ("run.metrics.txt", None)
    report = load(str(tmp_path / "metrics.txt"))
    assert sorted(report.ranks()) == [0, 1, 2]
    assert sorted(report.steps["rank"].unique()) == [0, 1, 2]


def test_a_new_input_kind_plugs_in_before_the_text_reader(tmp_path):
    from xladev.report import inputs

    class Greeting:
        """A toy reader for files starting with HELLO: one report with MarkStep = the number after it."""

        name = "greeting"

        def sniff(self, head, path):
            return head.startswith(b"HELLO ")

        def read(self, stream, source):
            steps = int(stream.read().split()[1])
            reader = TextReader(source)
            reader.read_stream(io.BytesIO(counter_block("MarkStep", steps).encode()))
            reader.finish()

    inputs.register_input_kind(Greeting())
    try:
        greeted = read_source(write(tmp_path, "a.greeting", "HELLO 7\n"))
        plain = read_source(write(tmp_path, "b.txt", counter_block("MarkStep", 3)))
    finally:
        inputs.unregister_input_kind("greeting")
    assert greeted.input_kind == "greeting" and greeted.final.counters == {"MarkStep": 7}
    assert plain.input_kind == "text" and plain.final.counters == {"MarkStep": 3}
    names = [kind.name for kind in inputs.input_kinds()]
    assert "greeting" not in names and names[-1] == "text"


def test_header_only_event_log_says_the_run_had_no_events_yet(tmp_path):
    from xladev.schema import records

    path = tmp_path / "run.events.jsonl"
    path.write_text(records.dumps(records.Header()) + "\n")
    with pytest.raises(UnreadableInputError, match="event log with no events after its header"):
        load(str(path))


def test_compile_failures_in_a_metrics_report_are_an_error_never_healthy(tmp_path):
    records = [step_report(step, compiles=1) for step in range(12)]
    healthy = load(write(tmp_path, "ok.txt", metrics_file(records).encode()))
    assert [f.rule for f in healthy.findings] == ["healthy"]
    records[-1] += "Counter: CompileFailed\n  Value: 2\n"
    report = load(write(tmp_path, "failed.txt", metrics_file(records).encode()))
    rules_found = [f.rule for f in report.findings]
    assert rules_found[0] == "compile-failure" and "healthy" not in rules_found
    assert report.findings[0].severity == "error" and report.findings[0].numbers["failures"] == 2


def test_failure_lines_of_a_debug_log_name_the_graph_and_its_hlo(tmp_path):
    text = ("Compilation Analysis: graph 0123abcd failed to compile: INVALID_ARGUMENT: bad shape\n"
            "Compilation Analysis: its HLO is saved at /tmp/x/graph.hlo\n"
            "Execution Analysis: graph 4567ef01 failed while running: RESOURCE_EXHAUSTED: out of memory\n"
            "Execution Analysis: its HLO is saved at /tmp/x/run.hlo\n")
    report = load(write(tmp_path, "debug.txt", text.encode()))
    findings = {f.rule: f for f in report.findings}
    assert "/tmp/x/graph.hlo" in findings["compile-failure"].evidence[0]
    assert "bad shape" in findings["compile-failure"].evidence[0]
    # The graph that ran out of memory while running is the out-of-memory finding, with its saved HLO.
    assert "/tmp/x/run.hlo" in findings["out-of-memory"].evidence[0] and "execute-failure" not in findings
    assert findings["out-of-memory"].sources == [f"{tmp_path / 'debug.txt'}:3"]


def test_two_runs_appended_to_one_metrics_file_are_split_and_the_last_is_read(tmp_path):
    # Run 1: 15 steps, its graphs growing; run 2 (appended): 12 clean steps of a small graph.
    first = [step_report(step, compiles=1, graph_nodes=50 + 40 * step) for step in range(15)]
    second = [step_report(step, compiles=1) for step in range(12)]
    text = metrics_file(first) + metrics_file(second)
    source = read_source(write(tmp_path, "appended.txt", text.encode()))
    assert len(source.restarts) == 1
    assert any("counters drop back" in w.message and w.line == source.restarts[0] for w in source.warnings)
    assert source.final.counters["MarkStep"] == 12 and len(source.series) == 12
    report = load(write(tmp_path, "appended2.txt", text.encode()))
    assert "graph-growth" not in [f.rule for f in report.findings]
    alone = load(write(tmp_path, "second.txt", metrics_file(second).encode()))
    assert [f.rule for f in report.findings] == [f.rule for f in alone.findings]


@pytest.mark.parametrize("scenario,rule", [("dynamic_shape", "recompilation"), ("item_every_step", "host-transfers")])
def test_pytorch_xla_level1_log_without_execution_blocks(tmp_path, scenario, rule):
    """PT_XLA_DEBUG_LEVEL=1 in PyTorch/XLA skips the execution analysis: the steps come from the
    auto-analysis lines ("... too frequent: N counts during M steps") and recompilation from the graphs
    one site keeps compiling."""
    from tests.report.helpers import fixture_path

    lines = fixture_path(f"{scenario}.debug.txt").read_text().splitlines()
    level1 = write(tmp_path, "level1.txt", "\n".join(l for l in lines if not l.startswith("Execution Analysis")))
    report = load(level1)
    assert report.verdict() in ("warning", "error")
    assert rule in {f.rule for f in report.findings}
