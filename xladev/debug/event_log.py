"""The JSONL event log, from code: the same log as `XLADEV_EVENT_LOG=path`.

    from xladev.debug import event_log
    event_log.start("run.events.jsonl")   # `run.events.jsonl.<rank>` when WORLD_SIZE > 1
    ...train...
    event_log.stop()

Watch it with `xladev tui run.events.jsonl`, diagnose it with `xladev report run.events.jsonl`.
The format is documented in docs/event-log.md.
"""

from __future__ import annotations

__all__ = ["start", "stop", "path"]


def start(path: str) -> str:
    """Starts writing the event log (replacing one already running).

    Args:
      path: the file to write; `path.<rank>` is written instead when WORLD_SIZE > 1.

    Returns:
      The file actually written.

    Raises:
      xladev.ConfigError: the file cannot be opened for writing.
    """
    from xladev.sinks import eventlog_writer as eventlog

    return eventlog.start(path).path


def stop() -> str | None:
    """Stops the event log, writing its `end` record; returns the file written, or None if none ran.

    The graphs still running and the ops and tensors counted since the last barrier are written first, so
    the log's counters equal the in-process ones over the same span.
    """
    from xladev.debug.metrics import _settle_executions
    from xladev.sinks import eventlog_writer as eventlog

    _settle_executions()
    return eventlog.stop()


def path() -> str | None:
    """The file the running event log writes, or None."""
    from xladev.sinks import eventlog_writer as eventlog

    log = eventlog.active()
    return log.path if log is not None else None
