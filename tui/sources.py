"""Where the TUI's records come from: a growing file, a child process, or a fixture.

A source is read from one background thread. `read(timeout)` returns the items that arrived (see
`tui.run_model`: LINE, OUTPUT, STATUS, TRUNCATED, NOTICE), waiting at most `timeout` seconds when
there are none. Sources never raise for what the followed job does (a file that vanishes, a
child that crashes): they report it as a state.

The child's output survives the run: `ChildProcessSource` keeps every line it shows in a file next
to the event log, ``<log>.stdout``, and `FileTailSource` reads it back (tui.job_output), so a later
``xladev tui run.events.jsonl`` shows the output too.
"""

from __future__ import annotations

import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Iterable, Protocol

from xladev_tui.run_model import DISCONNECTED, ERROR, EXITED, LINE, NOTICE, OUTPUT, RUNNING, STATUS, TRUNCATED, WAITING
from xladev.schema.opener import SalvagingGzip, is_gzip, looks_binary
from xladev.schema.records import Header, NotAnEventLog, RecordError, is_end_line, parse_line
from xladev.schema.log_header import check_first_line
from xladev_tui.job_output import OutputReader, OutputWriter, output_path

__all__ = ["ChildProcessSource", "FileTailSource", "FixtureSource", "Source", "output_path", "pid_alive"]

