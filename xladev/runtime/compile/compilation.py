"""Compiling graphs, and the cache of what was compiled.

The in-memory cache is keyed by the graph's structural key (ops, templates, shapes, dtypes, operand
positions, input aliasing), so a steady training step compiles once. Compiles go through
`jax.jit(fn).lower(...).compile()`, `fn` being the graph's jax function (graph_lowering.py). Also
here: XLA's persistent compilation cache (`initialize_cache`) and the listener counting its hits, the
history of graphs per trigger site that explains a recompilation, and saving the HLO of a graph that
failed to compile or to run.
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings

from xladev._flags import config
from xladev.errors import XladevError
from xladev.events import Cause, CompileFailed, CompileStart, Compile, bus
from xladev.runtime.graph import annotate, backend, graph_names, stack, steps
from xladev.runtime.graph.span_clock import spent
from xladev.runtime.compile.graph_info import RuntimeGraphInfo, collectives_of, jax_calls_of, sharding_layout
from xladev.runtime.lowering.graph_lowering import compiler_options, hlo_module_text, program, replica_sharding
from xladev.runtime.graph.ir import Graph
from xladev.runtime.graph.irtext import graph_to_text, node_attributes
from xladev.runtime.compile.recompilation import SiteHistory, publish as publish_recompilation
from xladev.schema import memory as memory_sizes
from xladev.schema.ranks import per_rank_path


class XlaCompileError(XladevError, RuntimeError):
    """XLA (or the lowering to it) rejected a graph. The message names the graph hash and the saved HLO."""


class CacheEntry:
    """A compiled graph.

    Attributes:
      replicated: the graph holds collectives and runs on every process at once (graph_lowering.program):
        its inputs and outputs are this process's values of replicated arrays over the replica mesh.
      link: (HLO module, root op) as xprof names them, found at the first run while a capture records.
      jax_calls: the names of the jax functions and Pallas kernels the graph runs (`call_jax`), in order.
    """

    __slots__ = ("executable", "hash", "compile_ns", "memory", "runs", "num_nodes", "num_inputs", "num_outputs",
                 "link", "replicated", "sharding", "collectives", "collective_stats",
                 "jax_calls", "_jax_call_ops")

    def __init__(self, executable, graph_hash, compile_ns, memory, graph: Graph, sharding=None):
        self.executable = executable
        self.hash = graph_hash
        self.compile_ns = compile_ns
        self.memory = memory
        self.runs = 0
        self.num_nodes = len(graph.nodes)
        self.num_inputs = len(graph.inputs)
        self.num_outputs = graph.user_outputs
        self.link = None
        self.replicated = sharding is not None
        self.sharding = sharding
        # What must match between ranks for the collectives to pair up: each collective's op, constants and
        # operand shapes, in order (the rest of the graph may differ from rank to rank).
        self.collectives = collective_signature(graph) if self.replicated else ()
        ops = collectives_of(graph) if self.replicated else []
        # (count, bytes from this rank, each one's user line) for the Collective event of each run.
        self.collective_stats = (len(ops), sum(b for _, b, _ in ops), tuple(site or "?" for _, _, site in ops))
        self.jax_calls = jax_calls_of(graph)
        self._jax_call_ops = None

    def jax_call_ops(self) -> tuple[str, dict[str, tuple[str, ...]]]:
        """(HLO module name, {instruction: the call_jax functions it runs}) of the optimized HLO (made once)."""
        if self._jax_call_ops is None:
            from xladev.runtime.compile.optimized_hlo import jax_call_ops

            found = ("", {})
            if self.jax_calls:
                try:
                    found = jax_call_ops(self.executable.as_text())
                except Exception:  # naming profile events is a convenience: never fail a capture for it
                    pass
            self._jax_call_ops = found
        return self._jax_call_ops


class CompileCache:
    """Compiled graphs by structural key and by hash, persistent-cache hits, and each site's history.

    Attributes:
      cache: graph key -> CacheEntry.
      by_hash: graph hash -> CacheEntry.
      persistent_hits, persistent_misses: lookups in XLA's persistent cache (`initialize_cache`).
      site_history: the graphs compiled at each trigger site (recompilation.py).
    """

    def __init__(self) -> None:
        self.cache: dict = {}
        self.by_hash: dict[str, CacheEntry] = {}
        self.persistent_hits = 0
        self.persistent_misses = 0
        self._listener_installed = False
        self.site_history = SiteHistory()
        self._donations: dict = {}
        self._collective_keys: dict = {}
        self._keys: dict = {}

    def canonical(self, key):
        """The first key seen equal to `key` (or `key` itself, now remembered): a graph given it is looked up
        by identity from then on, not hashed and compared node by node at each lookup (`GraphKey`).

        Args:
          key: a graph's key, before donation.

        Returns:
          The key to give the graph.
        """
        return self._keys.setdefault(key, key)

    def holds_collectives(self, graph: Graph) -> bool:
        """Whether the graph holds collectives (it then runs on every rank at once), remembered per graph key."""
        found = self._collective_keys.get(graph.key)
        if found is None:
            found = self._collective_keys[graph.key] = bool(graph.collectives)
        return found

    def donation_of(self, key, donatable: tuple[int, ...]) -> tuple[int, ...]:
        """The inputs a graph donates: those `donatable` when a graph of this key (before donation) first
        ran, for good, so its executable and hash stay the same from step to step.

        Args:
          key: the graph's structural key, donation not yet applied.
          donatable: the inputs that may be donated this time.

        Returns:
          The inputs to donate; any of them not in `donatable` must be given to the executable as a copy.
        """
        return self._donations.setdefault(key, donatable)

    def get_or_compile(self, graph: Graph, device_index: int, cause: Cause, frames) -> tuple[CacheEntry, bool]:
        """The executable of `graph`: cached, or compiled now. Returns (entry, whether it was cached).

        Raises:
          XlaCompileError: the graph failed to lower or compile.
        """
        entry = self.cache.get(graph.key)
        if entry is not None:
            return entry, True
        entry = self._compile(graph, device_index, cause, frames)
        self.cache[graph.key] = entry
        self.by_hash[entry.hash] = entry
        return entry, False

    def clear(self) -> None:
        """Forgets every compiled graph, the persistent-cache counts and the site history."""
        self.cache.clear()
        self.by_hash.clear()
        self._donations.clear()
        self._collective_keys.clear()
        self._keys.clear()
        self.persistent_hits = 0
        self.persistent_misses = 0
        self.site_history.clear()

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
        step = steps.current()
        fn, avals, replicated = program(graph, backend.jax_devices()[device_index])
        if replicated and device_index != 0:
            raise XlaCompileError(f"graph {graph.hash} holds collectives but runs on xla:{device_index}: collectives "
                                  "run between the processes of the job, each on its xla:0")
        hits_before = self.persistent_hits
        info = RuntimeGraphInfo(graph)
        if bus.active:
            bus.emit(CompileStart(time.perf_counter_ns(), step, graph.hash, len(graph.nodes), len(graph.inputs),
                                    graph.user_outputs, frames, info, graph_names.current()))
        start = time.perf_counter_ns()
        lowered = None
        span = annotate.compile_span(graph.hash, step, len(graph.nodes), frames, graph_names.current())
        with span:
            try:
                lowered = jax.jit(fn, donate_argnums=graph.donated).lower(*avals)
                with warnings.catch_warnings():
                    # Each donor has an output of its shape and dtype; jax warns when XLA pairs them differently.
                    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
                    compiled = lowered.compile(compiler_options=compiler_options(graph) or None)
            except Exception as exc:  # lowering bug or XLA rejection: say which graph, keep its HLO
                path = save_failed(graph, lowered, exc)
                if bus.active:
                    bus.emit(CompileFailed(time.perf_counter_ns(), step, graph.hash, str(exc), path, cause, frames))
                raise XlaCompileError(
                    f"XLA could not compile graph {graph.hash} ({len(graph.nodes)} nodes): "
                    f"{type(exc).__name__}: {error_summary(exc)}. HLO saved to {path}"
                ) from exc
            compile_ns = time.perf_counter_ns() - start
            spent(compile_ns)
            memory = _memory_analysis(compiled)
            entry = CacheEntry(compiled, graph.hash, compile_ns, memory, graph,
                               replica_sharding() if replicated else None)
            # Every compile joins its site's history, listened to or not, so a later recompilation is
            # explained against graphs compiled before anyone subscribed. Compiles are rare: the stack is cheap here.
            recompiled = publish_recompilation(self.site_history, info, compile_ns, frames or stack.capture_frames(),
                                               step, graph_names.current())
            if recompiled is not None:
                annotate.add_args(span, recompiled="yes", reason=recompiled.headline(),
                                  previous=recompiled.previous_hash, graphs_at_site=recompiled.graphs_at_site)
        if bus.active:
            bus.emit(Compile(
                time.perf_counter_ns(), step, graph.hash, len(graph.nodes), len(graph.inputs), graph.user_outputs,
                compile_ns, memory, cause, frames,
                (self.persistent_hits > hits_before) if _persistent_cache else None, info, len(graph.donated),
                graph_names.current(), _spmd_layout(graph, compiled, replicated),
            ))
        return entry


def collective_signature(graph: Graph) -> tuple[str, ...]:
    """One line per collective of the graph, in order: its op, constants and operand shapes."""
    lines = []
    for node in graph.collectives:
        operands = ", ".join(f"{o.meta.dtype}{list(o.meta.shape)}".replace("torch.", "") for o in node.operands)
        constants = ", ".join(f"{k}={v!r}" for k, v in node_attributes(node))
        lines.append(f"{node.op.name}({operands}; {constants})")
    return tuple(lines)


def save_failed(graph: Graph, lowered, exc) -> str:
    """Saves a failing graph's HLO (or IR, when lowering failed) and says where; never raises.

    A failure to save must not replace the compile or execution error the user needs to see.
    """
    try:
        text = hlo_module_text(lowered) if lowered is not None else None
    except Exception:
        text = None
    if text is None:
        text = f"// lowering to HLO failed: {exc!r}\n// IR of graph {graph.hash}:\n" + graph_to_text(graph)
    path = per_rank_path(config.save_hlo_file) if config.save_hlo_file else ""
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


def error_summary(exc: BaseException) -> str:
    """The line of an XLA error worth showing: its first, or for a Python traceback inside it, its last."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith("Traceback (most recent call last):"):
        return f"{lines[0].removesuffix('Traceback (most recent call last):').rstrip()} {lines[-1]}"
    return lines[0]


