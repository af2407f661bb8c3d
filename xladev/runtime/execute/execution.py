"""Running graphs: a barrier's graph is compiled (or found in the cache), fed its inputs, and dispatched.

A graph is handed to XLA without waiting for it (inflight.py watches it); its results are ready when
read. Everything that needs the values of pending tensors comes here: the step barrier (barrier.py),
value reads (transfers.py), and the eager debug mode (one small graph per op).
"""

from __future__ import annotations

import collections
import threading
import time

from xladev._flags import config
from xladev.errors import XladevError
from xladev.events import (
    Cause, CauseKind, Collective, CacheMiss, ExecuteFailed, Execute, Ops, bus,
)
from xladev.runtime.graph import annotate, backend, device_put, graph_names, stack, steps
from xladev.runtime.execute import admission, collector_threshold, donation, profile_memory, seeds, traced_call
from xladev.runtime.execute.replica_guard import guard as replica_guard
from xladev.runtime.compile.compilation import (
    CacheEntry, CompileCache, XlaCompileError, compile_cache, error_summary, save_failed,
)
from xladev.runtime.compile.graph_info import RuntimeGraphInfo
from xladev.runtime.lowering.graph_lowering import lowered
from xladev.runtime.execute.inflight import Dispatched, InFlight
from xladev.runtime.execute.memory_budget import MemoryBudgetExceeded, check as check_memory_budget
from xladev.runtime.execute.step_memory import step_memory
from xladev.runtime.graph.ir import DataNode, Graph, Node, ScalarNode, origin_of
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.graph.span_clock import spent
from xladev.runtime.graph.storage import pending, pending_storages
from xladev.runtime.graph.world import DistributedError, job

# One graph runs at a time, and the step barrier (barrier.py) holds this lock for its whole sync.
lock = threading.RLock()


# Graphs dispatched behind the graphs still running instead of after them: a torch.compile graph's pending
# inputs are queued on the device ahead of the program that reads them, as the program itself is (run_program).
_QUEUED_CAUSES = frozenset((CauseKind.DYNAMO_INPUTS,))


class XlaExecutionError(XladevError, RuntimeError):
    """A compiled graph failed while running. The message names the graph hash and the saved HLO."""


class HostTimings:
    """The host's time around one execution, announced with it (Execute): PyTorch/XLA's UnwrapXlaData,
    WrapXlaData and DeviceLockWait.

    Attributes:
      unwrap_ns: taking the device buffers out of the input nodes.
      wrap_ns: wrapping the output buffers as device data nodes (set after dispatch).
      lock_wait_ns: waiting for the execution lock and for the graphs still running.
    """

    __slots__ = ("unwrap_ns", "wrap_ns", "lock_wait_ns")

    def __init__(self, unwrap_ns: int = 0, wrap_ns: int = 0, lock_wait_ns: int = 0) -> None:
        self.unwrap_ns, self.wrap_ns, self.lock_wait_ns = unwrap_ns, wrap_ns, lock_wait_ns


# Python scalars kept uploaded, least recently used dropped first: bounded, so that a value that changes every step
# (a scheduled learning rate, Adam's bias corrections) never holds device memory for good.
SCALAR_CACHE_SIZE = 4096


