"""The `PT_XLA_DEBUG_LEVEL` output: blocks on compile/execute, windowed auto-analysis, end-of-run summary."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

from xladev import analysis
from xladev.analysis import fallback_reasons
from xladev.analysis import wall_time
from xladev.analysis.run_state import Limits, RunState
from xladev._flags import config
from xladev.events import (
    CompileFailed, GraphBreak, DynamoRecompile, ExecuteFailed, Compile, Execute,
    GraphGrowing, MemoryGrowing, Recompile, Step, bus, CauseKind, ending,
)
from xladev.schema.sites import UNKNOWN_SITE, site_of
from xladev.schema.records import End
from xladev.schema import debug_text
from xladev.schema.debug_text import post_compilation_block
from xladev.schema.record_wording import SUMMARY_ENDED, layout_lines, recompilation_lines, run_identity
from xladev.schema.sites import short_site
from xladev.schema.units import format_bytes, format_time_ns
from xladev.sinks._lifecycle import Sink
from xladev.sinks._output import OutputFile
from xladev.schema.ranks import per_rank_path, rank_label
from xladev.sinks.pt_xla_debug.blocks import analysis_block
from xladev.sinks.event_records import RecordBuilder


# What the analysis keeps of the run in the user's process: the counts it states, not every step's times.
_KEPT = Limits(step_times=0, recent_steps=1, graphs=10_000, transfer_sites=10_000, profiles=0, failures=0,
               graph_texts=(0, 0))


def debug_level() -> int:
    """The effective level: PT_XLA_DEBUG_LEVEL, or 2 when PT_XLA_DEBUG is on."""
    level = config.debug_level
    if config.debug and level == 0:
        return 2
    return level


class DebugOutput:
    """Where analysis text goes: appended to PT_XLA_DEBUG_FILE, or stderr.

    A file that cannot be opened or written turns the output off with one line on stderr (`OutputFile`).
    """

    def __init__(self, path: str, value: str | None = None) -> None:
        """Args:
          path: the file to append to; "" for stderr.
          value: PT_XLA_DEBUG_FILE as the user gave it, when `path` is its rank's file.
        """
        self._lock = threading.Lock()
        self._file = OutputFile("PT_XLA_DEBUG_FILE", value or path, path) if path else None

    @property
    def off(self) -> bool:
        """True once the file could not be opened or written."""
        return self._file is not None and self._file.off

    def write(self, text: str) -> None:
        if self._file is not None:
            self._file.write(text.encode("utf-8"))  # one block at once: a failure cuts no block in two
            return
        with self._lock:
            sys.stderr.write(text)
            sys.stderr.flush()


class AnalysisSink(Sink):
    """Prints the analysis of this process. In a job of several processes every rank prints (to its own
    `PT_XLA_DEBUG_FILE.<rank>`, or to its stderr), and each block says which rank it comes from."""

    wants_frames = True

    def __init__(self, level: int, output: DebugOutput) -> None:
        self.level = level
        self.out = output
        self._lock = threading.RLock()
        # The run so far, folded from the records the event log would hold (`RunState`, as the report and the TUI
        # fold them), so the summary and the report of the same run cannot disagree.
        self._started_ns = time.perf_counter_ns()
        self._records = RecordBuilder(self._started_ns, graph_texts=False)
        self.run = RunState(_KEPT)
        self.stated: dict[str, str] = {}
        self.growth: list[GraphGrowing] = []
        self._recompiled: dict[str, Recompile] = {}
        self._dynamo_recompiled: DynamoRecompile | None = None  # the last one, for its graphs' compile blocks
        label = rank_label()
        self.process = [("Process: ", [f"{label} (pid {os.getpid()}, {socket.gethostname()})"])] if label else []

    def start(self) -> "AnalysisSink":
        if not self.running:
            ending.at_end(self.write_summary)
        return Sink.start(self)

    # ---- events ---------------------------------------------------------------------------------
    def on_event(self, event) -> None:
        if self.out.off:  # its file could not be written (said once): nothing more to analyse for it
            self.stop()
            return
        # The summary may be written on another thread (SIGTERM's) while events still arrive.
        with self._lock:
            self._on_event(event)

    def _on_event(self, event) -> None:
        for record in self._records.records(event):
            self.run.feed(record)
        kind = type(event)
        cause = getattr(event, "cause", None)
        if cause is not None and cause.kind is CauseKind.EAGER_DEBUG and kind in (Compile, Execute):
            # Eager debug mode runs each op as its own graph: like PyTorch/XLA's eager mode, no analysis
            # blocks for them (the times still count, as EagerOpCompileTime/EagerOpExecuteTime).
            return
        if kind is Compile:
            self._compiled(event)
        elif kind is Recompile:  # published just before its graph's Compile
            self._recompiled[event.graph_hash] = event
        elif kind is Execute:
            if self.level >= 2:
                self.out.write(analysis_block("Execution Analysis: ", "Execution Cause", event.cause, event.graph_hash,
                                              event.num_inputs, event.num_outputs, event.frames, config.debug_max_frame,
                                              self.process + _collective_section(event.graph),
                                              graph_name=event.graph_name))
        elif kind is Step:
            self._auto_analysis()
        elif kind is GraphGrowing:
            self.growth.append(event)
            self.out.write(f"{analysis.PROFILER_PREFIX}"
                           f"{analysis.graph_growing_message(ops=event.ops, step=event.step, site=event.site)}\n")
        elif kind is MemoryGrowing:
            message = analysis.memory_growing_message(
                from_step=event.from_step, from_bytes=event.from_bytes, to_step=event.step, to_bytes=event.to_bytes,
                per_step_bytes=event.per_step_bytes, holders=event.holders, format_bytes=format_bytes,
                space=event.space)
            self.out.write(f"{analysis.PROFILER_PREFIX}{message}\n")
        elif kind is GraphBreak:
            self.out.write(f"{analysis.PROFILER_PREFIX}"
                           f"{analysis.graph_break_message(site=short_site(site_of(event.frames)), reason=event.reason, by=event.by)}\n")
        elif kind is DynamoRecompile:  # published while TorchDynamo compiles; its graphs' compiles follow
            self._dynamo_recompiled = event
            self.out.write(f"{analysis.PROFILER_PREFIX}" + analysis.dynamo_recompile_message(
                function=event.function, site=short_site(site_of(event.frames)), guard=event.guard,
                compiles=event.compiles) + "\n")
        elif kind is ExecuteFailed:
            # no saved HLO: refused before running (the ranks' graphs differ, or a rank is gone)
            verb = debug_text.FAILED_WHILE_RUNNING if event.hlo_path else debug_text.COULD_NOT_RUN
            self.out.write(debug_text.failure_lines("Execution Analysis: ", event.graph_hash, verb, event.message,
                                                    event.hlo_path, self.process[0][1][0] if self.process else ""))
        elif kind is CompileFailed:
            self.out.write(debug_text.failure_lines(
                "Compilation Analysis: ", event.graph_hash, debug_text.FAILED_TO_COMPILE,
                event.message.splitlines()[0] if event.message else "", event.hlo_path))

    def _compiled(self, event: Compile) -> None:
        r = self._recompiled.pop(event.graph_hash, None)
        extra = ([("Recompilation Cause", recompilation_lines(r.site, r.previous_hash, r.changes, r.graphs_at_site,
                                                              r.compile_ns_at_site, r.step))] if r else [])
        guard = self._dynamo_recompiled
        if guard is not None and event.cause.kind is CauseKind.DYNAMO_COMPILE:
            # The graphs TorchDynamo compiles after a failed guard say which guard, as a recompile says what changed.
            extra.insert(0, ("Dynamo Recompilation Cause", [
                f"{guard.function} compiled again (compile {guard.compiles}): guard failed: {guard.guard}"]))
        extra = (self.process + extra + _collective_section(event.graph) + _recompute_section(event.graph)
                 + _sharding_section(event.shardings))
        self.out.write(analysis_block("Compilation Analysis: ", "Compilation Cause", event.cause, event.graph_hash,
                                      event.num_inputs, event.num_outputs, event.frames, config.debug_max_frame, extra,
                                      event.graph_name))
        self.out.write(post_compilation_block(event.memory))

    # ---- windowed auto-metrics analysis ----------------------------------------------------------
    def findings(self) -> dict[str, tuple[str, str]]:
        """Current auto-analysis lines keyed by rule: (text naming its cause, identity of that cause)."""
        h = self.run
        calls: dict[str, int] = {}
        for (op, _), n in h.fallbacks.items():
            calls[op] = calls.get(op, 0) + n
        messages = analysis.auto_metrics_messages(
            steps=h.steps, compiles=h.compiles, transfers=h.reads, counters=calls,
            longest_compile_ns=h.longest_compile_ns, longest_execute_ns=h.longest_execute_ns,
            format_time=format_time_ns)
        found = {}
        for message in messages:
            rule = message.split(":", 1)[0]
            cause, identity = self._cause_for(rule)
            found[rule] = (message + cause, identity)
        return found

    def _cause_for(self, rule: str) -> tuple[str, str]:
        h = self.run
        if rule == "CompileTime too frequent" and h.recompilations:
            last = h.recompilations[-1]
            site = last.site or UNKNOWN_SITE
            return f"; cause: {last.headline()} (at {short_site(site)})", site + last.headline().split(":")[0]
        if rule == "TransferFromDeviceTime too frequent":
            spots = h.hot_spots()
            if spots:
                top = spots[0]
                per_step = top.count / max(h.steps, 1)
                site = top.site or UNKNOWN_SITE
                text = f"; hot spot: {top.kind} at {short_site(site)} ({top.count} transfers, {per_step:.2f} per step)"
                identity = f"{top.kind}@{site}"
                reads, steps = h.steady_reads()
                if reads:  # stated again once reads go on after set-up: a log cut short then tells them from set-up
                    text += f"; {analysis.steady_transfers_line(transfers=reads, steps=steps, one_time=h.reads - reads)}"
                    identity += " after set-up"
                return text, identity
        if rule == "Op(s) not lowered":
            sites = h.fallback_sites()
            if sites:
                listed = sorted({(op, short_site(site or UNKNOWN_SITE)) for op, site, _ in sites})[:6]
                reasons = sorted({f"{op}: {fallback_reasons.reason(op)}" for op, _ in listed})
                return ("; at " + ", ".join(f"{op} ({site})" for op, site in listed) + "; why: " + ", ".join(reasons),
                        repr(listed))
        return "", ""

    def _auto_analysis(self) -> None:
        found = self.findings()
        for rule, (text, identity) in found.items():
            # Stated once when it becomes true, and again only when its cause changes.
            if self.stated.get(rule) != identity:
                self.out.write(f"{analysis.PROFILER_PREFIX}{text}\n")
                self.stated[rule] = identity
        for rule in list(self.stated):
            if rule not in found:
                del self.stated[rule]

    # ---- end of run ---------------------------------------------------------------------------------
    def summary_text(self) -> str:
        h = self.run
        p = "xladev summary: "
        wall_ns = float(time.perf_counter_ns() - self._started_ns)
        lines = ["", f"{p}{'=' * 80}", f"{p}{h.steps} steps, {h.compiles} compiles, {h.reads} device->host transfers",
                 f"{p}{wall_time.summary_line(h.time_breakdown(wall_ns, 'measured by the debug analysis'))}",
                 f"{p}{self._steady_transfers_line()}",
                 f"{p}Run: {run_identity(socket.gethostname(), os.getpid(), bus.started_unix)}",
                 f"{p}{analysis.api_line(bus.api)}"]
        reason, signal_name = ending.end_reason()
        if signal_name:  # a signal ended the run (torchrun's SIGTERM): the report tells it from a finished one
            lines.append(f"{p}{SUMMARY_ENDED}{End(reason=reason, signal=signal_name).describe()}")
        if self.process:
            lines.append(f"{p}Process: {self.process[0][1][0]}")
        sites = h.compiles_per_site()
        if sites:
            lines.append(f"{p}Compiles per trigger site:")
            for site, count, ns in sites:
                lines.append(f"{p}  {short_site(site or UNKNOWN_SITE)}: {count} graph(s), {format_time_ns(ns)} compiling")
        if h.recompilations:
            lines.append(f"{p}Recompilation causes:")
            per_site: dict[str, int] = {}
            for rec in h.recompilations:
                site = rec.site or UNKNOWN_SITE
                per_site[site] = per_site.get(site, 0) + 1
                if per_site[site] <= 5:
                    lines.append(f"{p}  step {rec.step} at {short_site(site)}: {rec.headline()}")
            for site, n in per_site.items():
                if n > 5:
                    lines.append(f"{p}  ... {n - 5} more at {short_site(site)}")
        spots = h.hot_spots()
        if spots:
            lines.append(f"{p}Transfer hot spots (device -> host):")
            for s in spots[:10]:
                lines.append(f"{p}  {s.kind} at {short_site(s.site or UNKNOWN_SITE)}: {s.count} transfers, {format_bytes(s.nbytes)}, "
                             f"{s.count / max(h.steps, 1):.2f} per step")
        fallbacks = h.fallback_sites()
        if fallbacks:
            lines.append(f"{p}CPU fallback ops:")
            for op, site, n in fallbacks[:10]:
                lines.append(f"{p}  {op} at {short_site(site or UNKNOWN_SITE)}: {n} call(s); {fallback_reasons.explanation(op)}")
        if self.growth:
            lines.append(f"{p}Graphs that grew without a barrier:")
            for event in self.growth[-5:]:
                lines.append(f"{p}  step {event.step} at {event.site}: {event.ops:,} ops pending")
        lines.append(f"{p}{'=' * 80}")
        return "\n".join(lines) + "\n"

    def _steady_transfers_line(self) -> str:
        reads, steps = self.run.steady_reads()
        return analysis.steady_transfers_line(transfers=reads, steps=steps, one_time=self.run.reads - reads)

    def write_summary(self) -> None:
        """Writes the end-of-run summary, the analysis's last words (at the end of the run: `ending.at_end`)."""
        if self.subscription is not None and self.level >= 1:
            self.stop()  # on SIGTERM the training thread may run on meanwhile: nothing of it after the summary
            with self._lock:
                text = self.summary_text()
            try:
                self.out.write(text)
            except ValueError:  # stream closed at interpreter exit
                pass


