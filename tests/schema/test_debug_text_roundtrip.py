"""The PT_XLA_DEBUG analysis blocks round trip: what `debug_text` writes, its `AnalysisBlockReader` reads back.

A compile block's cause, graph hash and name, input and output counts, recompilation lines and frames (the user's
marked, a deep stack cut), and its Post Compilation sizes (printed in GB, to the sixth decimal).
"""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from xladev.schema import debug_text
from xladev.schema.memory import SIZES
from xladev.schema.sites import first_user_index, shown_frames

COMPILE = ("Compilation Analysis: ", "Compilation Cause")
EXECUTE = ("Execution Analysis: ", "Execution Cause")
GB_DIGIT = 1024**3 * 1e-6  # the last printed digit of a size


class Frame(NamedTuple):
    name: str
    file: str
    line: int


def read(text: str) -> list[debug_text.GraphEvent]:
    """The blocks of `text`, in order; every line must be an analysis line, and none may warn."""
    warnings = []
    reader = debug_text.AnalysisBlockReader(lambda *args, **kwargs: warnings.append(args))
    for lineno, line in enumerate(text.splitlines(), 1):
        assert reader.feed_analysis(lineno, line) or not line, line
    reader.finish()
    assert warnings == []
    return reader.events


_WORDS = st.from_regex(r"[a-z][a-z0-9 .,()_:]{0,50}[a-z0-9)]", fullmatch=True).filter(
    lambda text: not text.startswith(debug_text.XLADEV_CAUSE_PREFIX.strip()))
_FILES = st.sampled_from(["/home/me/train.py", "/home/me/model.py",  # the user's
                          "/usr/lib/python3/site-packages/torch/nn/modules/module.py",
                          "/usr/lib/python3/site-packages/torch_xla/core/xla_model.py"])
_FRAMES = st.lists(st.builds(Frame, st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}|<module>", fullmatch=True), _FILES,
                             st.integers(1, 10**5)), max_size=14)
_MEMORY = st.dictionaries(st.sampled_from(sorted(SIZES)), st.integers(0, 10**13))


def frame_text(frame: Frame) -> str:
    return f"{frame.name} ({frame.file}:{frame.line})"


def assert_frames_read_back(event: debug_text.GraphEvent, frames: list[Frame], max_frames: int) -> None:
    shown = shown_frames(frames)
    user = first_user_index(shown)
    if len(shown) <= max_frames:
        assert event.frames == [frame_text(frame) for frame in shown] and not event.frames_cut
        assert event.user_frame == user
        return
    # A deep stack is cut to its innermost frames, and the user's frame is kept even past the cut (one frame
    # before the dots at the least).
    assert event.frames_cut and len(event.frames) <= max(max_frames, 2)
    kept = event.frames if user is None or user < max_frames else event.frames[:-1]
    assert kept == [frame_text(frame) for frame in shown[:len(kept)]]
    if user is None:
        assert event.user_frame is None
    else:
        assert event.frames[event.user_frame] == frame_text(shown[user])


@settings(max_examples=200, deadline=None)
@given(cause=_WORDS, exact=st.none() | _WORDS, graph_hash=st.from_regex(r"[0-9a-f]{32}", fullmatch=True),
       inputs=st.integers(0, 10**4), outputs=st.integers(0, 10**4),
       name=st.none() | st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True),
       recompilation=st.lists(_WORDS, max_size=4), frames=_FRAMES, max_frames=st.integers(1, 10), memory=_MEMORY)
def test_a_compile_block_reads_back_as_written(cause, exact, graph_hash, inputs, outputs, name, recompilation,
                                               frames, max_frames, memory):
    extra = [("Process:", ["rank 0 of 2 (host:123)"])]  # a section the reader skips: not part of the cause
    if recompilation:
        extra.append(("Recompilation Cause", recompilation))
    text = debug_text.analysis_block_text(*COMPILE, cause, exact, graph_hash, inputs, outputs, frames, max_frames,
                                          extra, name)
    [event] = read(text + debug_text.post_compilation_block(memory))
    assert event.kind == "compile"
    assert event.cause == (exact or cause)  # xladev's exact cause, where written, replaces PyTorch/XLA's line
    assert (event.graph_hash, event.inputs, event.outputs, event.name) == (graph_hash, inputs, outputs, name or "")
    assert event.recompilation == recompilation
    assert_frames_read_back(event, frames, max_frames)
    assert sorted(event.sizes) == sorted(SIZES[key].column for key in memory)  # an unknown size stays unknown
    for key, size in memory.items():
        assert abs(event.sizes[SIZES[key].column] - size) <= GB_DIGIT / 2 + size * 1e-15, (key, size)


@settings(max_examples=50, deadline=None)
@given(blocks=st.lists(st.tuples(st.booleans(), st.from_regex(r"[0-9a-f]{32}", fullmatch=True), _WORDS, _FRAMES),
                       min_size=1, max_size=6))
def test_blocks_read_back_in_order_each_as_its_kind(blocks):
    text = "".join(debug_text.analysis_block_text(*(COMPILE if compiled else EXECUTE), cause, None, graph_hash, 1,
                                                  1, frames, 100)
                   for compiled, graph_hash, cause, frames in blocks)
    events = read(text)
    assert [(event.kind, event.graph_hash, event.cause) for event in events] == [
        ("compile" if compiled else "execute", graph_hash, cause) for compiled, graph_hash, cause, _ in blocks]


def test_the_post_compilation_sizes_go_to_the_compile_before_them():
    frames = [Frame("step", "/home/me/train.py", 12)]
    text = (debug_text.analysis_block_text(*COMPILE, "user torch_xla.sync", None, "a" * 32, 2, 1, frames, 5)
            + debug_text.analysis_block_text(*EXECUTE, "user torch_xla.sync", None, "a" * 32, 2, 1, frames, 5)
            + debug_text.post_compilation_block({"argument": 2 * 1024**3, "temp": 512 * 1024**2}))
    assert "Graph output size: Unknown  GB" in text
    compiled, executed = read(text)
    assert compiled.sizes == {"input_bytes": 2 * 1024**3, "temp_bytes": 512 * 1024**2}
    assert executed.sizes == {} and executed.frames == ["step (/home/me/train.py:12)"] and executed.user_frame == 0


_LINE = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=60).map(str.strip)


@settings(max_examples=100, deadline=None)
@given(graph_hash=st.from_regex(r"[0-9a-f]{8,32}", fullmatch=True),
       verb=st.sampled_from([debug_text.FAILED_TO_COMPILE, debug_text.FAILED_WHILE_RUNNING,
                             debug_text.COULD_NOT_RUN]),
       message=_LINE, hlo_path=st.sampled_from(["", "/tmp/xladev_failed/0a1b.hlo"]),
       process=st.sampled_from(["", "rank 1 (pid 4242, host-a)", "rank 0"]))
def test_a_failed_graph_reads_back_as_written(graph_hash, verb, message, hlo_path, process):
    # A job's process is named in (), with its pid in () inside: the line still reads back.
    text = debug_text.failure_lines("Execution Analysis: ", graph_hash, verb, message, hlo_path, process)
    first, *rest = text.strip("\n").split("\n")
    kind = "compile" if verb == debug_text.FAILED_TO_COMPILE else "execute"
    assert debug_text.failure_of(first) == (graph_hash, kind, message)
    assert [debug_text.saved_hlo_of(line) for line in rest] == ([hlo_path] if hlo_path else [])