class Execution:
    """Runs graphs. Holds the scalar upload cache and the graphs dispatched but not yet announced.

    Attributes:
      compiler: where executables come from.
      scalars: device arrays of Python scalars fed as graph inputs, most recently used last.
      in_flight: the dispatched graphs not yet announced (`Execute`).
    """

    def __init__(self, compiler: CompileCache) -> None:
        self.compiler = compiler
        self.scalars: collections.OrderedDict = collections.OrderedDict()
        self.scalar_bytes = 0  # what the scalar cache holds on the devices (bounded: not a leak, step_memory.py)
        self.in_flight = InFlight()

    # ---- inputs ------------------------------------------------------------------------------
    def scalar_array(self, node: ScalarNode, device_index: int):
        """The device array of a Python scalar graph input: uploaded once per value, dtype and device.

        Raises:
          RuntimeError: the input is a traced function's placeholder (a tensor of a scan's body escaped it).
        """
        if type(node) is not ScalarNode:
            raise RuntimeError("a graph reads a placeholder of a traced function (the body of a scan): a tensor "
                               "computed inside fn was kept and used outside it, or read while fn was traced. Return "
                               "it from fn (in the carry or y) instead")
        key = (type(node.value), node.value, node.meta.dtype, device_index)
        array = self.scalars.get(key)
        if array is None:
            import numpy as np

            # A Python scalar fed as a graph input is uploaded once per value: a transfer, as PyTorch/XLA counts it.
            array = device_put.put(np.asarray(node.value, dtype=backend.to_jnp_dtype(node.meta.dtype)), device_index)
            self.scalars[key] = array
            self.scalar_bytes += array.nbytes
            if len(self.scalars) > SCALAR_CACHE_SIZE:
                self.scalar_bytes -= self.scalars.popitem(last=False)[1].nbytes
            if bus.active:
                bus.emit(CacheMiss(time.perf_counter_ns(), steps.current(), float(node.value),
                                             str(node.meta.dtype)))
        else:
            self.scalars.move_to_end(key)
        return array

    # ---- run -----------------------------------------------------------------------------------
    def run(self, roots: list[Node], cause: Cause, frames=None, donors: list[DataNode] | None = None,
            internal_outputs: int = 0, waited_ns: int = 0, device_index: int = 0) -> list[DataNode]:
        """Computes `roots` and returns their values as device data, one per root (a root given twice is
        computed once and gets the same DataNode).

        The graph is dispatched without waiting for it (unless XLADEV_SYNC_EXECUTION is set); the arrays
        are ready when read. The previous graphs are settled first, so events keep their order.

        Args:
          roots: the nodes to compute.
          cause: why the graph runs.
          frames: the user's stack, when captured.
          donors: device data whose buffers may be donated to the graph (each the old value of a tensor
            the graph updates). Only those nothing else references are donated; their arrays are
            deleted by the run.
          internal_outputs: how many roots are the runtime's own state (the RNG key), not user tensors.
          waited_ns: time the caller already waited for earlier graphs (counted in DeviceLockWait).
          device_index: the `xla:N` whose values the roots are (every input is on it).

        Raises:
          XlaCompileError: the graph failed to compile.
          XlaExecutionError: it failed while running (or an earlier dispatched graph did).
        """
        admission.check_may_run(cause, frames)
        wait_start = time.perf_counter_ns()
        with lock:
            if cause.kind not in _QUEUED_CAUSES:
                self.in_flight.settle()
            # Waiting for the lock and for the graphs still running: PyTorch/XLA's DeviceLockWait.
            lock_wait_ns = waited_ns + time.perf_counter_ns() - wait_start
            self.flush_ops()
            graph = Graph(roots, device_index)
            collector_threshold.threshold.fit(len(graph.nodes))
            graph.key = self.compiler.canonical(graph.key)
            graph.user_outputs -= internal_outputs
            admission.admit(graph)
            copies: tuple[int, ...] = ()
            # A graph holding collectives donates nothing: whether a buffer can be donated depends on what
            # else holds it (reference counts), which may differ from rank to rank, and every rank must
            # run the same program (replica_guard.py).
            if donors and not self.compiler.holds_collectives(graph):
                # A graph keeps the donated inputs it was first compiled with, so a step whose buffer is held
                # elsewhere for once (a reference cycle the garbage collector has not freed yet) does not
                # recompile: that input is copied, and the executable consumes the copy.
                now = donation.donatable(graph, donors)
                chosen = self.compiler.donation_of(graph.key, now)
                graph.donate(chosen)
                copies = tuple(i for i in chosen if i not in now)
            entry, cached = self.compiler.get_or_compile(graph, device_index, cause, frames)
            if cached:
                graph.known_hash(entry.hash)  # the executable's: not the repr and md5 of the whole key again
            unwrap_start = time.perf_counter_ns()  # device buffers out of the input nodes: UnwrapXlaData
            arrays = [n.array if type(n) is DataNode else self.scalar_array(n, device_index) for n in graph.inputs]
            for i in copies:
                arrays[i] = donation.copy_buffer(arrays[i])
            if backend.spmd_replicated is not None and device_index == 0:
                arrays = _spmd_placed(arrays)
            unwrap_ns = time.perf_counter_ns() - unwrap_start
            timings = HostTimings(unwrap_ns, 0, lock_wait_ns)
            outputs, dispatched = self._start(graph, entry, cached, arrays, cause, frames, timings,
                                              graph_names.current())
            wrap_start = time.perf_counter_ns()  # the output buffers as device data nodes: WrapXlaData
            made: dict[int, DataNode] = {}
            results = []
            for root, array in zip(roots, outputs):
                data = made.get(id(root))
                if data is None:
                    data = made[id(root)] = DataNode(array, root.meta)
                    data.origin = origin_of(root)
                results.append(data)
            if backend.spmd_replicated is not None:
                _keep_uneven_marks(roots, results)
                for data in made.values():
                    data.spmd_result = True
            timings.wrap_ns = time.perf_counter_ns() - wrap_start
            self._finish(dispatched)
            return results

    def run_program(self, graph: Graph, entry: CacheEntry, arrays: list, cause: Cause, frames=None,
                    watch: int | None = None, name: str | None = None) -> list:
        """Runs an executable compiled before (a torch.compile graph) on `arrays`; returns its output arrays.

        Unlike `run`, it does not wait for the graphs still running: compiled graphs (forward, backward,
        optimizer) queue on the device back to back while the host goes on, and are announced in order.

        Args:
          graph: the graph the executable was compiled from (for the events' graph info).
          entry: its compile-cache entry.
          arrays: its inputs, in the graph's input order.
          cause: why it runs.
          frames: the user's stack, when captured.
          watch: the output whose readiness says the execution finished (the others may be donated to a later
            program before then); None: all of them.
          name: the graph name its events carry (None: none).

        Raises:
          ExecutionNotAllowedError: executions are disallowed.
          XlaExecutionError: it failed while running (or an earlier dispatched graph did).
        """
        admission.check_may_run(cause, frames)
        wait_start = time.perf_counter_ns()
        with lock:
            timings = HostTimings(lock_wait_ns=time.perf_counter_ns() - wait_start)
            outputs, dispatched = self._start(graph, entry, False, arrays, cause, frames, timings, name)
            if watch is not None:
                dispatched.outputs = (outputs[watch],)
            self._finish(dispatched)
        return outputs

    def _start(self, graph: Graph, entry: CacheEntry, cached: bool, arrays: list, cause: Cause, frames,
               timings: HostTimings, name: str | None) -> tuple:
        """Dispatches the executable; returns its outputs and the `Dispatched` to finish (`_finish`).

        `timings` is read when the execution is announced (its wrap time is set after this returns); `name` is
        the graph name its events carry.
        """
        step = steps.current()
        wait_ns = 0
        if bus.active:
            step_memory.graph_ran(entry.memory)
        if config.device_memory_limit is not None:
            try:
                check_memory_budget(graph, entry.memory, arrays, backend.jax_devices()[graph.device_index],
                                    frames or stack.capture_frames(), name)
            except MemoryBudgetExceeded as exc:
                self._execution_failed(graph, entry, exc, step, cause, frames)
        if entry.replicated:
            wait_ns = self._before_replicated(graph, entry, step, cause, frames)
            arrays = _as_replicated(arrays, entry.sharding)
        start = time.perf_counter_ns()
        try:
            if annotate.enabled():
                # A capture records: the run shows once, as this span, linked to its HLO module.
                if entry.link is None:
                    entry.link = traced_call.link(entry.executable) or ()
                moved = entry.collective_stats[:2] if entry.replicated else None
                with annotate.execute_span(entry.hash, step, cause, entry.link or None, name, moved,
                                           entry.jax_calls):
                    outputs = traced_call.call(entry.executable, arrays)
                profile_memory.graph_outputs(outputs, f"graph {name or entry.hash[:12]} at "
                                                      f"{annotate.user_site(frames)}")
            else:
                outputs = entry.executable(*arrays)
        except Exception as exc:
            self._execution_failed(graph, entry, exc, step, cause, frames)
        if entry.replicated:
            outputs = [out.addressable_data(0) for out in outputs]  # this process's values
        entry.runs += 1
        # SPMD: how each output came out split, for the dumps (PyTorch/XLA's OUTPUT_SHARDING block).
        spmd = backend.spmd_replicated is not None and not entry.replicated
        out_shardings = tuple(o.sharding for o in outputs) if bus.active and spmd else None
        devices = len(backend.spmd_replicated.device_set) if spmd else 1

        def announce(execute_ns: int, error: BaseException | None) -> None:
            if error is not None:
                self._execution_failed(graph, entry, error, step, cause, frames)
            if bus.active:
                bus.emit(Execute(
                    time.perf_counter_ns(), step, entry.hash, execute_ns, cached, entry.num_nodes,
                    entry.num_inputs, entry.num_outputs, cause, frames, RuntimeGraphInfo(graph, out_shardings), name,
                    timings.unwrap_ns, timings.wrap_ns, timings.lock_wait_ns, devices,
                ))
                if entry.replicated:
                    count, nbytes, sites = entry.collective_stats
                    bus.emit(Collective(time.perf_counter_ns(), step, entry.hash, count, nbytes, wait_ns,
                                                 execute_ns, sites))

        return outputs, Dispatched(outputs, start, announce, _replicated_what(entry) if entry.replicated else None)

    def _finish(self, dispatched: Dispatched) -> None:
        """Waits for and announces a dispatched graph now (XLADEV_SYNC_EXECUTION, or a listener that needs its
        events in order), or leaves it to the watcher."""
        if config.sync_execution or not bus.executions_may_lag:
            try:
                dispatched.wait()
            except DistributedError:
                raise
            except Exception as exc:
                dispatched.error = exc
            execute_ns = time.perf_counter_ns() - dispatched.start_ns
            spent(execute_ns)  # waited for here, on this thread: not an op's tracing time
            dispatched.announce(execute_ns, dispatched.error)
        else:
            self.in_flight.add(dispatched)

    def _before_replicated(self, graph: Graph, entry: CacheEntry, step: int, cause: Cause, frames) -> int:
        """The ranks' check before a replicated graph runs (replica_guard); returns the ns spent waiting for
        the other ranks. A failure is published (ExecuteFailed, so every rank's log says why) and raised.

        Raises:
          DistributedError: the ranks are about to run different graphs, or a rank is gone or late.
        """
        start = time.perf_counter_ns()
        try:
            replica_guard.before(graph, entry.collectives, step, frames)
        except DistributedError as exc:
            if bus.active:
                bus.emit(ExecuteFailed(time.perf_counter_ns(), step, entry.hash, f"{type(exc).__name__}: {exc}", "",
                                         cause, frames))
            raise
        waited = time.perf_counter_ns() - start
        spent(waited)  # waiting for the other ranks is not tracing
        return waited

    def settle(self) -> int:
        """Waits for the dispatched graphs and announces their executions (Execute).

        Returns:
          The nanoseconds spent waiting (0 when nothing was running).

        Raises:
          XlaExecutionError: a dispatched graph failed while running.
        """
        if not self.in_flight:
            return 0
        start = time.perf_counter_ns()
        with lock:
            self.in_flight.settle()
        return time.perf_counter_ns() - start

    def _execution_failed(self, graph: Graph, entry: CacheEntry, exc: BaseException, step: int, cause: Cause,
                          frames) -> None:
        """Saves the failing graph's HLO, publishes `ExecuteFailed` and raises.

        Raises:
          XlaExecutionError: always, naming the graph, the error and where its HLO is.
        """
        if isinstance(exc, DistributedError):
            raise exc
        path = save_failed(graph, lowered(graph), exc)
        # The budget's explainer is read whole (it starts with XLA's RESOURCE_EXHAUSTED); XLA's errors by their summary.
        message = str(exc) if isinstance(exc, MemoryBudgetExceeded) else f"{type(exc).__name__}: {error_summary(exc)}"
        if bus.active:
            bus.emit(ExecuteFailed(time.perf_counter_ns(), step, entry.hash, message, path, cause, frames))
        if entry.replicated and job.wait_for_lost(_LOST_WAIT_S):
            # A collective failed because a rank is gone (its connection closed): say which rank.
            raise job.lost_error(f"graph {entry.hash}'s collectives") from exc
        raise XlaExecutionError(f"graph {entry.hash} failed while running: {message}. HLO saved to {path}") from exc

    def flush_ops(self) -> None:
        """Publishes the ops recorded since the last graph (Ops)."""
        self._publish_ops(*recorder.drain())

    def publish_recorded_ops(self) -> None:
        """Publishes the ops recorded so far in the pending graph, which stays pending: PyTorch/XLA counts
        an op (`xla::add`, `LazyTracing`) as it is recorded, so a report in mid-step shows it."""
        self._publish_ops(*recorder.take_counts())

    def _publish_ops(self, counts: dict, ns: int, samples: list, created: int, destroyed: int) -> None:
        if (counts or created or destroyed) and bus.active:
            bus.emit(Ops(time.perf_counter_ns(), steps.current(), counts, ns, samples, created, destroyed))

    # ---- what callers need computed ------------------------------------------------------------
    def materialize(self, nodes: list[Node], cause: Cause, device_index: int = 0) -> list:
        """Arrays for these nodes (values on `xla:device_index`), running one graph for those not yet computed."""
        todo = [n for n in nodes if type(n) is not DataNode]
        if not todo:
            return [n.array for n in nodes]
        frames = stack.capture_frames() if bus.wants_frames else None
        results = dict(zip(map(id, todo), self.run(todo, cause, frames, device_index=device_index)))
        return [n.array if type(n) is DataNode else results[id(n)].array for n in nodes]

    def sync_storages(self, storages: list, cause: Cause, frames=None, donate: bool = False) -> None:
        """Computes the given storages' pending values and makes them device data.

        Args:
          storages: the storages to sync (those already device data are skipped).
          cause: why.
          frames: the user's stack, when captured.
          donate: give the executable the old buffers of storages updated in place (the step
            barrier, as PyTorch/XLA donates at `mark_step`; `XLA_ENABLE_PARAM_ALIASING=0` turns it off).
        """
        seeds.materialize(storages)  # state created as a constant and updated in place: data first
        by_device: dict[int, list] = {}
        for storage in storages:
            if type(storage.value) is not DataNode:
                by_device.setdefault(storage.device_index, []).append(storage)
        # One graph per device: an executable runs on one device (each device's graph is its own, as in
        # PyTorch/XLA, where a sync builds one graph per device).
        for device_index in sorted(by_device):
            self._sync_device(by_device[device_index], cause, frames, donate, device_index)

    def _sync_device(self, storages: list, cause: Cause, frames, donate: bool, device_index: int) -> None:
        """`sync_storages` for the pending storages of one device."""
        roots = [s.value for s in storages]
        # An earlier graph that failed while running raises here, before these storages are involved.
        waited = self.settle() if cause.kind not in _QUEUED_CAUSES else 0
        donors = donation.donors_of(storages) if donate and config.param_aliasing else None
        internal = sum(1 for s in storages if s.internal)
        try:
            datas = self.run(roots, cause, frames, donors, internal, waited, device_index)
        except (XlaCompileError, XlaExecutionError):
            # Leave the failing tensors out of later barriers, so the process can go on with new graphs;
            # reading one of them again raises the same error.
            for storage in storages:
                pending.pop(storage.sid, None)
            raise
        for storage, root, data in zip(storages, roots, datas):
            storage.set_data(data, root)

    def flush(self, cause: Cause) -> None:
        """Runs every pending tensor now, without ending the step (eager debug mode)."""
        with lock:
            storages = pending_storages()
            if storages:
                self.sync_storages(storages, cause, stack.capture_frames() if bus.wants_frames else None)

    def clear(self) -> None:
        """Forgets the dispatched graphs not yet announced, and empties the scalar cache (`Executor.reset`)."""
        with lock:
            self.in_flight.forget()
            self.scalars.clear()
            self.scalar_bytes = 0