def _collective_section(graph) -> list[tuple[str, list[str]]]:
    """The block's `Collectives:` section for a graph holding collectives (none for others): each collective,
    what it moves from this rank, and the user's line that asked for it."""
    collectives = getattr(graph, "collectives", None)
    found = collectives() if collectives is not None else []
    if not found:
        return []
    lines = [f"{op} of {format_bytes(nbytes)} from this rank, at {site or 'an unknown line'}"
             for op, nbytes, site in found[:8]]
    if len(found) > 8:
        lines.append(f"... and {len(found) - 8} more")
    lines.append("the graph runs on every rank at once: each waits for the others to reach it")
    return [("Collectives: ", lines)]


def _sharding_section(shardings: dict | None) -> list[tuple[str, list[str]]]:
    """The block's `Sharding:` section for an SPMD graph (none for others)."""
    return [("Sharding: ", layout_lines(shardings))] if shardings else []


def _recompute_section(graph) -> list[tuple[str, list[str]]]:
    """The block's `Gradient Checkpointing:` section for a graph that recomputes checkpointed regions (none for others)."""
    recomputed = getattr(graph, "recomputed_ops", None)
    count = recomputed() if recomputed is not None else 0
    if not count:
        return []
    return [("Gradient Checkpointing: ", [f"{count} ops recompute checkpointed forward regions in the backward "
                                          f"(IR scope checkpoint_recompute)"])]


_sink: AnalysisSink | None = None


def start_from_flags() -> AnalysisSink | None:
    """Starts the analysis when PT_XLA_DEBUG / PT_XLA_DEBUG_LEVEL ask for it (every rank of a job: PT_XLA_DEBUG_FILE
    becomes each rank's own file, `path.<rank>`)."""
    global _sink
    level = debug_level()
    if level <= 0 or _sink is not None:
        return _sink
    output = DebugOutput(per_rank_path(config.debug_file) if config.debug_file else "", config.debug_file)
    if output.off:  # the file cannot be written: said once, and there is nowhere to write the analysis
        return None
    _sink = AnalysisSink(level, output)
    _sink.start()
    return _sink
