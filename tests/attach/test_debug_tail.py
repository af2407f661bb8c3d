"""The adapter's reader of PyTorch/XLA's PT_XLA_DEBUG_FILE, on real torch_xla 2.9 debug files appended to as a
run appends them: the blocks it hands on are those the report's reader finds in the whole file, whether a chunk
was parsed or recognised as one parsed before."""

from __future__ import annotations

import pytest

from tests.report.helpers import FIXTURES
from xladev.attach._debug_tail import DebugFileTail
from xladev.dumps.debug_analysis import DebugLog

_BLOCK_END = b"=\n\n"  # a block's closing rule, then the blank line that starts the next block


def _fields(event):
    return (event.kind, event.graph_hash, event.cause, tuple(event.frames), event.inputs, event.outputs,
            event.site, dict(event.sizes), event.name)


def _pieces(data: bytes, cut_inside: bool) -> list[bytes]:
    """The file as a run writes it, one block at a time (each block's closing rule ends a piece); with
    `cut_inside`, every third piece is split in the middle of a line, as a read can find it."""
    pieces, start = [], 0
    while (end := data.find(_BLOCK_END, start)) >= 0:
        pieces.append(data[start:end + 2])
        start = end + 2
    pieces.append(data[start:])
    if cut_inside:
        cut = []
        for i, piece in enumerate(pieces):
            if i % 3 == 0 and len(piece) > 10:
                cut += [piece[:len(piece) // 2 + 3], piece[len(piece) // 2 + 3:]]
            else:
                cut.append(piece)
        pieces = cut
    return pieces


@pytest.mark.parametrize("name", ["healthy", "fallback", "item_every_step", "dynamic_shape"])
@pytest.mark.parametrize("cut_inside", [False, True])
def test_the_blocks_handed_on_are_the_files_blocks(tmp_path, name, cut_inside):
    data = (FIXTURES / f"{name}.debug.txt").read_bytes()
    whole = DebugLog(warn=lambda *args, **kwargs: None)
    expected = []
    whole._emit = lambda event, emit=whole._emit: (emit(event), expected.append(_fields(event)))
    for lineno, line in enumerate(data.decode().splitlines(), 1):
        whole.feed(lineno, line)

    path = tmp_path / "debug.txt"
    path.write_bytes(b"an earlier run's line, before the adapter started\n")
    tail = DebugFileTail(str(path))
    seen = []
    with open(path, "ab") as out:
        for piece in _pieces(data, cut_inside):
            out.write(piece)
            out.flush()
            tail.read()
            seen += [_fields(block) for block in tail.blocks]
            tail.blocks.clear()
    tail.close()
    assert seen == expected
    assert sum(kind == "execute" for kind, *_ in seen) >= 24
    if name == "healthy" and not cut_inside:  # a steady step's block comes again and again, byte for byte
        assert tail.chunks_reused >= 20


@pytest.mark.parametrize("cut_inside", [False, True])
def test_blocks_read_later_up_to_each_barriers_mark_go_to_that_barrier(tmp_path, cut_inside):
    # The barrier notes where the file ends; the adapter's thread reads up to each mark later, when the file has
    # grown past it: each block is found at the mark after which it closed, as a read at the barrier found it.
    data = (FIXTURES / "healthy.debug.txt").read_bytes()
    path = tmp_path / "debug.txt"
    at_once, marked = DebugFileTail(str(path)), DebugFileTail(str(path))
    now, marks = [], []
    with open(path, "ab") as out:
        for piece in _pieces(data, cut_inside):
            out.write(piece)
            out.flush()
            at_once.read()
            now.append([_fields(block) for block in at_once.blocks])
            at_once.blocks.clear()
            marks.append(marked.size())
    later = []
    for upto in marks:
        marked.read(upto)
        later.append([_fields(block) for block in marked.blocks])
        marked.blocks.clear()
    at_once.close()
    marked.close()
    assert later == now and sum(map(len, later)) >= 25
    if not cut_inside:
        assert marked.chunks_reused >= 20


def test_a_file_made_after_the_adapter_started_is_read_from_its_start(tmp_path):
    path = tmp_path / "later.txt"
    tail = DebugFileTail(str(path))
    tail.read()  # not there yet: nothing, no error
    path.write_bytes((FIXTURES / "healthy.debug.txt").read_bytes())
    tail.read()
    assert [b.kind for b in tail.blocks].count("compile") == 1
    tail.close()
