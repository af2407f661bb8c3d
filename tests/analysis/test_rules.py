"""The rules module: PyTorch/XLA's thresholds and wording, and xladev's own diagnoses, on plain numbers."""

from __future__ import annotations

import pytest

from xladev import analysis


def test_compile_frequency_needs_more_than_ten_steps_and_more_than_half():
    assert analysis.compile_too_frequent_message(21, 10) is None  # still warm-up
    assert analysis.compile_too_frequent_message(21, 11) == "CompileTime too frequent: 21 counts during 11 steps"
    assert analysis.compile_too_frequent_message(6, 12) is None  # exactly 0.5 is fine
    assert analysis.compile_too_frequent_message(7, 12) is not None


def test_transfer_frequency_has_no_warm_up():
    assert analysis.transfer_too_frequent_message(2, 1) == "TransferFromDeviceTime too frequent: 2 counts during 1 steps"
    assert analysis.transfer_too_frequent_message(1, 2) is None
    assert analysis.transfer_too_frequent_message(3, 0) is None


def test_slow_and_not_lowered_lines_use_torch_xla_wording():
    line = analysis.too_slow_message("CompileTime", 301e9, analysis.COMPILE_TOO_SLOW_NS, "05m01s000ms000.000us")
    assert line == ("CompileTime too slow: longest instance took 05m01s000ms000.000us. "
                    "Please open a GitHub issue with the graph dump for our team to optimize.")
    assert analysis.too_slow_message("ExecuteTime", 30e9, analysis.EXECUTE_TOO_SLOW_NS, "30s") is None
    assert analysis.ops_not_lowered_message(["aten::nonzero", "aten::median.dim_values"]) == (
        "Op(s) not lowered: aten::median.dim_values, aten::nonzero,  "
        "Please open a GitHub issue with the above op lowering requests.")
    assert analysis.fallback_ops({"aten::_local_scalar_dense": 5, "aten::nonzero": 1, "xla::add": 3}) == ["aten::nonzero"]


def test_auto_metrics_messages_order():
    lines = analysis.auto_metrics_messages(steps=11, compiles=21, transfers=11, counters={"aten::_ctc_loss": 1},
                                        longest_compile_ns=400e9, longest_execute_ns=40e9)
    assert [line.split(":")[0] for line in lines] == [
        "CompileTime too frequent", "TransferFromDeviceTime too frequent", "CompileTime too slow",
        "ExecuteTime too slow", "Op(s) not lowered"]


def test_warm_up_compiles_are_healthy_and_late_ones_are_not():
    assert analysis.recompilation_finding(steps=100, compiles=3, compiles_at_warmup=3) is None
    late = analysis.recompilation_finding(steps=100, compiles=4, compiles_at_warmup=3)
    assert late.severity == analysis.INFO
    some = analysis.recompilation_finding(steps=100, compiles=13, compiles_at_warmup=3)
    assert some.severity == analysis.WARNING and "10 new graphs in 90 steps" in some.title
    every = analysis.recompilation_finding(steps=100, compiles=100, compiles_at_warmup=10, stable_graph_size=True)
    assert every.severity == analysis.ERROR and every.title.startswith("Recompiles every step")
    assert "shape" in " ".join(every.evidence) and "Pad" in every.fix
    nonzero = analysis.recompilation_finding(steps=100, compiles=50, compiles_at_warmup=10,
                                          data_dependent_ops=["aten::nonzero"])
    assert "aten::nonzero gives data-dependent" in " ".join(nonzero.evidence) and "torch.where" in nonzero.fix


def test_single_report_falls_back_to_the_ratio_rule():
    assert analysis.recompilation_finding(steps=24, compiles=2, compiles_at_warmup=None) is None
    finding = analysis.recompilation_finding(steps=24, compiles=24, compiles_at_warmup=None)
    assert finding.severity == analysis.WARNING and "XLA_METRICS_FILE" in " ".join(finding.evidence)


@pytest.mark.parametrize("transfers, items, fallbacks, word", [
    (24, 24, 0, ".item()"), (48, 0, 48, "fallbacks"), (30, 0, 0, "Device→host transfers")])
