"""Barriers: extract the pending graph, find or compile its executable, run it, keep the results.

The in-memory cache is keyed by the graph's structural key (ops, templates, shapes, dtypes, operand
positions, input aliasing), so a steady training step compiles once. Compiles go through
`jax.jit(fn).lower(...).compile()`; the function is named `xladev_<hash>` so profiles and XLA dumps
show which graph ran.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import threading
import time
from typing import Any

from xladev._flags import config
from xladev.events import (
    Cause, CauseKind, CompileFailed, DeviceDataCacheMiss, Frame, GraphCompiled, GraphExecuted, OpsRecorded, StepMarked,
    bus,
)
from xladev.runtime import annotate, backend
from xladev.runtime.graph_info import RuntimeGraphInfo
from xladev.runtime.inflight import Dispatched, InFlight
from xladev.runtime.recompilation import SiteHistory, publish as publish_recompilation
from xladev.runtime.ir import DATA_OP, SCALAR_OP, SLOT, DataNode, Graph, Meta, Node, ScalarNode
from xladev.runtime.lowering.registry import LoweringContext
from xladev.runtime.recorder import is_library_frame, recorder
from xladev.runtime.tensor import pending, pending_storages

_lock = threading.RLock()


class XlaCompileError(RuntimeError):
    """XLA (or the lowering to it) rejected a graph. The message names the graph hash and the saved HLO."""


class XlaExecutionError(RuntimeError):
    """A compiled graph failed while running. The message names the graph hash and the saved HLO."""


class LoweringError(RuntimeError):
    """A lowering produced a value whose shape contradicts PyTorch's meta kernel (an xladev bug)."""


def rebuild(template, values) -> tuple[tuple, dict]:
    """Puts operand values back into an op's (args, kwargs) template at its SLOTs."""
    it = iter(values)

    def sub(v):
        if v is SLOT:
            return next(it)
        if type(v) is tuple:
            return tuple(sub(x) for x in v)
        return v

    args = tuple(sub(a) for a in template[0])
    kwargs = {k: sub(v) for k, v in template[1]}
    return args, kwargs


def capture_frames(limit: int = 64) -> tuple[Frame, ...]:
    """The Python stack of the caller, innermost first."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None and len(frames) < limit:
        frames.append(Frame(frame.f_code.co_name, frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return tuple(frames)


class CacheEntry:
    __slots__ = ("executable", "hash", "compile_ns", "memory", "runs", "num_nodes", "num_inputs", "num_outputs")

    def __init__(self, executable, graph_hash, compile_ns, memory, graph: Graph):
        self.executable = executable
        self.hash = graph_hash
        self.compile_ns = compile_ns
        self.memory = memory
        self.runs = 0
        self.num_nodes = len(graph.nodes)
        self.num_inputs = len(graph.inputs)
        self.num_outputs = len(graph.roots)


def _weak(x):
    from jax._src.lax import lax as _lax

    return _lax._convert_element_type(x, weak_type=True)


def _fit(value, meta, op_name):
    """Casts a lowering's result to the dtype PyTorch promised; checks its shape."""
    import jax.numpy as jnp

    if meta is None:
        return None
    if isinstance(meta, tuple) and not hasattr(meta, "dtype"):
        return tuple(_fit(v, m, op_name) for v, m in zip(value, meta))
    value = jnp.asarray(value)
    target = backend.to_jnp_dtype(meta.dtype)
    if value.dtype != target:
        value = value.astype(target)
    if tuple(value.shape) != tuple(meta.shape):
        try:
            value = jnp.broadcast_to(value, meta.shape)
        except ValueError:
            raise LoweringError(f"lowering of {op_name} gave shape {tuple(value.shape)}, expected {tuple(meta.shape)}") from None
    return value


