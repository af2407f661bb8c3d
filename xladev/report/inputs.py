"""Opening inputs and choosing the reader for each: the hook for new input kinds.

An input kind is an object with a ``name``, a ``sniff(head, path)`` test on the first bytes and a
``read(stream, source)`` that fills a `SourceResult`. `read_source` opens a file (plain, gzip or
UTF-16 text), rejects binary data, and hands the stream to the first registered kind whose sniff
accepts it. The text kind, which accepts any text, is always tried last; a later reader (the
xladev event log) registers itself with `register_input_kind` and is tried before it.
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
import re
import zlib
from typing import BinaryIO, Protocol

from xladev.report.model import BINARY_DATA, SourceResult, UnreadableInputError
from xladev.report.text_reader import TextReader
from xladev.report.series import DEFAULT_MAX_ROWS
from xladev.schema.opener import looks_binary, open_log

HEAD_BYTES = 64 * 1024
_RANK_SUFFIX_RE = re.compile(r"^(.*)\.(\d+)$")


class InputKind(Protocol):
    """What a reader of one kind of input provides."""

    name: str

    def sniff(self, head: bytes, path: str) -> bool:
        """True when ``head`` (the first bytes, decompressed) looks like this kind of input."""

    def read(self, stream: BinaryIO, source: SourceResult) -> None:
        """Reads the whole input (a binary stream with ``read(n)``) into ``source``."""


class TextInput:
    """Metrics reports, XLA_METRICS_FILE records and PT_XLA_DEBUG output, mixed with other text."""

    name = "text"

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS):
        self.max_rows = max_rows

    def sniff(self, head: bytes, path: str) -> bool:
        return True

    def read(self, stream: BinaryIO, source: SourceResult) -> None:
        reader = TextReader(source, max_rows=self.max_rows)
        cut_short = False
        try:
            reader.read_stream(stream)
        except (OSError, EOFError) as error:  # e.g. a truncated gzip file: keep what was read
            source.warn(source.lines + 1, f"reading stopped early: {error}", at_end=True)
            cut_short = True
        finally:
            # Where the data stops at damage, its last report has no known end: it is not complete.
            reader.finish(cut_short=cut_short or bool(getattr(stream, "error", None)))


_INPUT_KINDS: list[InputKind] = []


def register_input_kind(kind: InputKind) -> None:
    """Adds a reader, tried before those registered earlier and always before the text reader.

    Args:
      kind: the reader; one with the same ``name`` is replaced.
    """
    _INPUT_KINDS[:] = [kind] + [known for known in _INPUT_KINDS if known.name != kind.name]


def unregister_input_kind(name: str) -> None:
    """Removes the reader called ``name`` (the text reader cannot be removed)."""
    _INPUT_KINDS[:] = [known for known in _INPUT_KINDS if known.name != name]


def input_kinds(max_rows: int = DEFAULT_MAX_ROWS) -> list[InputKind]:
    """The readers in the order they are tried (the text reader last)."""
    return list(_INPUT_KINDS) + [TextInput(max_rows)]


def rank_of(path: str) -> tuple[str, int | None]:
    """Splits a per-rank file name: ``metrics.txt.3`` -> (``metrics.txt``, 3).

    Args:
      path: a file path.

    Returns:
      ``(stem, rank)``, or ``(path, None)`` when the name has no numeric suffix.
    """
    match = _RANK_SUFFIX_RE.match(path)
    if match and "." in os.path.basename(match.group(1)):
        return match.group(1), int(match.group(2))
    return path, None


def expand_rank_paths(path: str) -> list[str]:
    """``metrics.txt`` that does not exist but ``metrics.txt.0`` … do: the per-rank files, by rank.

    Args:
      path: a path as given on the command line.

    Returns:
      The per-rank files sorted by rank, or ``[path]``.
    """
    if os.path.exists(path):
        return [path]
    directory = os.path.dirname(path) or "."
    base = os.path.basename(path)
    try:
        names = os.listdir(directory)
    except OSError:
        return [path]
    ranked = sorted((int(name[len(base) + 1:]), name) for name in names
                    if name.startswith(base + ".") and name[len(base) + 1:].isdigit())
    if not ranked:
        return [path]
    return [os.path.join(directory, name) if directory != "." or os.path.dirname(path) else name
            for _, name in ranked]


def _open_binary(path: str) -> BinaryIO:
    if os.path.isdir(path):
        raise UnreadableInputError(f"{path}: is a directory, not a metrics file or log")
    try:
        return open_log(path)
    except FileNotFoundError:
        raise UnreadableInputError(f"{path}: no such file") from None
    except OSError as error:
        raise UnreadableInputError(f"{path}: cannot open ({error.strerror or error})") from None



class _UpToLine:
    """The lines of a stream before line `stop` (1-based), then its end: the part of a corrupt input before the
    first line that reads as garbled. ``error`` is the damage, so the readers treat the end as a cut."""

    def __init__(self, stream: BinaryIO, stop: int, error: str):
        self._stream, self._left, self.error = stream, stop - 1, error

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        data = self._stream.read(size)
        lines = data.split(b"\n")
        if len(lines) - 1 < self._left:
            self._left -= len(lines) - 1
            return data
        kept, self._left = b"\n".join(lines[:self._left]) + b"\n", 0
        return kept


class _Utf16AsUtf8:
    """A binary ``read(n)`` stream of UTF-8 bytes over a UTF-16 file (PowerShell's ``>`` writes UTF-16)."""

    def __init__(self, stream: BinaryIO):
        self._text = io.TextIOWrapper(stream, encoding="utf-16", errors="replace", newline="")

    def read(self, size: int = -1) -> bytes:
        return self._text.read(size if size is None or size < 0 else max(1, size // 2)).encode("utf-8")

    @property
    def error(self) -> str | None:
        """The damage of the compressed file underneath, if any (see `xladev.schema.opener.SalvagingGzip`)."""
        return getattr(self._text.buffer, "error", None)


def _is_utf16(head: bytes) -> bool:
    return head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def _is_binary(head: bytes) -> bool:
    """True when the first bytes are not text (UTF-16 text has NULs but is text)."""
    return not _is_utf16(head) and looks_binary(head)


def read_source(path: str, name: str | None = None, max_rows: int = DEFAULT_MAX_ROWS) -> SourceResult:
    """Reads one input with the first reader that accepts it.

    Args:
      path: the file to read (plain text, gzip-compressed text or UTF-16 text).
      name: the display name; ``path`` when None.
      max_rows: rows of the per-step series stored before thinning.

    Returns:
      What was read; check ``warnings`` for malformed parts, ``damage`` for a gzip file cut short or
      corrupt (what came before the damage is read), ``problem`` for binary data (nothing is read).

    Raises:
      UnreadableInputError: when the file is missing, a directory or cannot be opened or read.
    """
    source, corrupt = _read_source(path, name, max_rows)
    # Corrupt deflate data can decode as garbled text well before zlib notices (often only at the checksum
    # at the end): the first malformed line marks where the damage shows, so read again up to it.
    garbled = source.first_bad_line if corrupt else 0
    if garbled:
        damage = f"{source.damage}; the text is garbled from line {garbled:,}, and only the lines before it are read"
        source, _ = _read_source(path, name, max_rows, (garbled, damage))
    return source


def _read_source(path: str, name: str | None, max_rows: int,
                 stop: tuple[int, str] | None = None) -> tuple[SourceResult, bool]:
    """`read_source` in one pass: the input, and whether its compressed data is corrupt.

    Args:
      stop: (line, damage): read only the lines before that line, and report that damage.
    """
    stem, rank = rank_of(path)
    source = SourceResult(path=path, name=name or path, rank=rank)
    stream = _open_binary(path)
    try:
        try:
            source.size_bytes = os.path.getsize(path)
            head = stream.peek(HEAD_BYTES)[:HEAD_BYTES] if hasattr(stream, "peek") else b""
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as error:
            raise UnreadableInputError(f"{path}: cannot read ({error})") from None
        if _is_binary(head):
            source.problem = BINARY_DATA
        else:
            if head.startswith(codecs.BOM_UTF8):
                stream.read(len(codecs.BOM_UTF8))
            readable = _Utf16AsUtf8(stream) if _is_utf16(head) else stream
            if stop is not None:
                readable = _UpToLine(readable, *stop)
            for kind in input_kinds(max_rows):
                if kind.sniff(head, path):
                    source.input_kind = kind.name
                    kind.read(readable, source)
                    break
        source.damage = stop[1] if stop is not None else getattr(stream, "error", None)
        if source.damage:
            source.warn(source.lines + 1, f"reading stopped early: {source.damage}", always=True, at_end=True)
    finally:
        stream.close()
    return source, getattr(stream, "corrupt", False)