# How long a failed collective waits for the watchdog to name a rank that is gone.
_LOST_WAIT_S = 3.0


def _replicated_what(entry: CacheEntry) -> str:
    return f"graph {entry.hash}'s collectives"


def _keep_uneven_marks(roots, results: list) -> None:
    """SPMD: a result marked with a split that does not divide its shape comes back whole on each device (jax
    holds no uneven buffer); it keeps the mark, as PyTorch/XLA's tensor keeps its sharding."""
    for root, data in zip(roots, results):
        uneven = getattr(root, "uneven", None)
        if uneven is not None:
            data.sharding = root.sharding
            data.uneven = uneven


def _spmd_placed(arrays: list) -> list:
    """SPMD mode: buffers still on one device (made before `use_spmd`) copied to every device, as the
    executable expects every input either split or replicated."""
    import jax

    single = jax.sharding.SingleDeviceSharding
    return [jax.device_put(a, backend.spmd_replicated) if isinstance(a.sharding, single) else a for a in arrays]


def _as_replicated(arrays: list, sharding) -> list:
    """This process's input arrays as its part of replicated arrays over the replica mesh (no copy: each
    global array wraps the process's own buffer)."""
    import jax

    make = jax.make_array_from_single_device_arrays
    return [make(a.shape, sharding, [a]) for a in arrays]


execution = Execution(compile_cache)
