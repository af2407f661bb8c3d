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
    assert "train_loop_fn (/home/user/asr/train_tpu.py:188) ×1200" in sites  # the user's frame, not torch's


def test_a_compilation_block_caused_by_a_read_names_the_users_line():
    report = _load("read_before_barrier.debug.txt")
    first = report.findings[0]
    assert report.verdict() == "warning" and first.rule == "early-sync"
    assert first.subject == "/home/user/project/train.py:94"
    assert "reads a tensor value before the barrier" in first.title and "every step" not in first.title
