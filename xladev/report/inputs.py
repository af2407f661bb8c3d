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

from xladev.report.model import SourceResult, UnreadableInputError
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
        try:
            reader.read_stream(stream)
        except (OSError, EOFError) as error:  # e.g. a truncated gzip file: keep what was read
            source.warn(source.lines + 1, f"reading stopped early: {error}")
        finally:
            reader.finish()


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


class _Utf16AsUtf8:
    """A binary ``read(n)`` stream of UTF-8 bytes over a UTF-16 file (PowerShell's ``>`` writes UTF-16)."""

    def __init__(self, stream: BinaryIO):
        self._text = io.TextIOWrapper(stream, encoding="utf-16", errors="replace", newline="")

    def read(self, size: int = -1) -> bytes:
        return self._text.read(size if size is None or size < 0 else max(1, size // 2)).encode("utf-8")


def _check_text(path: str, head: bytes) -> str | None:
    """Returns ``utf-16`` for UTF-16 text, None for byte-oriented text; raises for binary data."""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if looks_binary(head):
        raise UnreadableInputError(f"{path}: binary data, not a metrics file or log")
    return None


def read_source(path: str, name: str | None = None, max_rows: int = DEFAULT_MAX_ROWS) -> SourceResult:
    """Reads one input with the first reader that accepts it.

    Args:
      path: the file to read (plain text, gzip-compressed text or UTF-16 text).
      name: the display name; ``path`` when None.
      max_rows: rows of the per-step series stored before thinning.

    Returns:
      What was read; check ``warnings`` for malformed parts.

    Raises:
      UnreadableInputError: when the file is missing, a directory, unreadable or binary.
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
        encoding = _check_text(path, head)
        if head.startswith(codecs.BOM_UTF8):
            stream.read(len(codecs.BOM_UTF8))
        readable = _Utf16AsUtf8(stream) if encoding else stream
        for kind in input_kinds(max_rows):
            if kind.sniff(head, path):
                source.input_kind = kind.name
                kind.read(readable, source)
                break
        damage = getattr(stream, "error", None)
        if damage and not source.lines:
            raise UnreadableInputError(f"{path}: cannot read: {damage.split(';')[0]}")
        if damage:
            source.warn(source.lines + 1, f"reading stopped early: {damage}", always=True)
    finally:
        stream.close()
    return source
