"""Opening a log for reading, plain or gzip-compressed, and telling text from binary data.

One opener for every reader of xladev's files: `xladev report` (`xladev.report.inputs`) and the
TUI's replay (`xladev_tui.sources`) read the same files the same way. Standard library only.
"""

from __future__ import annotations

import zlib
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(head: bytes) -> bool:
    """True when a file's first bytes start gzip-compressed data.

    Args:
      head: the first bytes (two are enough).

    Returns:
      True for gzip's magic number.
    """
    return head[:2] == GZIP_MAGIC


def open_log(path: str) -> BinaryIO:
    """Opens a file for binary reading, decompressed when it is gzip (see `SalvagingGzip`).

    Args:
      path: the file.

    Returns:
      A binary stream with ``read(n)``, ``peek(n)`` and ``close()``; a gzip file's stream also has
      ``error``, which says what was wrong once reading stopped at damage (None while it is whole).

    Raises:
      OSError: the file cannot be opened (FileNotFoundError, IsADirectoryError, PermissionError ...).
    """
    raw = open(path, "rb")
    try:
        compressed = is_gzip(raw.peek(2))
    except OSError:
        raw.close()
        raise
    return SalvagingGzip(raw) if compressed else raw  # type: ignore[return-value]


class SalvagingGzip:
    """Decompresses a gzip file as far as it is whole: a truncated or corrupt file gives every byte
    before the damage, then ends, and `error` says what was wrong (gzip.GzipFile raises instead and
    loses the last buffer of complete records).

    Args:
      raw: the compressed file, opened for binary reading.
    """

    CHUNK = 1 << 16

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._buffer = b""
        self._done = False
        self._member_started = False
        self.compressed_read = 0
        self.error: str | None = None
        self.corrupt = False  # the data is wrong, not just cut short: text before the error may be garbled

    def _fill(self, wanted: int) -> None:
        while len(self._buffer) < wanted and not self._done:
            data = self._inflate.unused_data or self._raw.read(self.CHUNK)
            if self._inflate.unused_data:  # a file of several gzip members (`cat a.gz b.gz`)
                self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            if not data:
                self._done = True
                if self._member_started and not self._inflate.eof:
                    self.error = f"the gzip data ends early (cut off after {self.compressed_read:,} bytes)"
                return
            before = self._inflate.copy()
            try:
                self._buffer += self._inflate.decompress(data)
            except zlib.error as exc:
                self._salvage(before, data, exc)
                return
            self.compressed_read += len(data)
            self._member_started = not self._inflate.eof

    def _salvage(self, inflate, data: bytes, exc: zlib.error) -> None:
        """Decompresses the damaged chunk again in small steps, keeping what comes before the damage."""
        step = 64
        for start in range(0, len(data), step):
            try:
                self._buffer += inflate.decompress(data[start:start + step])
            except zlib.error:
                break
            self.compressed_read += len(data[start:start + step])
        self._done = True
        self.corrupt = True
        reason = str(exc).split(": ", 1)[-1]  # zlib's "Error -3 while decompressing data: <reason>"
        where = f"after about {self.compressed_read:,} bytes" if self.compressed_read else "at its start"
        self.error = f"the gzip data is corrupt {where} ({reason})"

    def peek(self, size: int = 1) -> bytes:
        """The next bytes without consuming them (at least `size` unless the data ends first)."""
        self._fill(max(size, 1))
        return self._buffer

    def read(self, size: int = -1) -> bytes:
        """Up to `size` decompressed bytes (all that is left when `size` is negative); b"" at the end."""
        if size is None or size < 0:
            self._fill(float("inf"))  # type: ignore[arg-type]
            size = len(self._buffer)
        else:
            self._fill(size)
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def close(self) -> None:
        """Closes the compressed file."""
        self._raw.close()


def looks_binary(head: bytes) -> bool:
    """True when the first bytes of a (decompressed) file are binary data rather than text.

    A NUL byte, or more than 5% of undecodable bytes and control characters (other than tabs,
    line and page breaks and the escape of terminal colours) in the first 8 KiB. UTF-16 text has
    NULs: test for its byte-order mark first.

    Args:
      head: the first bytes.

    Returns:
      True for binary data.
    """
    sample = head[:8192]
    if b"\x00" in sample:
        return True
    text = sample.decode("utf-8", "replace")
    bad = text.count("\ufffd") + sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b")
    return bool(text) and bad > 0.05 * len(text)
