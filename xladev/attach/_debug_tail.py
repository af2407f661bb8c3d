"""The tail of PyTorch/XLA's PT_XLA_DEBUG_FILE in a real torch_xla run: each step barrier notes where it ends
(`size`), and the adapter's thread parses up to there (`read(upto)`), so that each block goes to its step.

A steady training step appends the same Execution Analysis block every time (the same graph hash, cause and
frames), and parsing it line by line costs more than the rest of the barrier's work together. So a chunk made
of execution blocks alone, read while no block was open, is parsed once: when the same bytes come again, the
blocks parsed then are handed on again. Anything else (a compile, its sizes, PyTorch/XLA's profiler lines, a
block cut by the read) goes through the report's reader line by line.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable

from xladev.dumps.debug_analysis import DebugLog
from xladev.schema.debug_text import GraphEvent

# Distinct chunks kept parsed: a loop alternating a few graphs repeats a few chunks.
_MAX_CACHED_CHUNKS = 64
_EXECUTION_PREFIX = "Execution Analysis:"


class _BlockReader(DebugLog):
    """The report's PT_XLA_DEBUG reader, handing on each block as it closes."""

    def __init__(self, sink: Callable[[GraphEvent], None]) -> None:
        super().__init__(warn=lambda *args, **kwargs: None)  # a damaged block is skipped, the run goes on
        self._sink = sink

    def _emit(self, event: GraphEvent) -> None:
        super()._emit(event)
        self._sink(event)


class DebugFileTail:
    """Reads the analysis blocks PyTorch/XLA appends to its PT_XLA_DEBUG_FILE, from where it stood at start.

    Only whole lines are parsed; a line still being written waits for the next read. The blocks handed on are
    read-only: a repeated chunk hands on the same objects again.

    Args:
      path: the file; None when PyTorch/XLA's analysis goes elsewhere (nothing is read).
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._offset = 0
        if path and os.path.exists(path):
            self._offset = os.path.getsize(path)  # an earlier run's blocks in an appended file are not this run's
        self._handle = None
        self._rest = b""
        self._lineno = 0
        self.blocks: deque[GraphEvent] = deque()
        self._reader = _BlockReader(self.blocks.append)
        self._parsed: dict[bytes, tuple[int, tuple[GraphEvent, ...]]] = {}  # chunk -> (its lines, its blocks)
        self.chunks_reused = 0  # reads answered from a chunk parsed before

    def _open(self) -> bool:
        if self._handle is None:
            try:  # kept open: opening the file at every barrier costs as much as reading it
                self._handle = open(self.path, "rb")
            except OSError:
                return False
            self._handle.seek(self._offset)
        return True

    def _new_bytes(self, upto: int | None) -> bytes:
        if not self._open():
            return b""
        try:
            data = self._handle.read() if upto is None else self._handle.read(max(0, upto - self._offset))
        except OSError:
            return b""
        self._offset += len(data)
        return data

    def size(self) -> int:
        """How long the file is now (where a `read(upto=...)` stops): a barrier notes it, and the parse of what it
        marks waits for the adapter's thread."""
        if not self.path or not self._open():
            return self._offset
        try:
            return os.fstat(self._handle.fileno()).st_size
        except OSError:
            return self._offset

    def read(self, upto: int | None = None) -> None:
        """Parses what was appended since the last read; new blocks go to `blocks`.

        Args:
          upto: read no further than this byte of the file (a `size()` noted earlier); None: to its end.
        """
        if not self.path:
            return
        data = self._rest + self._new_bytes(upto)
        cut = data.rfind(b"\n") + 1
        self._rest, chunk = data[cut:], data[:cut]
        if not chunk:
            return
        reader = self._reader
        known = self._parsed.get(chunk)
        if known is not None and reader.between_blocks():
            lines, blocks = known
            self._lineno += lines
            self.blocks.extend(blocks)
            self.chunks_reused += 1
            return
        fresh = reader.between_blocks()
        first = len(self.blocks)
        lines = chunk.decode("utf-8", "replace").splitlines()
        for line in lines:
            self._lineno += 1
            reader.feed(self._lineno, line)
        blocks = tuple(self.blocks)[first:]
        if (fresh and blocks and reader.between_blocks() and len(self._parsed) < _MAX_CACHED_CHUNKS
                and all(line.startswith(_EXECUTION_PREFIX) or not line.strip() for line in lines)):
            self._parsed[chunk] = (len(lines), blocks)

    def close(self) -> None:
        """Closes the file (the end of the run)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
