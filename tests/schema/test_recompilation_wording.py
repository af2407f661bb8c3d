"""xladev's "Recompilation Cause" section round trips: what `record_wording.recompilation_lines` writes from a
compile record's `recompile`, `recompile_of_lines` reads back into the same `recompile` and step, so a PT_XLA_DEBUG
log's compile is lifted to the record an event log holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from xladev.schema import record_wording

_CHANGES = st.lists(st.from_regex(r"[a-z][a-z0-9 .,()_:>\[\]-]{0,60}[a-z0-9)\]]", fullmatch=True), max_size=5)
_SITES = st.sampled_from(["/home/me/train.py:48 (train_step)", "/srv/a b/run.py:3 (<module>)", ""])


@settings(max_examples=300, deadline=None)
@given(previous=st.from_regex(r"[0-9a-f]{32}", fullmatch=True), changes=_CHANGES, graphs=st.integers(2, 10**6),
       compile_ns=st.integers(0, 10**15), step=st.none() | st.integers(0, 10**7), site=_SITES)
def test_a_recompilation_reads_back_as_its_record(previous, changes, graphs, compile_ns, step, site):
    lines = record_wording.recompilation_lines(site, previous, changes, graphs, compile_ns, step)
    recompile, named = record_wording.recompile_of_lines(lines)
    assert named == step
    assert recompile == {"previous": previous, "changes": changes or [record_wording.NO_CHANGE_SAID],
                         "graphs_at_site": graphs, "compile_ns_at_site": compile_ns}
    # and it is written again as it was read
    assert record_wording.recompilation_lines(site, recompile["previous"], recompile["changes"],
                                              recompile["graphs_at_site"], recompile["compile_ns_at_site"],
                                              named) == lines


def test_totals_the_writer_did_not_know_are_left_out():
    lines = record_wording.recompilation_lines("/a/t.py:1 (f)", "ab12", ["shape f32[2] -> f32[3]"], "?", None)
    assert record_wording.recompile_of_lines(lines) == ({"previous": "ab12", "changes": ["shape f32[2] -> f32[3]"]},
                                                        None)
