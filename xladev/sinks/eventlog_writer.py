"""The event-log writer: every runtime event as one JSON line (`xladev.schema.records`, docs/event-log.md).

    XLADEV_EVENT_LOG=run.events.jsonl python train.py
    xladev tui run.events.jsonl        # watch it live, or replay it later
    xladev report run.events.jsonl     # diagnose it

The first line is a header (schema, command line, pid, versions, device, start time); then one
record per event. A graph's IR text is written once per graph hash (a `graph` record), never per
step. Lines are buffered and written with one `os.write` of whole lines on every step, after each
compile and at exit, so a killed process leaves only complete lines (at most the last one cut).
Each rank writes its own file: `path.<rank>` when WORLD_SIZE > 1.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import threading
import time

from xladev._flags import config
from xladev.events import bus, ending
from xladev.schema import records as rec
from xladev.sinks._lifecycle import Sink
from xladev.sinks._output import OutputFile
from xladev.schema.ranks import per_rank_path, rank_and_world
from xladev.sinks.event_records import RecordBuilder

FLUSH_BYTES = 64 * 1024          # write when this much is buffered...
FLUSH_INTERVAL_NS = 250_000_000  # ...or when the oldest buffered line is this old (checked on each event)
# Records worth a write at once: a step ended, a compile (which may be followed by a long pause), a warning.
_URGENT = (rec.Step, rec.CompileStart, rec.Compile, rec.GraphGrowing, rec.MemoryGrowing, rec.CompileFailed, rec.ExecuteFailed, rec.Profile)


def log_path(path: str) -> str:
    """The file this process writes for `path`: `path.<rank>` when WORLD_SIZE > 1."""
    return per_rank_path(path)


class EventLog(Sink):
    """A bus subscriber that appends the JSONL event log of this process to one file."""

    def __init__(self, path: str, strict: bool = True) -> None:
        """Opens the log (emptied) and writes its header.

        Args:
          path: XLADEV_EVENT_LOG's value; `path.<rank>` is written when WORLD_SIZE > 1.
          strict: raise when the file cannot be opened (`event_log.start` from code); else say so once on
            stderr and leave the log off (`OutputFile`), as for XLADEV_EVENT_LOG at start-up.

        Raises:
          ConfigError: (strict only) the file cannot be opened.
        """
        self.path = log_path(path)
        self.file = OutputFile("XLADEV_EVENT_LOG", path, self.path, truncate=True, strict=strict)
        self._lock = threading.Lock()
        self._buffer: list[str] = []
        self._buffered = 0
        self._oldest_ns = 0
        self._closed = self.file.off
        self.clock0 = time.perf_counter_ns()
        self._records = RecordBuilder(self.clock0)
        self.wants_frames = True
        self._write_header()

    # ---- life cycle ---------------------------------------------------------------------------
    def _write_header(self) -> None:
        rank, world = rank_and_world()
        now = bus.started_unix
        runtime = bus.runtime_description()
        header = rec.Header(
            command=" ".join([os.path.basename(sys.executable)] + list(sys.argv)), argv=list(sys.argv),
            cwd=os.getcwd(), pid=os.getpid(), host=socket.gethostname(), rank=rank, world_size=world,
            versions={"python": sys.version.split()[0], **runtime.get("versions", {})},
            device=runtime.get("device", "unknown (no runtime started)"), start_unix=now,
            start_iso=datetime.datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds"),
            clock_start_ns=self.clock0, api=bus.api, runtime=runtime.get("runtime"), absent=runtime.get("absent"))
        if not self.file.write((rec.dumps(header) + "\n").encode()):
            self._closed = True

    @property
    def off(self) -> bool:
        """True once the file could not be opened or written: the log is closed."""
        return self.file.off

    def start(self) -> "EventLog":
        if self.subscription is None and not self._closed:
            Sink.start(self)
            ending.at_end(self.close)
        return self

    def close(self, reason: str | None = None) -> None:
        """Stops listening, writes the `end` record and flushes; idempotent.

        Args:
          reason: the end record's reason; None at the end of the run: `exit`, or `terminated` when SIGTERM
            ends the process (with the signal's name in its `signal` field, see `ending.end_reason`).
        """
        self.stop()
        ending.forget(self.close)
        signal_name = None
        if reason is None:
            reason, signal_name = ending.end_reason()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._append(rec.End(time.perf_counter_ns() - self.clock0, reason, self._records.steps, signal_name),
                         time.perf_counter_ns())
            self._flush_locked()
            self.file.close()

    # ---- writing ------------------------------------------------------------------------------
    def _append(self, record: rec.Record, now_ns: int) -> None:
        line = rec.dumps(record)
        if not self._buffer:
            self._oldest_ns = now_ns
        self._buffer.append(line)
        self._buffered += len(line) + 1

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        data = ("\n".join(self._buffer) + "\n").encode()
        self._buffer.clear()
        self._buffered = 0
        if not self.file.write(data):  # whole lines; a line cut by the failure is taken back off
            self._closed = True
            self.stop()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def on_event(self, event) -> None:
        with self._lock:  # events come from any thread (a loader's uploads): the builder's state is shared
            if self._closed:
                return
            records = self._records.records(event)
            if not records:
                return
            urgent = isinstance(records[-1], _URGENT)
            for record in records:
                self._append(record, event.time_ns)
            if urgent or self._buffered >= FLUSH_BYTES or event.time_ns - self._oldest_ns >= FLUSH_INTERVAL_NS:
                self._flush_locked()


_active: EventLog | None = None
_active_lock = threading.Lock()


def start(path: str, strict: bool = True) -> EventLog | None:
    """Starts writing the event log to `path` (`path.<rank>` when WORLD_SIZE > 1); stops a running one.

    Args:
      path: the log's path.
      strict: raise when the file cannot be opened; else say so on stderr once and return None.

    Raises:
      ConfigError: (strict only) the file cannot be opened for writing.
    """
    global _active
    with _active_lock:
        if _active is not None:
            _active.close("stop")
        log = EventLog(path, strict=strict)
        _active = log.start() if not log.off else None
        return _active


def stop() -> str | None:
    """Stops the event log (writes its `end` record); returns the file written, or None."""
    global _active
    with _active_lock:
        log, _active = _active, None
    if log is None:
        return None
    log.close("stop")
    return log.path


def active() -> EventLog | None:
    return _active


def start_from_flags() -> EventLog | None:
    """Starts the log when XLADEV_EVENT_LOG names a path (called once at import)."""
    if config.event_log and _active is None:
        return start(config.event_log, strict=False)  # a file that cannot be written: one line, the run goes on
    return _active