def graph_function(graph: Graph):
    """A jax-traceable function computing the graph's roots from its inputs."""
    nodes = graph.nodes
    index = graph.index
    plan = []
    input_pos = {id(n): i for i, n in enumerate(graph.inputs)}
    for node in nodes:
        if node.op is DATA_OP or node.op is SCALAR_OP:
            plan.append((None, input_pos[id(node)], node.op is SCALAR_OP))
        else:
            plan.append((node, tuple(index[id(o)] for o in node.operands), False))
    roots = tuple(index[id(r)] for r in graph.roots)
    hlo_debug = config.hlo_debug
    cuts = _fusion_cuts(plan)

    def fn(*inputs):
        import jax

        values = [None] * len(plan)
        for i, (node, operands, is_scalar) in enumerate(plan):
            if node is None:
                values[i] = _weak(inputs[operands]) if is_scalar else inputs[operands]
                continue
            args, kwargs = rebuild(node.template, [values[j] for j in operands])
            ctx = LoweringContext(node)
            if hlo_debug and node.location:
                # jax cuts scope names at '@', so the location reads `fn at file.py:LINE` here.
                with jax.named_scope(f"{node.op.name}[{node.location.replace('@', ' at ')}]"):
                    out = node.op.lower(ctx, *args, **kwargs)
            else:
                out = node.op.lower(ctx, *args, **kwargs)
            values[i] = _fit(out, node.meta, node.op.name)
            if i in cuts:
                values[i] = jax.lax.optimization_barrier(values[i])
        return tuple(values[r] for r in roots)

    fn.__name__ = fn.__qualname__ = f"xladev_{graph.hash[:16]}"
    return fn


# XLA's CPU compiler walks a fusion recursively on one of its own threads: a chain some 25,000 ops deep
# feeding a reduction overflows that thread's stack and kills the process (jaxlib 0.10.2). An
# optimization barrier every FUSION_DEPTH_CUT ops of a chain bounds the depth of any fusion; graphs
# shallower than that (every ordinary training step) are lowered exactly as before.
FUSION_DEPTH_CUT = 4_096


def _fusion_cuts(plan) -> frozenset[int]:
    """Positions of the nodes after which a deep chain is cut (none for a graph shallower than the cut)."""
    if len(plan) <= FUSION_DEPTH_CUT:
        return frozenset()
    depth = [0] * len(plan)
    cuts = set()
    for i, (node, operands, _) in enumerate(plan):
        if node is None:
            continue
        d = 1 + max((depth[j] for j in operands), default=0)
        if d >= FUSION_DEPTH_CUT and not node.op.multi_output and type(node.meta) is Meta:
            cuts.add(i)
            d = 0
        depth[i] = d
    return frozenset(cuts)


