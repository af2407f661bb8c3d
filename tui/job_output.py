"""The job's output, kept next to its event log so that a later replay shows it too.

`ChildProcessSource` (tui.sources) writes every line of the child's output it shows to
``<log>.stdout`` (`output_path`), in the order the lines arrived: stdout lines as printed, stderr
lines prefixed ``[stderr] `` (as the log pane shows them). `FileTailSource` reads that file back
with an `OutputReader`, and follows it while it grows (a second UI following the same run).
"""

from __future__ import annotations

from xladev_tui.run_model import OUTPUT

OUTPUT_SUFFIX = ".stdout"
STDERR_PREFIX = "[stderr] "
READ_CHUNK = 1 << 20


def output_path(log_path: str) -> str:
    """Where the output of the job logging to `log_path` is kept: ``<log_path>.stdout``."""
    return log_path + OUTPUT_SUFFIX


def output_line(stream: str, text: str) -> str:
    """A line of the output file: stdout as printed, another stream prefixed (as the log pane shows it)."""
    return text if stream == "stdout" else f"[{stream}] {text}"


def parse_output_line(line: str) -> tuple:
    """The OUTPUT item (tui.run_model) of a line of the output file."""
    if line.startswith(STDERR_PREFIX):
        return (OUTPUT, "stderr", line[len(STDERR_PREFIX):])
    return (OUTPUT, "stdout", line)


class OutputWriter:
    """Writes the output lines of items (OUTPUT tuples) to the output file; never raises.

    Args:
      path: the output file (truncated).

    Attributes:
      error: why the output is not kept ("" while it is).
    """

    def __init__(self, path: str):
        self.path = path
        self.error = ""
        try:
            self._fh = open(path, "w", encoding="utf-8")
        except OSError as exc:  # the output is still shown, just not kept
            self._fh = None
            self.error = f"cannot keep the output in {path}: {exc.strerror or exc}"

    def write(self, items) -> None:
        """Appends the OUTPUT items among `items`, and flushes (a follower sees them at once)."""
        fh = self._fh
        if fh is None:
            return
        try:
            for item in items:
                if item[0] == OUTPUT:
                    fh.write(output_line(item[1], item[2]) + "\n")
            fh.flush()
        except (OSError, ValueError):  # disk full, or closed meanwhile: keep showing, stop keeping
            self._fh = None

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()


class OutputReader:
    """Follows an output file: each `read` returns the OUTPUT items of its new complete lines.

    Args:
      path: the output file; a file that is not there (yet) reads as no lines.
    """

    def __init__(self, path: str):
        self.path = path
        self._fh = None
        self._pending = b""

    def read(self, everything: bool = False) -> list[tuple]:
        """New complete lines (all that is left, the last unfinished one too, when `everything`)."""
        items: list[tuple] = []
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")
            except OSError:  # none (yet): a run without a UI, or one still starting
                return items
        while True:
            data = self._fh.read(READ_CHUNK)
            if not data:
                break
            lines = (self._pending + data).split(b"\n")
            self._pending = lines.pop()
            items.extend(parse_output_line(raw.decode("utf-8", "replace")) for raw in lines)
            if not everything:
                break
        if everything and self._pending:
            items.append(parse_output_line(self._pending.decode("utf-8", "replace")))
            self._pending = b""
        return items

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()
