"""The life cycle every sink shares: start (subscribe to the bus), stop (unsubscribe), running."""

from __future__ import annotations

from xladev.events import Subscription, bus


class Sink:
    """A bus subscriber with an idempotent `start`/`stop`.

    Subclasses implement `on_event` and may set, before `start`:

    Attributes:
      kinds: the event classes received (None: all).
      wants_frames: ask the runtime for Python frames of barriers and transfers.
      late_executions_ok: accept a step's `Execute` after its barrier (see `Bus.subscribe`).
    """

    kinds: tuple[type, ...] | None = None
    wants_frames: bool = False
    late_executions_ok: bool = False
    subscription: Subscription | None = None

    @property
    def running(self) -> bool:
        return self.subscription is not None

    def start(self) -> "Sink":
        """Subscribes (once); returns the sink."""
        if self.subscription is None:
            self.subscription = bus.subscribe(self.on_event, self.kinds, wants_frames=self.wants_frames,
                                              late_executions_ok=self.late_executions_ok)
        return self

    def stop(self) -> None:
        """Unsubscribes; a stopped sink may start again."""
        subscription, self.subscription = self.subscription, None
        if subscription is not None:
            subscription.close()

    def on_event(self, event) -> None:  # pragma: no cover - every sink overrides it
        raise NotImplementedError(f"{type(self).__name__} does not handle events")
