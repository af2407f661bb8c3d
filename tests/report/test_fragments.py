"""Real-world fragments (tests/report/fragments, PyTorch/XLA's own formats) are diagnosed as a person would.

Each was read as healthy (or as too little to judge) before: a cut-off paste whose last record holds the
problem, compiles growing inside the warm-up steps, the old summary of ops run on the CPU, one analysis block.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report.fragments import make_fragments
from xladev.report import load

FRAGMENTS = Path(make_fragments.__file__).resolve().parent
TORCH_XLA_FIXTURES = FRAGMENTS.parents[1] / "fixtures" / "torch_xla"  # PyTorch/XLA 2.9's own outputs
S = 1_000_000_000


@pytest.mark.parametrize("name", list(make_fragments.FRAGMENTS))
def test_the_files_are_what_the_script_writes(name):
    assert (FRAGMENTS / name).read_text() == make_fragments.FRAGMENTS[name]()


def _load(name: str):
    return load(str(FRAGMENTS / name))


def test_a_cut_off_paste_whose_last_record_compiles_496_graphs():
    report = _load("compile_burst.metrics.txt")
    first = report.findings[0]
    assert report.verdict() == "error" and first.rule == "recompilation"
    assert first.title == "496 graphs compiled in step 5 alone"
    assert first.cost_ns == pytest.approx(31.2 * S, rel=0.01)  # step 5's compile time, from the cut record
    # The numbers of the run stay those of the last complete record, and the cut is said.
    assert report.sources[0].final.step == 4
    assert any("last report is incomplete" in w.message for w in report.sources[0].warnings)


def test_compiles_growing_every_step_inside_warm_up():
    first = _load("growing_compiles.stdout.txt").findings[0]
    assert first.rule == "recompilation" and first.severity == "error"
    assert first.title == "Compiles keep growing: 52 new graphs in 2 steps (16 in step 5, 36 in step 6)"


def test_the_old_unlowered_op_summary_names_the_ops_on_the_cpu():
    report = _load("unlowered_summary.debug.txt")
    fallbacks = {f.subject: f for f in report.findings if f.rule == "cpu-fallback"}
    assert report.verdict() == "warning" and set(fallbacks) == {"aten::_ctc_loss", "aten::masked_select"}
    assert fallbacks["aten::_ctc_loss"].numbers["count"] == 1200 and fallbacks["aten::masked_select"].numbers["count"] == 600
    assert "masked arithmetic" in fallbacks["aten::masked_select"].fix
    sites = next(line for f in fallbacks.values() for line in f.evidence if line.startswith("CPU fallback calls by site"))
    assert "/home/user/asr/train_tpu.py:188 (train_loop_fn) ×1200" in sites  # the user's frame, not torch's


def test_the_unlowered_op_summary_is_lifted_to_fallback_records(tmp_path):
    """Each entry is a `fallback` record standing for the calls it counts, at the user's frame of its stack: the
    state (and the report's table) holds them as an event log's; a later summary counts every call so far, so it
    replaces the one before."""
    text = (FRAGMENTS / "unlowered_summary.debug.txt").read_text()
    expected = [("aten::_ctc_loss", "/home/user/asr/train_tpu.py:188 (train_loop_fn)", 1200),
                ("aten::_local_scalar_dense", "/home/user/asr/train_tpu.py:205 (train_loop_fn)", 600),
                ("aten::masked_select", "/home/user/asr/decoder.py:57 (decode_greedy)", 600)]
    report = _load("unlowered_summary.debug.txt")
    state = report.sources[0].run
    assert state.fallback_sites() == expected
    assert state.counters == {op: count for op, _, count in expected}  # the counters the records count
    assert report.fallback_sites[["op", "site", "count"]].values.tolist() == [list(row) for row in expected]
    twice = tmp_path / "twice.debug.txt"
    twice.write_text(text.replace("count=1200", "count=7").replace("count=600", "count=3") + text)
    assert load(str(twice)).sources[0].run.fallback_sites() == expected


def test_pytorch_xla_2_9s_summary_names_no_op_and_counts_no_counter():
    """PyTorch/XLA 2.9 tags each entry ``xla_fallback`` or names no op (its ``Op(s) not lowered`` line names
    them): the records say the op is unknown, and no counter is made of it."""
    report = load(str(TORCH_XLA_FIXTURES / "fallback.debug.txt"))
    state = report.sources[0].run
    assert state.fallback_sites() == [("?", "", 48), ("?", "/home/user/run/scenarios.py:16 (<module>)", 24),
                                      ("?", "/home/user/run/scenarios.py:17 (<module>)", 24)]
    assert "?" not in state.counters
    assert report.sources[0].debug.not_lowered_ops == {"aten::median.dim_values", "aten::nonzero"}


def test_a_compilation_block_caused_by_a_read_names_the_users_line():
    report = _load("read_before_barrier.debug.txt")
    first = report.findings[0]
    assert report.verdict() == "warning" and first.rule == "early-sync"
    assert first.subject == "/home/user/project/train.py:94"
    assert "reads a tensor value before the barrier" in first.title and "every step" not in first.title
