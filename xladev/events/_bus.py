"""The event bus: synchronous, in-process, thread-safe subscription."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable

from xladev.errors import XladevError
from xladev.events import _ending
from xladev.events._ending import say
from xladev.events._types import Event, Execute

Handler = Callable[[Event], None]


class PropagatingError(XladevError):
    """A handler error meant for the user (e.g. `assert_no_recompiles`): the bus re-raises it."""


@dataclasses.dataclass(frozen=True)
class Subscription:
    """A handle returned by `Bus.subscribe`; pass it to `Bus.unsubscribe` or use as a context manager."""

    bus: "Bus"
    handler: Handler
    kinds: tuple[type, ...] | None
    wants_frames: bool
    late_executions_ok: bool = False

    def close(self) -> None:
        self.bus.unsubscribe(self)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Bus:
    """Delivers events to subscribers in the emitting thread.

    Attributes:
      active: True when anyone listens. The runtime checks it before building an event.
      wants_frames: True when some subscriber asked for Python frames of barriers and transfers.
      executions_may_lag: True when no subscriber needs a step's `Execute` before its barrier
        returns, so the runtime may let the graph run while the next step records.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # When this process's xladev started: with the host and pid, the run's identity in every output
        # (the event log's header, the PT_XLA_DEBUG summary), so the report can tell runs apart.
        self.started_unix = time.time()
        self._subs: tuple[Subscription, ...] = ()
        self._failed: set[Subscription] = set()  # handlers whose failure was told (once each)
        self.active = False
        self.wants_frames = False
        self.executions_may_lag = True
        # Called before a subscriber is added: the runtime announces the executions still in flight, so
        # a new subscriber never receives events of graphs dispatched before it subscribed.
        self.before_subscribe: list[Callable[[], None]] = []
        # Set by the runtime when it starts: a dict with "device" (a description of the backend) and
        # "versions" (package versions), for records that describe the run (the event log's header).
        self.describe_runtime: Callable[[], dict] | None = None
        # The API the script uses (`xladev.analysis.api_names`): "xladev", or "torch_xla" when it runs through xladev's
        # torch_xla alias (`xladev run`), set by the alias on import. The outputs say it, so the advice a report
        # gives uses the names the script uses.
        self.api = "xladev"

    def subscribe(self, handler: Handler, kinds: tuple[type, ...] | type | None = None,
                  wants_frames: bool = False, late_executions_ok: bool = False) -> Subscription:
        """Adds a handler.

        Args:
          handler: called with each event, in the thread that emitted it. It must not raise;
            an exception is reported on stderr (its first one only) and the handler is kept.
          kinds: event classes to receive; all when None.
          wants_frames: ask the runtime to capture Python frames for barriers and transfers.
          late_executions_ok: the handler accepts a step's `Execute` later than the barrier
            (at the next graph run, value read or metrics query), so execution may overlap the
            next step. Subscribers that order events by barrier (per-step records, dumps) keep False.

        Returns:
          The subscription handle.
        """
        if isinstance(kinds, type):
            kinds = (kinds,)
        for hook in self.before_subscribe:
            hook()
        sub = Subscription(self, handler, tuple(kinds) if kinds else None, wants_frames, late_executions_ok)
        with self._lock:
            self._subs = self._subs + (sub,)
            self._refresh()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subs = tuple(s for s in self._subs if s is not sub)
            self._refresh()

    def _refresh(self) -> None:
        self.active = bool(self._subs)
        self.wants_frames = any(s.wants_frames for s in self._subs)
        self.executions_may_lag = all(
            s.late_executions_ok or not (s.kinds is None or issubclass(Execute, s.kinds)) for s in self._subs)

    def runtime_description(self) -> dict:
        """What the runtime says of itself ({"device", "versions"}); empty when no runtime started. Never raises."""
        describe = self.describe_runtime
        if describe is None:
            return {}
        try:
            return dict(describe())
        except Exception as exc:  # a description is never worth a failure
            return {"device": f"unknown ({type(exc).__name__}: {exc})"}

    def wants(self, kind: type) -> bool:
        """True when some subscriber would receive an event of this class."""
        return any(s.kinds is None or issubclass(kind, s.kinds) for s in self._subs)

    def emit(self, event: Event) -> None:
        if _ending.sealed and not _ending.may_emit():  # SIGTERM ended the run: its outputs end where it came
            return
        self._deliver(event)

    def _deliver(self, event: Event) -> None:
        # Its own function, which the ending waits on (`deliveries_run_in`): an emit dropped by the seal never runs it.
        for sub in self._subs:
            if sub.kinds is None or isinstance(event, sub.kinds):
                try:
                    sub.handler(event)
                except PropagatingError:
                    raise
                except Exception as exc:  # a sink bug must never break the training step
                    self._handler_failed(sub, exc)

    def _handler_failed(self, sub: Subscription, exc: Exception) -> None:
        """Tells a handler's first failure on stderr, once: a failure per event would be one line per step."""
        with self._lock:
            if sub in self._failed:
                return
            self._failed.add(sub)
        handler = sub.handler
        owner = getattr(handler, "__self__", None)
        name = f"{type(owner).__name__}.{handler.__name__}" if owner is not None else getattr(
            handler, "__qualname__", repr(handler))
        say(f"event handler {name} failed: {exc!r} (told once; the handler keeps receiving events)")


_ending.deliveries_run_in(Bus._deliver.__code__)
bus = Bus()
