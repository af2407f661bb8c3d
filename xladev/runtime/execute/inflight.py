"""Graphs that were dispatched but may still be running: asynchronous execution, as PyTorch/XLA's.

A barrier hands its compiled graph to XLA and returns; the user's next step records while the device
computes. A watcher thread waits on each dispatched graph's outputs (waiting releases the GIL) and
stamps when they were ready, so `ExecuteTime` is the real time until the results existed, not the
dispatch time.

Events stay on the thread that records: a finished execution is announced (`Execute`) at the
next point that needs it settled: the next graph run, a value read, a metrics query,
`wait_device_ops()`, or the end of the process (runtime/execute/exiting.py). `XLADEV_SYNC_EXECUTION=1` waits in the barrier instead.
"""

from __future__ import annotations

import os
import queue
import threading
import time

import jax

from xladev.runtime.graph import span_clock
from xladev.runtime.graph.world import job


class Dispatched:
    """One dispatched graph: its outputs, when it started, and when its outputs were ready.

    Attributes:
      replicated: for a graph holding collectives, what it is (for errors); None for a local graph. Such a
        graph is waited for in slices: if another rank is gone it would never finish (world.py).
    """

    __slots__ = ("outputs", "start_ns", "ready_ns", "error", "done", "announce", "replicated")

    def __init__(self, outputs, start_ns: int, announce, replicated: str | None = None) -> None:
        self.outputs = outputs
        self.start_ns = start_ns
        self.ready_ns = 0
        self.error: BaseException | None = None
        # Held until the watcher has seen the outputs ready: a bare lock, since a dispatch makes one each
        # (an Event is a Condition and a lock in Python, several times the cost).
        self.done = threading.Lock()
        self.done.acquire()
        self.announce = announce  # called as announce(execute_ns, error) on the settling thread
        self.replicated = replicated

    def wait(self) -> None:
        """Blocks until the outputs are ready.

        Raises:
          DistributedError: (replicated graphs) a rank is gone while waiting.
        """
        if self.replicated is not None:
            _wait_replicated(self.outputs, self.replicated)
            return
        # One call for all outputs: it waits with the GIL released once, where a loop over the outputs
        # takes the GIL back between them and competes with the recording thread.
        jax.block_until_ready(list(self.outputs))

    def wait_done(self) -> None:
        """Waits for the watcher to see this graph finish (in slices for a replicated graph).

        Raises:
          DistributedError: (replicated graphs) a rank is gone while waiting.
        """
        if self.replicated is None:
            self.done.acquire()
            self.done.release()
            return
        while not self.done.acquire(timeout=_SLICE_S):
            if job.lost:
                raise job.lost_error(self.replicated)
        self.done.release()


# A replicated graph's wait looks for gone ranks this often.
_SLICE_S = 0.2


def _wait_replicated(arrays, what: str) -> None:
    pending = [a for a in arrays if not a.is_ready()]
    pause = 0.0001
    while pending:
        if job.lost:
            raise job.lost_error(what)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
        pending = [a for a in pending if not a.is_ready()]


class InFlight:
    """The dispatched graphs not yet announced, oldest first, and the thread that watches them."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._unannounced: list[Dispatched] = []
        self._thread: threading.Thread | None = None
        self._settling = False

    def add(self, item: Dispatched) -> None:
        """Starts watching a dispatched graph."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="xladev-execution-watcher", daemon=True)
            self._thread.start()
            os.register_at_fork(after_in_child=self._forget_in_child)
        self._unannounced.append(item)
        self._queue.put(item)

    def forget(self) -> None:
        """Drops the graphs not yet announced: they are never announced (the watcher still waits on them)."""
        self._unannounced.clear()

    def _forget_in_child(self) -> None:
        # A forked child has no watcher thread, and the parent's graphs are the parent's to announce:
        # waiting on them (at the child's exit too) would never end. Runs right after the fork, no lock.
        # (Such a child cannot run graphs of its own either: the device had started, see fork_guard.)
        self._unannounced.clear()

    def _watch(self) -> None:
        while True:
            item = self._queue.get()
            try:
                item.wait()
            except BaseException as exc:  # reported on the recording thread by settle()
                item.error = exc
            item.ready_ns = time.perf_counter_ns()
            # The outputs are the tensors' data now: a reference kept here would stop the next step from
            # donating them (donation.donatable counts references).
            item.outputs = ()
            item.done.release()

    def __bool__(self) -> bool:
        return bool(self._unannounced)

    def settle(self) -> None:
        """Waits for every dispatched graph and announces each; re-raises the first failure.

        Raises:
          Whatever the graph's `announce` raises for a failed execution (XlaExecutionError).
        """
        if self._settling or not self._unannounced:
            return
        self._settling = True  # an announcement's subscribers may read values; they must not re-enter
        try:
            while self._unannounced:
                item = self._unannounced[0]
                item.wait_done()
                span_clock.waited_for(item.start_ns, item.ready_ns)  # an op waiting here is not tracing
                self._unannounced.pop(0)
                item.announce(item.ready_ns - item.start_ns, item.error)
        finally:
            self._settling = False
