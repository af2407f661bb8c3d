"""Training helpers with the behaviour of their PyTorch/XLA namesakes."""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterable

import torch

from xladev.events import Cause, CauseKind
from xladev.runtime.execute import closures
from xladev.runtime.graph.backend import device_index
from xladev.runtime.execute.barrier import barrier as step_barrier
from xladev.runtime.distributed.collectives import reduce_gradients
from xladev.runtime.execute.execution import execution
from xladev.runtime.record.rng import manual_seed as seed_device
from xladev.runtime.execute.transfers import sync_cause


def mark_step(cause: Cause | None = None, wait: bool = False) -> None:
    """Ends the step: compiles (or reuses) the graph of every pending tensor and starts it.

    The graph runs while the next step records (as PyTorch/XLA's `mark_step`); reading a value waits
    for it.

    Args:
      cause: why the barrier runs; `user torch_xla.sync` when called by the user.
      wait: block until the step's graph has finished running.
    """
    cause = cause or Cause(CauseKind.USER_MARK_STEP)
    step_barrier.mark_step(cause)
    global _tracer_marked_step
    _tracer_marked_step = cause.kind is CauseKind.STEP_TRACE
    if wait:
        execution.settle()


# True when the last barrier was a profiler StepTrace's exit: a DeviceLoader then skips its own barrier
# for that batch, as PyTorch/XLA's parallel loader does, so a step is one MarkStep, not two.
_tracer_marked_step = False


sync = mark_step


def add_step_closure(closure: Callable, args: tuple = (), run_async: bool = False) -> None:
    """Runs `closure(*args)` right after the next step barrier, when tensors in `args` are device data.

    Reading tensor values inside a closure costs no extra graph execution, unlike `.item()` in the step.

    Args:
      closure: the function to call.
      args: its arguments; tensors among them are kept alive (and synced) until the barrier.
      run_async: run it on a background thread instead of blocking the training loop.
    """

    def run(*call_args):
        with sync_cause(Cause(CauseKind.STEP_CLOSURE)):
            closure(*call_args)

    step_barrier.add_closure(run, args, run_async)


def optimizer_step(optimizer: torch.optim.Optimizer, barrier: bool = False, optimizer_args: dict | None = None,
                   groups=None, pin_layout: bool = True) -> Any:
    """Averages the gradients across the replicas, runs `optimizer.step(**optimizer_args)`, then the step
    barrier if `barrier` is True (PyTorch/XLA's `xm.optimizer_step`).

    The average is one all-reduce recorded into the step's graph (`collectives.reduce_gradients`); with a
    single process there is nothing to average.

    Args:
      optimizer: the optimizer.
      barrier: end the step after the update.
      optimizer_args: keyword arguments of `optimizer.step`.
      groups: replica groups of the gradient all-reduce; None for all replicas.
      pin_layout: accepted for PyTorch/XLA's signature.

    Returns:
      What `optimizer.step` returned.
    """
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        mark_step(Cause(CauseKind.OPTIMIZER_STEP))
    return loss


def wait_device_ops() -> None:
    """Blocks until every pending device execution and asynchronous step closure has finished."""
    execution.settle()
    closures.wait()


def manual_seed(seed: int, device: torch.device | None = None) -> None:
    """Seeds the device RNG, so random ops on `xla` repeat exactly for the same seed."""
    seed_device(seed, None if device is None else device_index(device))


class DeviceLoader:
    """Wraps a data loader: copies each batch to the device ahead of use and marks the step per batch.

    Like PyTorch/XLA's `MpDeviceLoader`, each `next()` first ends the previous step with a barrier
    (cause DEVICE_LOADER: "torch_xla.sync in parallel loader at step end" in the analysis blocks, PyTorch/XLA
    2.9's words), so the loop needs no explicit `mark_step()`.

    Host-side loading runs ahead on a thread named `xladev-loader`. Leaving the loop early (`break`,
    an exception, or dropping the iterator) stops that thread and shuts the loader's iterator down, so
    a `torch.utils.data.DataLoader`'s worker processes exit too (unless it has `persistent_workers`).

    Args:
      loader: any iterable of batches (tensors, or tuples/lists/dicts of them).
      device: the xla device.
      prefetch: batches copied ahead of the one in use.
    """

    def __init__(self, loader: Iterable, device: torch.device, prefetch: int = 2) -> None:
        self._loader = loader
        self._device = torch.device(device)
        self._prefetch = max(1, prefetch)

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def _to_device(self, batch):
        if isinstance(batch, torch.Tensor):
            return batch.to(self._device)
        if isinstance(batch, (list, tuple)):
            return type(batch)(self._to_device(b) for b in batch)
        if isinstance(batch, dict):
            return {k: self._to_device(v) for k, v in batch.items()}
        return batch

    def _deliver(self, batch):
        """A host batch as the loop gets it: on the device (a subclass may mark it too)."""
        return self._to_device(batch)

    def __iter__(self):
        # Host-side loading runs ahead on a thread; device copies happen on this thread, in order.
        q: queue.Queue = queue.Queue(maxsize=self._prefetch)
        stop = threading.Event()
        errors: list[BaseException] = []
        producer = threading.Thread(target=self._produce, args=(q, stop, errors), daemon=True, name="xladev-loader")
        producer.start()
        try:
            first = True
            while True:
                batch = q.get()
                global _tracer_marked_step
                if not first and not _tracer_marked_step:
                    mark_step(Cause(CauseKind.DEVICE_LOADER))
                _tracer_marked_step = False
                first = False
                if batch is _DONE:
                    if errors:
                        raise errors[0]
                    return
                yield self._deliver(batch)
        finally:  # also on `break` or garbage collection: GeneratorExit arrives at the yield
            _stop_producer(producer, q, stop)

    def _produce(self, q: queue.Queue, stop: threading.Event, errors: list) -> None:
        """The producer thread: iterates the loader into `q` until it ends, fails, or `stop` is set."""
        it = None
        try:
            it = iter(self._loader)
            for batch in it:
                q.put(batch)
                if stop.is_set():
                    break
        except BaseException as exc:  # re-raised in the consumer
            errors.append(exc)
        try:
            if it is not None:
                _close_iterator(it, self._loader)
        except BaseException as exc:
            errors.append(exc)
        if not stop.is_set():  # once stopped, nobody reads the queue: the end marker could block
            q.put(_DONE)


_DONE = object()
# How long leaving a loop early waits for the producer to finish the batch it is loading and shut
# the loader down; a slower loader finishes that in the background.
_STOP_WAIT_S = 10.0


def _stop_producer(producer: threading.Thread, q: queue.Queue, stop: threading.Event) -> None:
    """Stops the producer thread of a `DeviceLoader` iteration and waits (bounded) for it to finish.

    Setting `stop` before draining the queue means the producer puts at most one more item before it
    sees the flag, so a producer blocked on the full queue is released and none blocks again.
    """
    stop.set()
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            break
    if producer is not threading.current_thread():  # the generator may be collected on any thread
        producer.join(_STOP_WAIT_S)


def _close_iterator(it, loader) -> None:
    """Shuts down an iterator the producer made: a DataLoader's workers exit, a generator runs its `finally`.

    Done on every exit (a finished DataLoader iterator has already shut down; it does nothing twice).
    """
    if it is loader or it is getattr(loader, "_iterator", None):
        return  # an iterator passed in is the caller's; a persistent-workers DataLoader reuses its own
    shutdown = getattr(it, "_shutdown_workers", None) or getattr(it, "close", None)
    if shutdown is not None:
        shutdown()
