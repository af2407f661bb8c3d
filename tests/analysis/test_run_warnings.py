"""The runtime's warnings fold from their records, whichever input held them: a PT_XLA_DEBUG line lifts to the record
it was written from (round trip), and an event log's records and a debug log's lines of the same run fold the same."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from xladev import analysis
from xladev.analysis.run_state import RunState
from xladev.analysis.run_warnings import record_of_line
from xladev.dumps.debug_analysis import DebugLog
from xladev.schema import records as rec
from xladev.schema.units import format_bytes

_sites = st.from_regex(r"[a-z_]{1,10}\.py:[1-9][0-9]{0,4}", fullmatch=True)
_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=60).map(str.strip).filter(bool)
_bytes = st.integers(0, 1 << 45)


def _printed_exactly(parsed: float, true: float) -> bool:
    # A byte count prints with two decimals of the largest unit under 1024 of it: off by half the last digit.
    return math.isclose(parsed, true, rel_tol=0.005, abs_tol=0.005)


@settings(max_examples=200, deadline=None)
@given(ops=st.integers(1, 10**9), step=st.integers(0, 10**7), site=_sites)
def test_a_graph_growing_line_lifts_to_its_record(ops, step, site):
    record = record_of_line(analysis.graph_growing_message(ops=ops, step=step, site=site))
    assert record == rec.GraphGrowing(step=step, ops=ops, site=site)


@settings(max_examples=200, deadline=None)
@given(space=st.sampled_from(analysis.MEMORY_SPACES), steps=st.tuples(st.integers(0, 10**6), st.integers(1, 10**6)),
       sizes=st.tuples(_bytes, _bytes, _bytes),
       holders=st.lists(st.fixed_dictionaries({"kind": st.sampled_from(["host copy", "CPU tensor", "Python objects",
                                                                           "tensor"]),
                                                 "line": _sites, "per_step_bytes": _bytes,
                                                 "buffers": st.integers(0, 10**6)}), max_size=4))
def test_a_memory_growing_line_lifts_to_its_record(space, steps, sizes, holders):
    from_step, to_step = steps[0], steps[0] + steps[1]
    message = analysis.memory_growing_message(from_step=from_step, from_bytes=sizes[0], to_step=to_step,
                                              to_bytes=sizes[1], per_step_bytes=sizes[2], holders=holders,
                                              format_bytes=format_bytes, space=space)
    record = record_of_line(message)
    assert isinstance(record, rec.MemoryGrowing) and record.space == space
    assert (record.from_step, record.step) == (from_step, to_step)
    for parsed, true in zip((record.from_bytes, record.to_bytes, record.per_step_bytes), sizes):
        assert _printed_exactly(parsed, true), (parsed, true)
    assert [(h["kind"], h["line"], h["buffers"]) for h in record.holders] == [
        (h["kind"], h["line"], h["buffers"]) for h in holders]
    assert all(_printed_exactly(got["per_step_bytes"], want["per_step_bytes"])
               for got, want in zip(record.holders, holders))


@settings(max_examples=200, deadline=None)
@given(site=_sites, by=st.sampled_from(["dynamo", "xladev"]), reason=_text)
def test_a_graph_break_line_lifts_to_its_record(site, by, reason):
    record = record_of_line(analysis.graph_break_message(site=site, reason=reason, by=by))
    assert record == rec.GraphBreak(by=by, reason=reason, site=site)


@settings(max_examples=200, deadline=None)
@given(function=st.from_regex(r"[a-z_][a-z_0-9.]{0,20}", fullmatch=True), site=_sites,
       guard=_text.filter(lambda g: "; " not in g), compiles=st.integers(1, 10**5))
def test_a_dynamo_recompile_line_lifts_to_its_record(function, site, guard, compiles):
    record = record_of_line(analysis.dynamo_recompile_message(function=function, site=site, guard=guard,
                                                              compiles=compiles))
    assert record == rec.DynamoRecompile(function=function, guard=guard, compiles=compiles, site=site)


def test_other_lines_lift_to_nothing():
    assert record_of_line("CompileTime too frequent: 21 counts during 11 steps") is None
    assert record_of_line("") is None


_RUN = [  # one run's warnings, as its event log holds them
    rec.GraphGrowing(step=3, ops=20_000, site="train.py:14"),
    rec.GraphGrowing(step=3, ops=40_000, site="train.py:15"),
    rec.GraphBreak(step=5, by="dynamo", reason="call to print", site="train.py:30"),
    rec.GraphBreak(step=6, by="dynamo", reason="call to print", site="train.py:30"),
    rec.DynamoRecompile(step=7, function="forward", guard="tensor 'x' size mismatch at index 0", compiles=2,
                        site="train.py:40"),
    rec.MemoryGrowing(step=20, from_step=10, from_bytes=1 << 30, to_bytes=(1 << 30) + (10 << 20),
                      per_step_bytes=1 << 20, holders=[{"kind": "host copy", "line": "train.py:22",
                                                        "per_step_bytes": 1 << 20, "buffers": 10}], space="host"),
]


def _line(record) -> str:  # the line the runtime's PT_XLA_DEBUG sink prints for it
    if isinstance(record, rec.GraphGrowing):
        message = analysis.graph_growing_message(ops=record.ops, step=record.step, site=record.site)
    elif isinstance(record, rec.GraphBreak):
        message = analysis.graph_break_message(site=record.site, reason=record.reason, by=record.by)
    elif isinstance(record, rec.DynamoRecompile):
        message = analysis.dynamo_recompile_message(function=record.function, site=record.site, guard=record.guard,
                                                    compiles=record.compiles)
    else:
        message = analysis.memory_growing_message(
            from_step=record.from_step, from_bytes=record.from_bytes, to_step=record.step, to_bytes=record.to_bytes,
            per_step_bytes=record.per_step_bytes, holders=record.holders, format_bytes=format_bytes,
            space=record.space)
    return f"pt-xla-profiler: {message}"


def _folded(warnings) -> dict:
    grown = warnings.graph_growing
    return {"growing": (grown.first.site, grown.latest.ops, grown.times, grown.first_line, grown.latest_line),
            "breaks": {key: (w.times, w.latest_line) for key, w in warnings.graph_breaks.items()},
            "recompiles": {key: w.times for key, w in warnings.dynamo_recompiles.items()},
            "memory": {space: (w.latest.from_step, w.latest.step, w.latest.holders[0]["line"])
                       for space, w in warnings.memory_growing.items()}}


def test_the_event_log_and_the_debug_log_of_a_run_fold_the_same_warnings():
    state = RunState()
    for line, record in enumerate(_RUN, start=1):
        state.feed(record, line)
    log = DebugLog(lambda *args, **kwargs: None)
    for line, record in enumerate(_RUN, start=1):
        assert log.feed(line, _line(record))
    assert _folded(log.run.warnings) == _folded(state.warnings)
    assert _folded(state.warnings)["growing"] == ("train.py:14", 40_000, 2, 1, 2)
    assert _folded(state.warnings)["breaks"] == {("train.py:30", "dynamo", "call to print"): (2, 4)}
