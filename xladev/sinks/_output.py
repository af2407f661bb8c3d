"""The files the sinks write, and the one way a file that cannot be written is handled.

`XLA_METRICS_FILE`, `XLA_SAVE_TENSORS_FILE`, `PT_XLA_DEBUG_FILE` and `XLADEV_EVENT_LOG` each append whole
records to a file through an `OutputFile`. When that file cannot be opened, or a write fails (a full disk, a
file-size limit, a permission taken away), xladev prints one line on stderr naming the variable, the file and
the OS error, turns that output off for the rest of the run, and training goes on:

    xladev: cannot write XLA_METRICS_FILE=/x/m.txt: [Errno 28] No space left on device; that output is off for the rest of the run

A record the failure cut short is cut off again (the file is truncated back to where that record began), so
the file holds only the complete records written before, each still readable.
"""

from __future__ import annotations

import os
import threading

from xladev._flags import ConfigError
from xladev.events import ending

_OFF = "that output is off for the rest of the run"


def describe(variable: str, value: str, path: str, exc: OSError) -> str:
    """What cannot be written, and why: `cannot write VAR=value (file path): [Errno N] reason`.

    Args:
      variable: the environment variable that names the output.
      value: the variable's value (the path the user gave).
      path: the file actually written (the value, or `value.<rank>`).
      exc: the OS error.

    Returns:
      The sentence, without the `xladev: ` prefix.
    """
    where = f"{variable}={value}" + ("" if path == value else f" (file {path})")
    reason = f"[Errno {exc.errno}] {exc.strerror}" if exc.errno is not None else str(exc)
    return f"cannot write {where}: {reason}"


class OutputFile:
    """An append-only file of whole records, each written at once; off for good after the first failure.

    Attributes:
      variable: the environment variable that names this output (for the failure line).
      value: the path as the user gave it.
      path: the file written.
      off: True once the file could not be opened or written; writes then do nothing.
    """

    def __init__(self, variable: str, value: str, path: str | None = None, truncate: bool = False,
                 strict: bool = False) -> None:
        """Opens the file (created if missing).

        Args:
          variable: the environment variable that names this output.
          value: the path as the user gave it.
          path: the file to write, when not `value` itself (a rank's `value.<rank>`).
          truncate: start the file empty, rather than append to it.
          strict: raise when the file cannot be opened (an API call that asked for this file), rather than
            say so on stderr and go on with the output off.

        Raises:
          ConfigError: (strict only) the file cannot be opened; the message names the variable and the error.
        """
        self.variable, self.value = variable, value
        self.path = value if path is None else path
        self.off = False
        self._fd: int | None = None
        self._lock = threading.Lock()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if truncate else 0)
        try:
            self._fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            if strict:
                raise ConfigError(describe(variable, value, self.path, exc)) from None
            self._fail(exc)

    def write(self, data: bytes) -> bool:
        """Appends one or more whole records.

        Returns:
          True when written; False when the output is off (now or before), the failure already told once.
        """
        with self._lock:
            if self.off:
                return False
            view = memoryview(data)
            written = 0
            try:
                while written < len(view):  # a short write (the disk filling up) is followed by the error itself
                    n = os.write(self._fd, view[written:])
                    if n <= 0:
                        raise OSError(28, os.strerror(28))
                    written += n
            except OSError as exc:
                self._cut_partial(written)
                self._fail(exc)
                return False
            return True

    def close(self) -> None:
        """Closes the file; later writes do nothing. Idempotent."""
        with self._lock:
            fd, self._fd = self._fd, None
            self.off = True
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _cut_partial(self, written: int) -> None:
        # The part of the record that made it to the file would end it with a cut record: take it back off.
        if not written:
            return
        try:
            end = os.lseek(self._fd, 0, os.SEEK_END)
            os.ftruncate(self._fd, max(end - written, 0))
        except OSError:
            pass  # the readers skip a cut last record all the same

    def _fail(self, exc: OSError) -> None:
        """Turns the output off and says so once (the caller holds the lock, or is the constructor)."""
        self.off = True
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        ending.say(f"{describe(self.variable, self.value, self.path, exc)}; {_OFF}")