class Executor:
    """Compile cache, scalar upload cache, step counter and step closures."""

    def __init__(self) -> None:
        self.cache: dict = {}
        self.by_hash: dict[str, CacheEntry] = {}
        self.scalars: collections.OrderedDict = collections.OrderedDict()
        self.step = 0
        self.closures: list = []
        self.persistent_hits = 0
        self.persistent_misses = 0
        self._listener_installed = False
        self.in_flight = InFlight()
        self.site_history = SiteHistory()

    # ---- inputs ------------------------------------------------------------------------------
    def _scalar_array(self, node: ScalarNode, device_index: int):
        key = (type(node.value), node.value, node.meta.dtype, device_index)
        array = self.scalars.get(key)
        if array is None:
            import numpy as np

            array = backend.put(np.asarray(node.value, dtype=backend.to_jnp_dtype(node.meta.dtype)), device_index)
            self.scalars[key] = array
            if len(self.scalars) > 4096:
                self.scalars.popitem(last=False)
            if bus.active:
                bus.emit(DeviceDataCacheMiss(time.perf_counter_ns(), self.step, float(node.value), str(node.meta.dtype)))
        else:
            self.scalars.move_to_end(key)
        return array

    # ---- compile -----------------------------------------------------------------------------
    def _install_listener(self) -> None:
        if self._listener_installed:
            return
        import jax

        def on_event(event: str, **kwargs) -> None:
            if event == "/jax/compilation_cache/cache_hits":
                self.persistent_hits += 1
            elif event == "/jax/compilation_cache/cache_misses":
                self.persistent_misses += 1

        jax.monitoring.register_event_listener(on_event)
        self._listener_installed = True

    def _compile(self, graph: Graph, device_index: int, cause: Cause, frames) -> CacheEntry:
        import jax

        self._install_listener()
        devices = backend.jax_devices()
        sharding = jax.sharding.SingleDeviceSharding(devices[device_index])
        avals = [jax.ShapeDtypeStruct(n.meta.shape, backend.to_jnp_dtype(n.meta.dtype), sharding=sharding)
                 for n in graph.inputs]
        hits_before = self.persistent_hits
        start = time.perf_counter_ns()
        lowered = None
        try:
            with annotate.compile_span(graph.hash, self.step):
                lowered = jax.jit(graph_function(graph)).lower(*avals)
                compiled = lowered.compile()
        except Exception as exc:  # lowering bug or XLA rejection: say which graph, keep its HLO
            path = self._save_failed(graph, lowered, exc)
            if bus.active:
                bus.emit(CompileFailed(time.perf_counter_ns(), self.step, graph.hash, str(exc), path, cause, frames))
            raise XlaCompileError(
                f"XLA could not compile graph {graph.hash} ({len(graph.nodes)} nodes): "
                f"{type(exc).__name__}: {_error_summary(exc)}. HLO saved to {path}"
            ) from exc
        compile_ns = time.perf_counter_ns() - start
        memory = _memory_analysis(compiled)
        entry = CacheEntry(compiled, graph.hash, compile_ns, memory, graph)
        info = RuntimeGraphInfo(graph)
        # Every compile joins its site's history, listened to or not, so a later recompilation is
        # explained against graphs compiled before anyone subscribed. Compiles are rare: the stack is cheap here.
        publish_recompilation(self.site_history, info, compile_ns, frames or capture_frames(), self.step)
        if bus.active:
            bus.emit(GraphCompiled(
                time.perf_counter_ns(), self.step, graph.hash, len(graph.nodes), len(graph.inputs), len(graph.roots),
                compile_ns, memory, cause, frames,
                (self.persistent_hits > hits_before) if _persistent_cache_on() else None, info,
            ))
        return entry

    def _save_failed(self, graph: Graph, lowered, exc) -> str:
        """Saves a failing graph's HLO (or IR, when lowering failed) and says where; never raises.

        A failure to save must not replace the compile or execution error the user needs to see.
        """
        try:
            text = lowered.as_text(dialect="hlo") if lowered is not None else None
        except Exception:
            text = None
        if text is None:
            from xladev.runtime.irtext import graph_to_text

            text = f"// lowering to HLO failed: {exc!r}\n// IR of graph {graph.hash}:\n" + graph_to_text(graph)
        path = config.save_hlo_file
        note = ""
        if path:
            try:
                with open(path, "w") as fh:
                    fh.write(text)
                return path
            except OSError as err:
                note = f" (XLA_SAVE_HLO_FILE={path!r} could not be written: {err.strerror})"
        try:
            fd, tmp = tempfile.mkstemp(prefix=f"xladev_{graph.hash[:12]}_", suffix=".hlo.txt")
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            return tmp + note
        except OSError as err:
            return f"nowhere: no temporary file could be written ({err.strerror}){note}"

    # ---- run -----------------------------------------------------------------------------------
    def run(self, roots: list[Node], cause: Cause, frames=None) -> list:
        """Computes `roots` and returns their jax arrays (computed roots only run once).

        The graph is dispatched without waiting for it (unless XLADEV_SYNC_EXECUTION is set); the arrays
        are ready when read. The previous graphs are settled first, so events keep their order.
        """
        with _lock:
            self.in_flight.settle()
            self._flush_ops()
            graph = Graph(roots)
            device_index = _device_index_of(graph)
            entry = self.cache.get(graph.key)
            cached = entry is not None
            if entry is None:
                entry = self._compile(graph, device_index, cause, frames)
                self.cache[graph.key] = entry
                self.by_hash[entry.hash] = entry
            arrays = [n.array if type(n) is DataNode else self._scalar_array(n, device_index) for n in graph.inputs]
            step = self.step
            start = time.perf_counter_ns()
            try:
                with annotate.execute_span(entry.hash, step):
                    outputs = entry.executable(*arrays)
            except Exception as exc:
                self._execution_failed(graph, entry, exc)
            entry.runs += 1

            def announce(execute_ns: int, error: BaseException | None) -> None:
                if error is not None:
                    self._execution_failed(graph, entry, error)
                if bus.active:
                    bus.emit(GraphExecuted(
                        time.perf_counter_ns(), step, entry.hash, execute_ns, cached, entry.num_nodes,
                        entry.num_inputs, entry.num_outputs, cause, frames, RuntimeGraphInfo(graph),
                    ))

            dispatched = Dispatched(outputs, start, announce)
            if config.sync_execution or not bus.executions_may_lag:
                try:
                    dispatched.wait()
                except Exception as exc:
                    dispatched.error = exc
                announce(time.perf_counter_ns() - start, dispatched.error)
            else:
                self.in_flight.add(dispatched)
            return list(outputs)

    def settle(self) -> None:
        """Waits for the dispatched graphs and announces their executions (GraphExecuted).

        Raises:
          XlaExecutionError: a dispatched graph failed while running.
        """
        if self.in_flight:
            with _lock:
                self.in_flight.settle()

    def _execution_failed(self, graph: Graph, entry: CacheEntry, exc: BaseException):
        from xladev.runtime.introspect import lowered

        path = self._save_failed(graph, lowered(graph), exc)
        raise XlaExecutionError(f"graph {entry.hash} failed while running: {type(exc).__name__}: "
                                f"{_error_summary(exc)}. HLO saved to {path}") from exc

    def _flush_ops(self) -> None:
        counts, ns, samples = recorder.drain()
        if counts and bus.active:
            bus.emit(OpsRecorded(time.perf_counter_ns(), self.step, counts, ns, samples))

    def materialize(self, nodes: list[Node], cause: Cause) -> list:
        """Arrays for these nodes, running one graph for those not yet computed."""
        todo = [n for n in nodes if type(n) is not DataNode]
        if not todo:
            return [n.array for n in nodes]
        frames = capture_frames() if bus.wants_frames else None
        results = dict(zip(map(id, todo), self.run(todo, cause, frames)))
        return [n.array if type(n) is DataNode else results[id(n)] for n in nodes]

    def sync_storages(self, storages: list, cause: Cause, frames=None) -> None:
        """Computes the given storages' pending values and makes them device data."""
        storages = [s for s in storages if type(s.value) is not DataNode]
        if not storages:
            return
        roots = [s.value for s in storages]
        # An earlier graph that failed while running raises here, before these storages are involved.
        self.settle()
        try:
            arrays = self.run(roots, cause, frames)
        except (XlaCompileError, XlaExecutionError):
            # Leave the failing tensors out of later barriers, so the process can go on with new graphs;
            # reading one of them again raises the same error.
            for storage in storages:
                pending.pop(storage.sid, None)
            raise
        made: dict[int, DataNode] = {}
        for storage, root, array in zip(storages, roots, arrays):
            data = made.get(id(root))
            if data is None:
                data = made[id(root)] = DataNode(array, root.meta)
            storage.set_data(data, root)

    def flush(self, cause: Cause) -> None:
        """Runs every pending tensor now, without ending the step (eager debug mode)."""
        with _lock:
            storages = pending_storages()
            if storages:
                self.sync_storages(storages, cause, capture_frames() if bus.wants_frames else None)

    def mark_step(self, cause: Cause) -> None:
        """The step barrier: sync every live pending tensor, count the step, run step closures."""
        start = time.perf_counter_ns()
        annotate.barrier_begin(self.step, cause)
        frames = capture_frames() if bus.wants_frames else None
        with _lock:
            storages = pending_storages()
            if storages:
                self.sync_storages(storages, cause, frames)
            # Ops recorded in a step that ran no graph (everything already data) still count.
            self._flush_ops()
            ended = self.step
            self.step += 1
        if bus.active:
            bus.emit(StepMarked(time.perf_counter_ns(), ended, cause, time.perf_counter_ns() - start, frames))
        self._run_closures()
        annotate.barrier_end(ended)

    def _run_closures(self) -> None:
        from xladev.runtime import closures as async_closures

        async_closures.raise_error()
        closures, self.closures = self.closures, []
        for fn, args, run_async in closures:
            if run_async:
                async_closures.submit(fn, args)
            else:
                fn(*args)


def _error_summary(exc: BaseException) -> str:
    """The line of an XLA error worth showing: its first, or for a Python traceback inside it, its last."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith("Traceback (most recent call last):"):
        return f"{lines[0].removesuffix('Traceback (most recent call last):').rstrip()} {lines[-1]}"
    return lines[0]


def _persistent_cache_on() -> bool:
    from xladev.runtime.training import _cache_state

    return bool(_cache_state)


def _device_index_of(graph: Graph) -> int:
    for node in graph.inputs:
        if type(node) is DataNode:
            device = next(iter(node.array.devices()))
            return backend.jax_devices().index(device)
    return 0


def _memory_analysis(compiled) -> dict[str, int]:
    try:
        m = compiled.memory_analysis()
    except Exception:
        return {}
    if m is None:
        return {}
    fields = {
        "argument": "argument_size_in_bytes",
        "output": "output_size_in_bytes",
        "alias": "alias_size_in_bytes",
        "temp": "temp_size_in_bytes",
        "generated_code": "generated_code_size_in_bytes",
    }
    return {k: int(getattr(m, v, 0) or 0) for k, v in fields.items()}


executor = Executor()
bus.before_subscribe.append(executor.settle)
