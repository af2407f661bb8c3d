"""A metrics report without a step count is judged from its compiles per execution and compile-time
percentiles; [MetricsData; step=N] records count the steps when no MarkStep counter does."""

from __future__ import annotations

from tests.report.helpers import counter_block, metric_block, metrics_file, write
from xladev import analysis
from xladev.report import load


def test_most_executions_compiling_is_recompilation_without_a_step_count(tmp_path):
    text = (metric_block("CompileTime", 20, 40e9, percentiles={"50%": 2e9, "90%": 2.2e9, "99%": 2.5e9})
            + metric_block("ExecuteTime", 22, 1e9) + counter_block("UncachedCompile", 20))
    report = load(write(tmp_path, "pasted.txt", text))
    finding = next(f for f in report.findings if f.rule == "recompilation")
    assert report.verdict() == analysis.WARNING and finding.title == "20 compiles for 22 executions"
    assert any("compile times are alike" in line for line in finding.evidence)
    assert "Pad or bucket" in finding.fix


def test_few_compiles_for_many_executions_is_unknown_not_healthy(tmp_path):
    text = metric_block("CompileTime", 3, 6e9) + metric_block("ExecuteTime", 300, 1e9) + counter_block("UncachedCompile", 3)
    report = load(write(tmp_path, "pasted.txt", text))
    assert report.verdict() == analysis.UNKNOWN
    assert "recompilation" not in {f.rule for f in report.findings}


def test_unalike_compile_times_do_not_claim_a_changing_shape(tmp_path):
    text = (metric_block("CompileTime", 10, 40e9, percentiles={"50%": 1e9, "90%": 9e9})
            + metric_block("ExecuteTime", 12, 1e9))
    finding = next(f for f in load(write(tmp_path, "pasted.txt", text)).findings if f.rule == "recompilation")
    assert not any("alike" in line for line in finding.evidence) and "PT_XLA_DEBUG_LEVEL=2" in finding.fix


def test_step_records_count_the_steps_when_there_is_no_markstep_counter(tmp_path):
    records = [metric_block("CompileTime", 1, 1e9) + metric_block("ExecuteTime", step + 1, (step + 1) * 1e6)
               for step in range(24)]
    report = load(write(tmp_path, "metrics.txt", metrics_file(records)))
    healthy = next(f for f in report.findings if f.rule == "healthy")
    assert report.verdict() == "healthy" and healthy.numbers["steps"] == 24


def test_a_per_step_metrics_file_shows_warmup_recompiles_of_the_same_graph_size(tmp_path):
    """Compiles in every warm-up step at one graph size (new input shapes) are recompilation even though the
    compiles stop once every shape was seen; graphs that change size (a growing model) are not."""
    from tests.report.helpers import step_report

    same = [step_report(step, compiles=min(step + 1, 8)) for step in range(12)]
    report = load(write(tmp_path, "same.txt", metrics_file(same)))
    finding = next(f for f in report.findings if f.rule == "recompilation")
    assert finding.numbers["repeated_recompiles"] == 6  # steps 3..8: the first two steps are warm-up proper
    healthy = [step_report(step, compiles=min(step + 1, 2)) for step in range(12)]
    assert load(write(tmp_path, "healthy.txt", metrics_file(healthy))).verdict() == "healthy"