READ_CHUNK = 1 << 20
class Source(Protocol):
    """What the TUI reads records from."""

    label: str          # the file or command, shown until the log's header arrives
    owns_child: bool    # True when quitting the UI would stop a process the UI started

    def start(self) -> None:
        """Begins (opens the file, starts the child)."""

    def read(self, timeout: float) -> list[tuple]:
        """Items that arrived since the last call; waits up to `timeout` s when there are none."""

    def child_running(self) -> bool:
        """True while a child started by this source runs."""

    def stop(self) -> None:
        """Releases everything; stops the child if this source started one."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


class FileTailSource:
    """Follows an event log as it grows (`tail -f`), or replays a finished one; a gzip-compressed log
    (``run.events.jsonl.gz``) is replayed to its end, as `xladev report` reads it.

    States: `waiting` while the file is missing or empty; `running` once the header is read;
    `finished` at the log's `end` record (reported by the model); `disconnected` when the writer
    (the header's pid, on this host) is gone without an `end` record, or the file shrank or vanished,
    or a compressed log ends without an `end` record; `error` when the file is no event log, or a
    compressed log is damaged (after every complete record before the damage).

    Args:
      path: the log file.
      clock: monotonic seconds.
      check_writer: watch the header's pid to notice a killed writer (off when a `ChildProcessSource`
        watches the process itself).
      idle_before_check: seconds without new data before the writer's pid is checked.
      read_output: also read (and follow) the job's saved output, ``<path>.stdout``, when there is one
        (off for the `ChildProcessSource` that writes it).
    """

    owns_child = False

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic, check_writer: bool = True,
                 idle_before_check: float = 0.5, poll_interval: float = 0.02, read_output: bool = True):
        self.path = path
        self.label = path
        self.clock = clock
        self.check_writer = check_writer
        self.idle_before_check = idle_before_check
        self.poll_interval = poll_interval
        self._fh = None
        self._compressed = False
        self._pending = b""
        self._offset = 0
        self._header: Header | None = None
        self._ended = False
        self._last_data = clock()
        self._state: str | None = None
        self._said_waiting = False
        self._done = False
        self._output = OutputReader(output_path(path)) if read_output else None

    def start(self) -> None:
        self._open()

    def _open(self) -> bool:
        if self._fh is not None:
            return True
        try:
            self._fh = open(self.path, "rb")
        except FileNotFoundError:
            return False
        except OSError as exc:
            self._fail(f"cannot read {self.path}: {exc.strerror or exc}")
            return False
        self._last_data = self.clock()
        return True

    def _fail(self, text: str) -> None:
        self._done = True
        self._error = text

    def _status(self, items: list, state: str, detail: str = "", code: int | None = None) -> None:
        if self._state != state:
            self._state = state
            items.append((STATUS, state, detail, code))

    def read(self, timeout: float) -> list[tuple]:
        deadline = self.clock() + timeout
        while True:
            items = self.read_now()
            if items or self._done or self.clock() >= deadline:
                return items
            time.sleep(min(self.poll_interval, max(0.0, deadline - self.clock())))

    def read_now(self) -> list[tuple]:
        """What is there now, without waiting."""
        items: list[tuple] = []
        if self._done:
            error = getattr(self, "_error", None)
            if error:
                self._error = None
                self._status(items, ERROR, error)
            return items
        if self._fh is None and not self._open():
            if self._done:
                return self.read_now()
            if not self._said_waiting:
                self._said_waiting = True
                self._status(items, WAITING, f"waiting for {self.path} to appear (start the job with "
                                             f"XLADEV_EVENT_LOG={self.path})")
            return items
        self._read_output(items)  # the output first, as a ChildProcessSource hands it out
        data = self._fh.read(READ_CHUNK)
        if self._offset == 0 and is_gzip(data):
            # Compressed: decompressed from its start, as far as it is whole (the opener `xladev report` uses).
            self._fh.seek(0)
            self._fh = SalvagingGzip(self._fh)
            self._compressed = True
            data = self._fh.read(READ_CHUNK)
        if data:
            self._offset += len(data)
            self._last_data = self.clock()
            self._take(data, items)
        elif self._compressed:
            self._compressed_end(items)
        else:
            self._check_idle(items)
        return items

    def _read_output(self, items: list, everything: bool = False) -> None:
        if self._output is not None:
            items.extend(self._output.read(everything))

    def _take(self, data: bytes, items: list) -> None:
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        if self._header is None and not any(line.strip() for line in lines) and looks_binary(self._pending):
            lines, self._pending = [self._pending], b""  # binary data: no newline will make it a header
        for raw in lines:
            if self._header is None:
                if not raw.strip():
                    continue
                try:
                    self._header = check_first_line(self.path, raw)
                except NotAnEventLog as exc:
                    self._not_a_log(items, str(exc))
                    return
                self._status(items, RUNNING)
            elif not self._ended and is_end_line(raw):
                self._ended = True
            items.append((LINE, raw.decode("utf-8", "replace")))
        if self._header is None and len(self._pending) > READ_CHUNK:
            self._not_a_log(items, f"{self.path} is not an xladev event log: no header line in its first MiB")

    def _not_a_log(self, items: list, message: str) -> None:
        self._fail(message)
        self._status(items, ERROR, message)
        self._error = None

    def _compressed_end(self, items: list) -> None:
        """The end of a compressed log: it does not grow, so how it ended is known now."""
        damage = self._fh.error
        if self._header is None and not damage:
            self._not_a_log(items, f"{self.path} is not an xladev event log: its compressed data holds no "
                                   "complete line")
            return
        self._read_output(items, everything=True)
        self.flush_partial(items)
        if damage:
            self._status(items, ERROR, f"{self.path} is damaged: {damage}; the complete records before it were read")
        elif not self._ended:
            self._status(items, DISCONNECTED, "the compressed log has no end record: the run was killed or "
                                              "crashed, or the log was compressed before the run ended")
        self._done = True

    def _check_idle(self, items: list) -> None:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            if self._header is not None and not self._ended:
                self._disconnect(items, f"{self.path} was removed")
            return
        except OSError:
            return
        if size < self._offset:
            self._disconnect(items, f"{self.path} shrank (rewritten by a new run?); restart the TUI to follow it")
            return
        if self._ended or self._header is None or not self.check_writer:
            return
        if self.clock() - self._last_data < self.idle_before_check:
            return
        pid = self._header.pid
        same_host = self._header.host in (None, "", socket.gethostname())
        if isinstance(pid, int) and same_host and not pid_alive(pid):
            self._disconnect(items, f"the writer (pid {pid}) is gone and the log has no end record: "
                                    "killed or crashed")

    def _disconnect(self, items: list, detail: str) -> None:
        self._read_output(items, everything=True)
        self.flush_partial(items)
        self._status(items, DISCONNECTED, detail)
        self._done = True

    def flush_partial(self, items: list) -> None:
        """Reports an incomplete last line once the writer is known to be gone."""
        if self._pending.strip():
            try:
                parse_line(self._pending)
                whole = True  # a whole record without its newline
            except RecordError:
                whole = False
            if whole:
                items.append((LINE, self._pending.decode("utf-8", "replace")))
            else:
                items.append((TRUNCATED, self._pending.decode("utf-8", "replace")))
        self._pending = b""

    def drain(self) -> list[tuple]:
        """Everything left in the file now, the incomplete last line included (writer gone)."""
        items: list[tuple] = []
        while True:
            batch = self.read_now()
            items.extend(batch)
            if not any(item[0] == LINE for item in batch):
                break
        self.flush_partial(items)
        return items

    @property
    def header(self) -> Header | None:
        return self._header

    def child_running(self) -> bool:
        return False

    def stop(self) -> None:
        self._done = True
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._output is not None:
            self._output.close()


class ChildProcessSource:
    """Runs `argv` (e.g. `python train.py --steps 5`) with XLADEV_EVENT_LOG pointed at a log file,
    follows that log, and captures the child's stdout and stderr for the log pane. What it shows of
    that output it also keeps in ``<log>.stdout`` (`output_path`), for later replays.

    The child's exit is a state (`exited 0`, `exited with code 1`); its last output stays in the
    log pane. `stop()` terminates the child (SIGTERM, then SIGKILL after `kill_after` seconds).

    Args:
      argv: the command; `python` is this interpreter when the command starts with it.
      log_path: where the child writes its event log; a new temporary file when None.
      env: extra environment variables for the child.
    """

    owns_child = True

    def __init__(self, argv: list[str], log_path: str | None = None, env: dict | None = None,
                 clock: Callable[[], float] = time.monotonic, kill_after: float = 3.0, cwd: str | None = None):
        if not argv:
            raise ValueError("no command to run")
        self.argv = list(argv)
        if os.path.basename(self.argv[0]) in ("python", "python3") and not os.path.sep in self.argv[0]:
            self.argv[0] = sys.executable
        self.label = " ".join(shlex.quote(a) for a in argv)
        self.clock = clock
        self.kill_after = kill_after
        self.cwd = cwd
        self._tempdir = None
        if log_path is None:
            self._tempdir = tempfile.mkdtemp(prefix="xladev_tui_")
            log_path = os.path.join(self._tempdir, "run.events.jsonl")
        self.log_path = log_path
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.env["XLADEV_EVENT_LOG"] = log_path
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.pop("WORLD_SIZE", None)  # one process, one log file
        self.output_path = output_path(log_path)
        self._output_file: OutputWriter | None = None
        self.tail = FileTailSource(log_path, clock=clock, check_writer=False, read_output=False)
        self.process: subprocess.Popen | None = None
        self._output: queue.Queue = queue.Queue()
        self._readers: list[threading.Thread] = []
        self._exit_reported = False
        self.exit_code: int | None = None

    def start(self) -> None:
        for path in (self.log_path, self.output_path):
            try:
                os.unlink(path)  # never show an older run's records or output
            except OSError:
                pass
        self._output_file = OutputWriter(self.output_path)
        if self._output_file.error:
            self._output.put((NOTICE, self._output_file.error))
        try:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, env=self.env, cwd=self.cwd,
                                            start_new_session=True)
        except OSError as exc:
            self._output.put((STATUS, EXITED, f"cannot start {self.label}: {exc.strerror or exc}", 127))
            self._exit_reported = True
            self.exit_code = 127
            return
        self._output.put((NOTICE, f"started {self.label} (pid {self.process.pid}); event log: {self.log_path}"))
        self._output.put((STATUS, WAITING, f"waiting for the first records of pid {self.process.pid}", None))
        for name, stream in (("stdout", self.process.stdout), ("stderr", self.process.stderr)):
            thread = threading.Thread(target=self._pump, args=(name, stream), daemon=True,
                                      name=f"xladev-tui-{name}")
            thread.start()
            self._readers.append(thread)
        self.tail.start()

    def _pump(self, name: str, stream) -> None:
        for raw in iter(stream.readline, b""):
            self._output.put((OUTPUT, name, raw.decode("utf-8", "replace").rstrip("\r\n")))
        stream.close()

    def read(self, timeout: float) -> list[tuple]:
        deadline = self.clock() + timeout
        while True:
            items = self._read_now()
            if items or self._exit_reported or self.clock() >= deadline:
                return items
            time.sleep(0.02)

    def _read_now(self) -> list[tuple]:
        items: list[tuple] = []
        self._take_output(items)
        if self._exit_reported:
            return items
        tail_items = self.tail.read_now()
        # The tail's own "waiting" would say "start the job with XLADEV_EVENT_LOG": we started it.
        items.extend(item for item in tail_items if not (item[0] == STATUS and item[1] == WAITING))
        process = self.process
        if process is not None and process.poll() is not None and not any(t.is_alive() for t in self._readers):
            self._take_output(items)  # output printed just before exiting
            items.extend(item for item in self.tail.drain() if not (item[0] == STATUS and item[1] == WAITING))
            code = process.returncode
            if code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = f"signal {-code}"
                detail = f"{self.label} was killed by {name}"
            else:
                detail = f"{self.label} exited with code {code}"
            self.exit_code = code
            items.append((STATUS, EXITED, detail, code))
            self._exit_reported = True
        return items

    def _take_output(self, items: list) -> None:
        """What the pipes' readers queued, in arrival order; the child's lines also go to the output file."""
        start = len(items)
        while True:
            try:
                items.append(self._output.get_nowait())
            except queue.Empty:
                break
        if self._output_file is not None and len(items) > start:
            self._output_file.write(items[start:])

    def child_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except OSError:
                process.terminate()
            try:
                process.wait(self.kill_after)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except OSError:
                    process.kill()
                process.wait()
        self.tail.stop()
        if self._output_file is not None:
            self._output_file.close()


class FixtureSource:
    """Replays given log lines (and optionally output lines and a final state) for tests.

    Args:
      lines: complete event-log lines.
      batch: lines handed out per `read` (all at once when None).
      final: (state, detail, exit_code) reported after the last line, or None to stay as the log says.
      output: (stream, text) lines of child output, handed out first.
      owns_child: pretend a child was started (quitting then asks first).
    """

    def __init__(self, lines: Iterable[str], batch: int | None = None, final: tuple | None = None,
                 output: Iterable[tuple[str, str]] = (), label: str = "fixture", owns_child: bool = False):
        self.label = label
        self.owns_child = owns_child
        self._items = [(OUTPUT, stream, text) for stream, text in output]
        self._items += [(LINE, line.rstrip("\n")) for line in lines]
        if final is not None:
            self._items.append((STATUS, *final))
        self.batch = batch
        self._position = 0
        self._running = owns_child
        self.stopped = False

    def start(self) -> None:
        pass

    def push(self, lines: Iterable[str] = (), status: tuple | None = None) -> None:
        """Adds lines (and a state) to hand out later, as a job writing more would."""
        self._items.extend((LINE, line.rstrip("\n")) for line in lines)
        if status is not None:
            self._items.append((STATUS, *status))

    def read(self, timeout: float) -> list[tuple]:
        if self._position >= len(self._items):
            time.sleep(min(timeout, 0.01))
            return []
        end = len(self._items) if self.batch is None else self._position + self.batch
        items = self._items[self._position:end]
        self._position = min(end, len(self._items))
        return items

    def child_running(self) -> bool:
        return self._running and not self.stopped

    def stop(self) -> None:
        self.stopped = True
