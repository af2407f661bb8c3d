"""The graph dump round trip: the records `graph_dump.record_text` writes, `graph_dump.parse_records` reads back.

Each record's frames, root hashes, graph text and graph hash, in any of the dump's graph formats (the text between
the markers is the graph's, whatever it is), with or without an SPMD graph's output shardings after it.
"""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from xladev.schema import graph_dump


class Frame(NamedTuple):
    name: str
    file: str
    line: int


_HASHES = st.from_regex(r"[0-9a-f]{32}", fullmatch=True)
_FRAMES = st.lists(st.builds(Frame, st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}|<module>", fullmatch=True),
                             st.from_regex(r"/[a-z]+(/[a-z_]+){0,3}\.py", fullmatch=True), st.integers(0, 10**6)),
                   max_size=6)
# Graph lines as IR, HLO or dot print them; a blank line may stand between them.
_GRAPH_LINES = st.from_regex(r"(  )?[%a-z0-9_][ %a-z0-9_\[\]{}(),=.:<>\"-]{0,60}|", fullmatch=True)
_GRAPHS = st.builds(lambda lines, newline: "\n".join(["IR {", *lines, "}"]) + newline,
                    st.lists(_GRAPH_LINES, max_size=8), st.sampled_from(["", "\n"]))
_SHARDINGS = st.none() | st.lists(st.from_regex(r"f32\[[0-9,]{0,9}\] \{devices=\[[0-9,]{1,7}\][0-9,]{1,9}\}",
                                                fullmatch=True), min_size=1, max_size=3)
_RECORDS = st.lists(st.tuples(_FRAMES, st.lists(_HASHES, max_size=4), _GRAPHS, _HASHES, _SHARDINGS),
                    min_size=1, max_size=5)


def write(records) -> str:
    return "".join(graph_dump.record_text(*record) for record in records)


@settings(max_examples=150, deadline=None)
@given(records=_RECORDS)
def test_records_read_back_as_written(records):
    warnings = []
    read = list(graph_dump.parse_records(write(records).splitlines(keepends=True), warnings))
    assert warnings == []
    assert [record.index for record in read] == list(range(1, len(records) + 1))
    for got, (frames, roots, text, graph_hash, _) in zip(read, records, strict=True):
        assert got.frames == frames  # (function, file, line) as written
        assert got.root_hashes == roots
        assert got.graph_text == text.strip("\n") + "\n"  # the blank lines around the graph are the record's
        assert got.graph_hash == graph_hash


@settings(max_examples=50, deadline=None)
@given(records=_RECORDS, cut=st.floats(0.05, 0.95))
def test_a_record_cut_short_is_skipped_and_the_whole_ones_before_it_are_read(records, cut):
    text = write(records)
    last = text.rindex("[ScheduleSyncTensorsGraph]")
    start, end = text.index("\n", last) + 1, text.rindex("## END_GRAPH")  # cut after its first line, before its end
    warnings = []
    read = list(graph_dump.parse_records(text[:start + int((end - start) * cut)].splitlines(), warnings))
    assert [record.graph_hash for record in read] == [graph_hash for _, _, _, graph_hash, _ in records[:-1]]
    assert warnings == [f"line {text[:last].count(chr(10)) + 1}: last record is truncated (no ## END_GRAPH); skipped"]


def test_a_record_is_pytorch_xla_s():
    frames = [Frame("mark_step", "/env/xladev/training.py", 23), Frame("train", "/a/train.py", 48)]
    record = graph_dump.record_text(frames, ["3f2a", "91bc"], "IR {\n  %0 = f32[] prim::Constant(), value=1\n}\n",
                                    "c74c", ["f32[8,32] {devices=[1,4]0,1,2,3}"])
    assert record == ("[ScheduleSyncTensorsGraph]\nTensorsGraphInfo:\n  mark_step (/env/xladev/training.py:23)\n"
                      "  train (/a/train.py:48)\n\nRoot Hashes: (3f2a, 91bc)\n\n## BEGIN_GRAPH\n"
                      "IR {\n  %0 = f32[] prim::Constant(), value=1\n}\n\nGraph Hash: c74c\n\n## END_GRAPH\n\n"
                      "\n#OUTPUT_SHARDING_BEGIN\n\nf32[8,32] {devices=[1,4]0,1,2,3}\n\n#OUTPUT_SHARDING_END\n\n")
    [read] = graph_dump.parse_records(record.splitlines(), [])
    assert read.is_barrier and read.site == "/a/train.py:48 (train)"