def test_host_transfers_name_their_cause(transfers, items, fallbacks, word):
    finding = analysis.host_transfer_finding(steps=24, transfers=transfers, item_calls=items, fallback_calls=fallbacks)
    assert word in finding.title
    assert analysis.host_transfer_finding(steps=24, transfers=12) is None


def test_fallback_findings_and_remedies():
    findings = analysis.fallback_findings({"aten::nonzero": 24, "aten::median.dim_values": 24,
                                        "aten::_local_scalar_dense": 24, "aten::foo_bar.out": 1}, 24)
    assert [f.subject for f in findings] == ["aten::median.dim_values", "aten::nonzero", "aten::foo_bar.out"]
    assert [f.severity for f in findings] == [analysis.WARNING, analysis.WARNING, analysis.INFO]
    assert "kthvalue" in findings[0].fix and "data" in findings[1].detail
    assert "open a PyTorch/XLA GitHub issue" in findings[2].fix
    assert analysis.op_base_name("aten::masked_select.out") == "masked_select"
    assert "torch.where" in analysis.fallback_remedy("aten::masked_select")


@pytest.mark.parametrize("op, reason, advice", [
    ("aten::nonzero", "data-dependent output shape", "masked arithmetic"),
    ("aten::unique_consecutive", "data-dependent output shape", "one_hot"),
    ("aten::index_put_", "data-dependent output shape", "torch.where"),  # in place: its op's entry
    ("aten::linalg_ldl_factor_ex", "no XLA equivalent", "cholesky"),
    ("aten::some_new_op", "not lowered yet", "open a PyTorch/XLA GitHub issue"),
])
def test_fallback_findings_name_the_reason(op, reason, advice):
    """The report says why an op stays on the CPU (xladev/analysis/fallback_reasons.py) and what to do instead."""
    (finding,) = analysis.fallback_findings({op: 3}, 3)
    assert f"Runs on the CPU: {reason}" in finding.detail
    assert advice in finding.fix


def test_custom_ops_not_yet_lowered_have_their_reason():
    from xladev.analysis import fallback_reasons

    op = "torch_nn::_linear_cross_entropy_batch_chunked"
    assert fallback_reasons.reason(op) == "not yet done"
    assert "F.cross_entropy" in fallback_reasons.remedy(op)


def test_costs_graphs_and_cache_misses():
    assert analysis.slow_compile_finding(longest_ns=200e9, total_ns=1, compiles=1, formatted_longest="",
                                      formatted_total="") is None
    assert analysis.slow_execute_finding(longest_ns=31e9, executions=3, formatted_longest="31s").rule == "slow-execute"
    assert analysis.huge_graph_finding(largest_nodes=250_000, typical_nodes=240_000).rule == "huge-graph"
    assert analysis.graph_growth_finding(nodes_at_warmup=100, nodes_at_end=140, steps=50) is None
    assert analysis.graph_growth_finding(nodes_at_warmup=100, nodes_at_end=400, steps=50).rule == "graph-growth"
    assert analysis.device_data_cache_miss_finding(misses=2, steps=24) is None
    assert analysis.device_data_cache_miss_finding(misses=30, steps=40, misses_after_warmup=30,
                                                steps_after_warmup=30).rule == "device-data-cache-miss"


def test_ranks_and_healthy_and_preferences():
    assert analysis.rank_divergence_finding(rank=1, compiles=2, others_compiles=[2, 2]) is None
    assert analysis.rank_divergence_finding(rank=1, compiles=5, others_compiles=[2, 2]).subject == "rank 1"
    healthy = analysis.healthy_finding(steps=24, compiles=1, cached_compiles=23, transfers=0, warmup_known=True)
    assert healthy.severity == analysis.INFO and "all during warm-up" in healthy.evidence[0]
    assert analysis.metric_preference("ExecuteTime") == "lower" and analysis.metric_preference("aten::nonzero") == "lower"
    assert analysis.metric_preference("CachedCompile") == "neutral"
    assert analysis.severity_rank(analysis.ERROR) > analysis.severity_rank(analysis.WARNING) > analysis.severity_rank(analysis.INFO)
    assert healthy.to_dict()["rule"] == "healthy"