def _memory_analysis(compiled) -> dict[str, int]:
    try:
        m = compiled.memory_analysis()
    except Exception:
        return {}
    if m is None:
        return {}
    # A size XLA does not give is left out (printed as PyTorch/XLA's "Unknown"), never taken as 0.
    return {key: int(value) for key, size in memory_sizes.SIZES.items()
            if (value := getattr(m, size.attribute, None)) is not None}


def _spmd_layout(graph: Graph, compiled, replicated: bool) -> dict | None:
    """The inputs' and outputs' shardings of a graph compiled for SPMD (`graph_info.sharding_layout`); None for any
    other graph, or when jax cannot say them (the compile record then has no layout rather than a wrong one)."""
    if replicated or backend.spmd_replicated is None or graph.device_index != 0:
        return None
    try:
        return sharding_layout(graph, compiled)
    except Exception:
        return None


# XLA's persistent compilation cache, once turned on: {"path": ..., "readonly": ...}.
_persistent_cache: dict = {}


def initialize_cache(path: str, readonly: bool = False) -> None:
    """Turns on XLA's persistent compilation cache in `path`, so a restarted job skips recompiling.

    Args:
      path: a directory (created if missing).
      readonly: read existing entries but write none (for caches shared between jobs).

    Raises:
      RuntimeError: the cache was already initialised with a different path.
    """
    if _persistent_cache and _persistent_cache["path"] != path:
        raise RuntimeError(f"the compilation cache is already initialised at {_persistent_cache['path']!r}")
    os.makedirs(path, exist_ok=True)
    jax = backend.jax_module()
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # Read-only: never worth writing (an entry would have to take longer than a day to compile).
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 86400.0 if readonly else 0.0)
    try:
        from jax._src import compilation_cache

        compilation_cache.reset_cache()
    except Exception:
        pass
    _persistent_cache.update(path=path, readonly=readonly)


compile_cache = CompileCache()


def jax_call_ops_by_module() -> dict[str, dict[str, tuple[str, ...]]]:
    """Per compiled HLO module that runs a `call_jax` function: {instruction: the functions it runs}.

    For a profile's tidying: the CPU backend's events are named by instruction, and this says which of them
    run a jax function or Pallas kernel (`xladev.debug` names them so).
    """
    out = {}
    for entry in list(compile_cache.by_hash.values()):
        if entry.jax_calls:
            module, ops = entry.jax_call_ops()
            if module and ops:
                out[module] = ops
    return out
