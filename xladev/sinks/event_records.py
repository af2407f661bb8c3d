"""Runtime events → schema records (`xladev.schema.records`): the one place events become records.

The event-log writer writes these records; the metrics registry counts them through the schema's
counter table, so the log and the in-process metrics cannot disagree.
"""

from __future__ import annotations

from xladev.events import (
    Collective, CompileFailed, CompileStart, CacheMiss, GraphBreak, DynamoRecompile,
    ExecuteFailed, Fallback, Compile, Execute, GraphGrowing, MemoryGrowing, Ops, Profile, RankLost,
    Recompile, Step, TransferFromDevice, TransferToDevice,
)
from xladev.schema import records as rec
from xladev.schema.sites import is_user, site_text
from xladev.sinks.pt_xla_debug.blocks import exact_cause


class RecordBuilder:
    """Builds the records of each event; keeps what spans events (sites seen, graphs written, last step).

    Args:
      clock0: `perf_counter_ns` at the start of the log; record times `t` count from it.
      sites: resolve the user's site of events that carry frames (off for counting only).
      graph_texts: emit a `graph` record with the IR text the first time a graph hash is seen.
    """

    def __init__(self, clock0: int = 0, sites: bool = True, graph_texts: bool = True) -> None:
        self.clock0 = clock0
        self.sites = sites
        self.graph_texts = graph_texts
        self.steps = 0
        self._graphs: set[str] = set()
        self._user_file: dict[str, bool] = {}
        self._causes: dict = {}
        self._last_step_ns: int | None = None
        self._recompiles: dict[str, dict] = {}

    def records(self, event) -> tuple[rec.Record, ...]:
        """The records of one event, in the order they are written (a graph's text before its compile)."""
        build = _BUILDERS.get(type(event))
        return build(self, event, event.time_ns - self.clock0) if build is not None else ()

    def _executed(self, event: Execute, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        record = rec.Execute(t, event.step, event.graph_hash, event.execute_ns, event.cached, event.num_nodes,
                             event.num_inputs, event.num_outputs, self._cause(event.cause), site, frame,
                             event.graph_name, event.unwrap_ns, event.wrap_ns, event.lock_wait_ns,
                             event.devices if event.devices > 1 else None)
        return self._with_graph(event, t, record)

    def _step(self, event: Step, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        previous = self._last_step_ns
        self._last_step_ns = event.time_ns
        self.steps += 1
        interval = event.time_ns - (previous if previous is not None else self.clock0)
        return (rec.Step(t, event.step, event.duration_ns, interval, self._cause(event.cause), site, frame,
                         event.device_bytes, event.peak_device_bytes),)

    def _to_device(self, event: TransferToDevice, t: int) -> tuple[rec.Record, ...]:
        return (rec.Transfer(t, event.step, "to_device", event.nbytes, event.duration_ns, event.count),)

    def _from_device(self, event: TransferFromDevice, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        return (rec.Transfer(t, event.step, "from_device", event.nbytes, event.duration_ns, 1, event.kind, site,
                             frame),)

    def _ops(self, event: Ops, t: int) -> tuple[rec.Record, ...]:
        count = len(event.tracing_samples) if event.tracing_count is None else event.tracing_count
        return (rec.Ops(t, event.step, event.counts, event.tracing_ns, count,
                        event.tracing_samples, event.tensors_created, event.tensors_destroyed),)

    def _compiled(self, event: Compile, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        record = rec.Compile(t, event.step, event.graph_hash, event.num_nodes, event.num_inputs, event.num_outputs,
                             event.compile_ns, dict(event.memory), self._cause(event.cause), site, frame,
                             event.persistent_cache_hit, self._recompiles.pop(event.graph_hash, None),
                             event.donated, event.graph_name, event.shardings)
        return self._with_graph(event, t, record)

    def _compile_started(self, event: CompileStart, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        return self._with_graph(event, t, rec.CompileStart(t, event.step, event.graph_hash, event.num_nodes, site, frame,
                                                         event.graph_name))

    def _recompiled(self, event: Recompile, t: int) -> tuple[rec.Record, ...]:
        # Published just before its graph's Compile: kept to go into that compile record.
        self._recompiles[event.graph_hash] = {
            "previous": event.previous_hash, "changes": list(event.changes),
            "graphs_at_site": event.graphs_at_site, "compile_ns_at_site": event.compile_ns_at_site}
        return ()

    def _fallback(self, event: Fallback, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        return (rec.Fallback(t, event.step, event.name, site, frame, event.cpu_ns),)

    def _cache_miss(self, event: CacheMiss, t: int) -> tuple[rec.Record, ...]:
        return (rec.CacheMiss(t, event.step, event.value, event.dtype),)

    def _growing(self, event: GraphGrowing, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        return (rec.GraphGrowing(t, event.step, event.ops, site or event.site, frame),)

    def _memory_growing(self, event: MemoryGrowing, t: int) -> tuple[rec.Record, ...]:
        return (rec.MemoryGrowing(t, event.step, event.from_step, event.from_bytes, event.to_bytes,
                                  event.per_step_bytes, [dict(h) for h in event.holders], event.space),)

    def _graph_break(self, event: GraphBreak, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        return (rec.GraphBreak(t, event.step, event.by, event.reason, site, frame),)

    def _dynamo_recompiled(self, event: DynamoRecompile, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        return (rec.DynamoRecompile(t, event.step, event.function, event.guard, event.compiles, site, frame),)

    def _execution_failed(self, event: ExecuteFailed, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        return (rec.ExecuteFailed(t, event.step, event.graph_hash, event.message, event.hlo_path,
                                  self._cause(event.cause), site, frame),)

    def _compile_failed(self, event: CompileFailed, t: int) -> tuple[rec.Record, ...]:
        site, frame = self._site(event.frames)
        return (rec.CompileFailed(t, event.step, event.graph_hash, event.message, event.hlo_path,
                                  self._cause(event.cause), site, frame),)

    def _profile(self, event: Profile, t: int) -> tuple[rec.Record, ...]:
        return (rec.Profile(t, event.step, event.path, event.logdir, event.first_step, event.last_step, event.how),)

    def _collectives(self, event: Collective, t: int) -> tuple[rec.Record, ...]:
        return (rec.Collective(t, event.step, event.graph_hash, event.count, event.nbytes, event.wait_ns,
                               event.execute_ns, list(event.sites)),)

    def _rank_lost(self, event: RankLost, t: int) -> tuple[rec.Record, ...]:
        return (rec.RankLost(t, event.step, event.rank, event.reason),)

    def _with_graph(self, event, t: int, record: rec.Record) -> tuple[rec.Record, ...]:
        if not self.graph_texts or event.graph_hash in self._graphs or event.graph is None:
            return (record,)
        self._graphs.add(event.graph_hash)
        try:
            ir = event.graph.ir_text()
        except Exception as exc:  # never lose the event for want of its text
            ir = f"// IR text unavailable: {type(exc).__name__}: {exc}\n"
        graph = rec.GraphText(t, event.step, event.graph_hash, event.num_nodes, event.num_inputs, event.num_outputs, ir)
        return (graph, record)

    def _site(self, frames) -> tuple[str | None, dict | None]:
        """(`file:line (function)`, frame dict) of the first user frame (else the outermost one)."""
        if not frames or not self.sites:
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
        return site_text(chosen), {"file": chosen.file, "line": chosen.line, "name": chosen.name}

    def _cause(self, cause) -> dict:
        record = self._causes.get(cause)
        if record is None:  # causes repeat every step: build each one's record once
            record = self._causes[cause] = {"kind": cause.kind.name, "text": exact_cause(cause), "detail": cause.detail}
        return record


_BUILDERS = {
    Execute: RecordBuilder._executed, Step: RecordBuilder._step, TransferToDevice: RecordBuilder._to_device,
    TransferFromDevice: RecordBuilder._from_device, Ops: RecordBuilder._ops,
    CompileStart: RecordBuilder._compile_started, Compile: RecordBuilder._compiled, Recompile: RecordBuilder._recompiled, Fallback: RecordBuilder._fallback,
    GraphBreak: RecordBuilder._graph_break, DynamoRecompile: RecordBuilder._dynamo_recompiled,
    CacheMiss: RecordBuilder._cache_miss, GraphGrowing: RecordBuilder._growing,
    MemoryGrowing: RecordBuilder._memory_growing,
    CompileFailed: RecordBuilder._compile_failed, ExecuteFailed: RecordBuilder._execution_failed,
    Profile: RecordBuilder._profile,
    Collective: RecordBuilder._collectives, RankLost: RecordBuilder._rank_lost,
}
