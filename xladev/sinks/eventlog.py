"""The event log: every runtime event as one JSON line (schema `xladev.events/1`, docs/event-log.md).

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

import atexit
import datetime
import json
import os
import socket
import sys
import threading
import time

from xladev._flags import ConfigError, config
from xladev.events import (
    CompileFailed, DeviceDataCacheMiss, FallbackOp, GraphCompiled, GraphExecuted, GraphGrowing, OpsRecorded, StepMarked,
    TransferFromDevice, TransferToDevice, bus,
)
from xladev.report.eventlog_input import SCHEMA_NAME, SCHEMA_VERSION
from xladev.sinks._ranks import per_rank_path, rank_and_world
from xladev.sinks.analysis.blocks import cause_text
from xladev.sinks.analysis.frames import is_user

FLUSH_BYTES = 64 * 1024          # write when this much is buffered...
FLUSH_INTERVAL_NS = 250_000_000  # ...or when the oldest buffered line is this old (checked on each event)

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def log_path(path: str) -> str:
    """The file this process writes for `path`: `path.<rank>` when WORLD_SIZE > 1."""
    return per_rank_path(path)


def _versions() -> dict:
    import jax
    import jaxlib
    import torch

    import xladev

    return {"xladev": getattr(xladev, "__version__", "?"), "torch": torch.__version__, "jax": jax.__version__,
            "jaxlib": getattr(jaxlib, "__version__", "?"), "python": sys.version.split()[0]}


def _device() -> str:
    try:
        from xladev.runtime.backend import device_kind

        return device_kind()
    except Exception as exc:  # the log is still useful without it
        return f"unknown ({type(exc).__name__}: {exc})"


class EventLog:
    """A bus subscriber that appends the JSONL event log of this process to one file."""

    def __init__(self, path: str) -> None:
        self.path = log_path(path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise ConfigError(f"XLADEV_EVENT_LOG={path!r} cannot be opened for writing: {exc.strerror}") from None
        self._lock = threading.Lock()
        self._buffer: list[str] = []
        self._buffered = 0
        self._oldest_ns = 0
        self._graphs: set[str] = set()
        self._user_file: dict[str, bool] = {}
        self._causes: dict = {}
        self._last_step_ns: int | None = None
        self._steps = 0
        self._closed = False
        self.clock0 = time.perf_counter_ns()
        self.subscription = None
        self._write_header()

    # ---- life cycle ---------------------------------------------------------------------------
    def _write_header(self) -> None:
        rank, world = rank_and_world()
        now = time.time()
        header = {
            "type": "header", "schema": f"{SCHEMA_NAME}/{SCHEMA_VERSION}", "version": SCHEMA_VERSION,
            "command": " ".join([os.path.basename(sys.executable)] + list(sys.argv)), "argv": list(sys.argv),
            "cwd": os.getcwd(), "pid": os.getpid(), "host": socket.gethostname(), "rank": rank, "world_size": world,
            "versions": _versions(), "device": _device(), "start_unix": now,
            "start_iso": datetime.datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds"),
            "clock": "perf_counter_ns", "clock_start_ns": self.clock0,
        }
        os.write(self._fd, (_dumps(header) + "\n").encode())

    def start(self) -> "EventLog":
        if self.subscription is None:
            self.subscription = bus.subscribe(self.on_event, wants_frames=True)
            atexit.register(self.close)
        return self

    def close(self, reason: str = "exit") -> None:
        """Stops listening, writes the `end` record and flushes; idempotent."""
        if self.subscription is not None:
            self.subscription.close()
            self.subscription = None
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._append({"type": "end", "t": time.perf_counter_ns() - self.clock0, "reason": reason,
                           "steps": self._steps}, time.perf_counter_ns())
            self._flush_locked()
            try:
                os.close(self._fd)
            except OSError:
                pass
        try:
            atexit.unregister(self.close)
        except Exception:  # pragma: no cover
            pass

    # ---- writing ------------------------------------------------------------------------------
    def _append(self, record: dict, now_ns: int) -> None:
        line = _dumps(record)
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
        view = memoryview(data)
        try:
            while view:  # whole lines, in as few writes as the kernel allows
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            print(f"xladev: event log {self.path}: write failed ({exc.strerror}); logging stopped", file=sys.stderr)
            self._closed = True
            if self.subscription is not None:
                self.subscription.close()
                self.subscription = None

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _site(self, frames) -> tuple[str | None, dict | None]:
        """(`file:line (function)`, frame dict) of the first user frame, as `site_of` says."""
        if not frames:
            return None, None
        chosen = None
        cache = self._user_file
        for frame in frames:
            user = cache.get(frame.file)
            if user is None:
                user = cache[frame.file] = is_user(frame)
            if user:
                chosen = frame
                break
        if chosen is None:
            chosen = frames[-1]
        return (f"{chosen.file}:{chosen.line} ({chosen.name})",
                {"file": chosen.file, "line": chosen.line, "name": chosen.name})

    def _cause(self, cause) -> dict:
        record = self._causes.get(cause)
        if record is None:  # causes repeat every step: build each one's record once
            record = self._causes[cause] = {"kind": cause.kind.name, "text": cause_text(cause), "detail": cause.detail}
        return record

    def _graph_record(self, event, t: int) -> dict | None:
        if event.graph_hash in self._graphs or event.graph is None:
            return None
        self._graphs.add(event.graph_hash)
        try:
            from xladev.runtime.irtext import graph_to_text

            ir = graph_to_text(event.graph)
        except Exception as exc:  # never lose the event for want of its text
            ir = f"// IR text unavailable: {type(exc).__name__}: {exc}\n"
        return {"type": "graph", "t": t, "step": event.step, "hash": event.graph_hash, "nodes": event.num_nodes,
                "inputs": event.num_inputs, "outputs": event.num_outputs, "ir": ir}

    def on_event(self, event) -> None:
        kind = type(event)
        t = event.time_ns - self.clock0
        urgent = False
        if kind is GraphExecuted:
            site, frame = self._site(event.frames)
            graph = self._graph_record(event, t) if event.graph_hash not in self._graphs else None
            record = {"type": "execute", "t": t, "step": event.step, "hash": event.graph_hash,
                      "execute_ns": event.execute_ns, "cached": event.cached, "nodes": event.num_nodes,
                      "inputs": event.num_inputs, "outputs": event.num_outputs, "cause": self._cause(event.cause),
                      "site": site, "frame": frame}
            records = (graph, record) if graph else (record,)
        elif kind is StepMarked:
            site, frame = self._site(event.frames)
            previous = self._last_step_ns
            self._last_step_ns = event.time_ns
            self._steps += 1
            records = ({"type": "step", "t": t, "step": event.step, "duration_ns": event.duration_ns,
                        "interval_ns": event.time_ns - (previous if previous is not None else self.clock0),
                        "cause": self._cause(event.cause), "site": site, "frame": frame},)
            urgent = True
        elif kind is TransferToDevice:
            records = ({"type": "transfer", "t": t, "step": event.step, "dir": "to_device", "bytes": event.nbytes,
                        "ns": event.duration_ns, "count": event.count},)
        elif kind is TransferFromDevice:
            site, frame = self._site(event.frames)
            records = ({"type": "transfer", "t": t, "step": event.step, "dir": "from_device", "kind": event.kind,
                        "bytes": event.nbytes, "ns": event.duration_ns, "site": site, "frame": frame},)
        elif kind is OpsRecorded:
            records = ({"type": "ops", "t": t, "step": event.step, "counts": event.counts,
                        "tracing_ns": event.tracing_ns},)
        elif kind is GraphCompiled:
            records = self._compiled(event, t)
            urgent = True
        elif kind is FallbackOp:
            site, frame = self._site(event.frames)
            records = ({"type": "fallback", "t": t, "step": event.step, "op": event.name, "site": site,
                        "frame": frame},)
        elif kind is DeviceDataCacheMiss:
            records = ({"type": "cache_miss", "t": t, "step": event.step, "value": event.value,
                        "dtype": event.dtype},)
        elif kind is GraphGrowing:
            site, frame = self._site(event.frames)
            records = ({"type": "graph_growing", "t": t, "step": event.step, "ops": event.ops,
                        "site": site or event.site, "frame": frame},)
            urgent = True
        elif kind is CompileFailed:
            site, frame = self._site(event.frames)
            records = ({"type": "compile_failed", "t": t, "step": event.step, "hash": event.graph_hash,
                        "message": event.message, "hlo_path": event.hlo_path, "cause": self._cause(event.cause),
                        "site": site, "frame": frame},)
            urgent = True
        else:
            return
        with self._lock:
            if self._closed:
                return
            for record in records:
                self._append(record, event.time_ns)
            if urgent or self._buffered >= FLUSH_BYTES or event.time_ns - self._oldest_ns >= FLUSH_INTERVAL_NS:
                self._flush_locked()

    def _compiled(self, event: GraphCompiled, t: int) -> tuple:
        site, frame = self._site(event.frames)
        record = {"type": "compile", "t": t, "step": event.step, "hash": event.graph_hash, "nodes": event.num_nodes,
                  "inputs": event.num_inputs, "outputs": event.num_outputs, "compile_ns": event.compile_ns,
                  "memory": dict(event.memory), "cause": self._cause(event.cause), "site": site, "frame": frame,
                  "persistent_cache_hit": event.persistent_cache_hit}
        try:
            from xladev.sinks.analysis.history import site_history

            recompilation = site_history.result_for(event) if event.graph is not None else None
        except Exception:  # a diff bug must not lose the compile record
            recompilation = None
        if recompilation is not None:
            record["recompile"] = {"previous": recompilation.previous_hash, "changes": list(recompilation.changes),
                                   "graphs_at_site": recompilation.graphs_at_site,
                                   "compile_ns_at_site": recompilation.compile_ns_at_site}
        graph = self._graph_record(event, t)
        return (graph, record) if graph else (record,)


_active: EventLog | None = None
_active_lock = threading.Lock()


def start(path: str) -> EventLog:
    """Starts writing the event log to `path` (`path.<rank>` when WORLD_SIZE > 1); stops a running one.

    Raises:
      ConfigError: the file cannot be opened for writing.
    """
    global _active
    with _active_lock:
        if _active is not None:
            _active.close("stop")
        _active = EventLog(path).start()
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
        return start(config.event_log)
    return _active
