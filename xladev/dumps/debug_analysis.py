"""Reads PT_XLA_DEBUG output: analysis blocks, ``pt-xla-profiler:`` lines, the unlowered-op summary.

The reader is fed one decoded line at a time (`DebugLog.feed`) and keeps what it needs in bounded structures:
only the latest ``pt-xla-profiler:`` line of each kind (PyTorch/XLA repeats them on every step from cumulative
counts). The analysis blocks themselves are read by the format's own reader
(`xladev.schema.debug_text.AnalysisBlockReader`); this one gives each block its site and step.

What an event log holds as records is lifted to those records and folded by the run's state (`DebugLog.run`), as
an event log's are: each Compilation Analysis block is the `compile` record it stands for (with the sizes of its
Post Compilation Analysis block, and what changed when xladev's recompilation cause says it), each Execution
Analysis block the `execute` record (and a step barrier's also the `step` record after it); the runtime's warning
lines (a graph growing without a barrier, memory that keeps growing, torch.compile's graph breaks and
recompilations) and the lines of a graph that failed (its message, out-of-memory explainer and saved HLO) are the
records they were written from; each entry of PyTorch/XLA's unlowered-op summary is a `fallback` record standing
for the calls it counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from xladev import analysis
from xladev.analysis.run_failures import Failure
from xladev.analysis.run_state import RunState
from xladev.analysis.run_warnings import record_of_line
from xladev.dumps.debug_summary import SummaryReader
from xladev.schema import debug_text, memory as memory_sizes, record_wording, records as rec
from xladev.schema.debug_text import FRAME_RE, AnalysisBlockReader, GraphEvent
from xladev.schema.sites import join_site

MAX_PROFILER_KINDS = 100

# xladev's end-of-run summary (PT_XLA_DEBUG_LEVEL >= 1, sinks/pt_xla_debug/sink.py `summary_text`).
_SUMMARY_PREFIX = "xladev summary: "
_PROFILER_PREFIX = "pt-xla-profiler: "
_PROFILER_RE = re.compile(r"pt-xla-profiler: (.*?)\s*$")
_FREQUENT_RE = re.compile(r"(\w+) too frequent: (\d+) counts during (\d+) steps")
_SLOW_RE = re.compile(r"(\w+) too slow: longest instance took (\S+?)\.(?:\s|$)")
_NOT_LOWERED_RE = re.compile(r"Op\(s\) not lowered: (.*?)\s*Please open")
_SUMMARY_COUNT_RE = re.compile(r"FRAME \(count=(\d+)\)")
_SUMMARY_OP_RE = re.compile(r'Unlowered Op: "(.*)"')
_GENERIC_FALLBACK_TAG = "xla_fallback"
# The kind (`DebugLog.profiler`) of a warning line whose lead is not the words before its first colon.
_WARNING_KINDS = {rec.GraphBreak: analysis.GRAPH_BREAK, rec.DynamoRecompile: analysis.DYNAMO_RECOMPILE}
_COMPUTATION_HASH_RE = re.compile(r"Computation hash: ([0-9a-fA-F]+)")
# Frames that are never the user's line: torch, torch_xla, jax, xladev, any installed package, the standard library.
_LIBRARY_PATH_RE = re.compile(r"[/\\](?:torch_xla|torch|xladev|jax|jaxlib|site-packages|dist-packages)[/\\]"
                              r"|[/\\]lib[/\\]python\d[\d.]*[/\\]|^<frozen |^<eval_with_key>")
_STEP_CAUSE_RE = re.compile(r"\b(?:mark_step|torch_xla\.sync|sync|StepTrace|parallel loader)\b|^\s*torch_xla\.compile\s*$",
                            re.IGNORECASE)
_VALUE_READ_RE = re.compile(r"access tensor value|\bbefore\b", re.IGNORECASE)
# torch_xla's dynamo bridge runs a compiled graph's pending (lazy) inputs before the graph
# (`DynamoSyncInputExecuteTime`), under PyTorch/XLA's catch-all cause "most likely user code trying to access
# tensor value": no user read, but part of the torch.compile program. Its innermost frame is the bridge.
DYNAMO_INPUT_SYNC = "dynamo syncing the pending inputs of a compiled graph"
_DYNAMO_BRIDGE_RE = re.compile(r"[/\\]torch_xla[/\\]_dynamo[/\\]dynamo_bridge\.py:")
# Executions that are the program itself, neither a step barrier nor a value read: torch.compile's graphs and
# their inputs, and the sync that opens a compiled region.
_PROGRAM_CAUSE_RE = re.compile(r"dynamo is executing a compiled program|dynamo processing input graphs|"
                               r"torch_xla\.compile clear the pending graph|" + re.escape(DYNAMO_INPUT_SYNC))


def user_site(frames: list[str]) -> tuple[str, str]:
    """Picks the user's frame: the first one outside torch, torch_xla, jax and xladev.

    Args:
      frames: frames as printed, ``fn (file:line)``, innermost first.

    Returns:
      ``(file:line, function)``; empty strings when no frame parses or all are library frames (the user's
      was cut off): a frame of torch or xladev is never given as the user's line.
    """
    parsed = [match for match in map(FRAME_RE.match, frames) if match]
    for match in parsed:
        if not _LIBRARY_PATH_RE.search(match.group(2)):
            return f"{match.group(2)}:{match.group(3)}", match.group(1)
    return "", ""


def is_step_cause(cause: str) -> bool:
    """True when a cause names a step barrier (mark_step, torch_xla.sync, StepTrace, loader, a compiled region)."""
    return bool(_STEP_CAUSE_RE.search(cause)) and not _VALUE_READ_RE.search(cause) and not is_program_cause(cause)


def is_program_cause(cause: str) -> bool:
    """True when an execution is part of the program (a torch.compile graph or its inputs, a compiled region's
    opening sync): neither a step nor a value read."""
    return bool(_PROGRAM_CAUSE_RE.search(cause))


class DebugLog(AnalysisBlockReader):
    """PT_XLA_DEBUG output read from one input.

    Attributes:
      compiles: the compiles read (`run.compiled` keeps them in order, each with its line and step).
      profiler: message kind -> (line, message, times seen); kinds are ``CompileTime too
        frequent``, ``Op(s) not lowered`` and so on.
      profiler_numbers: message kind -> parsed numbers of its latest line.
      profiler_first: message kind -> its first message (the growth warning the user saw on stderr).
      not_lowered_ops: ops named by PyTorch/XLA's ``Op(s) not lowered`` lines (names only: no record holds them).
      written_by_xladev: True once a block marks the user's frame (``> ``), as xladev's analysis does and
        PyTorch/XLA's never does.
      run: the run's state, which folds the records the Compilation Analysis blocks (its `compiled`, `sites`
        and `recompilations`), the Execution Analysis blocks (its `executions`, `steps` and `causes`: executions by
        site, cause and graph), the runtime's warning lines (its `warnings`) and the
        lines of the graphs that failed (its `failures`, with the out-of-memory messages) and PyTorch/XLA's
        unlowered-op summary (its `fallbacks`, calls by op and line) stand for.
      run_summary: xladev's end-of-run summary when the log has one: ``steps``, ``compiles``,
        ``transfers``, ``line``, ``hot_spots`` (dicts: kind, site, count, per_step, line) and
        ``fallbacks`` (dicts: op, site, count, line).
    """

    def __init__(self, warn: Callable[..., None], run: RunState | None = None):
        """Creates an empty log.

        Args:
          warn: called with (line, message) for malformed blocks, and ``at_end=True`` for a block that the
            end of the input cut short (`SourceResult.warn`).
          run: the state the lifted records are folded into (an event log's own, whose records it already
            folds); a new one when None.
        """
        super().__init__(warn)
        self.run = run if run is not None else RunState()
        # a compile block, before its memory analysis: its record, its block and whether the block named its step
        self._unsized: tuple[rec.Compile, GraphEvent, bool] | None = None
        self.written_by_xladev = False
        self.profiler: dict[str, tuple[int, str, int]] = {}
        self.profiler_numbers: dict[str, dict[str, float | str]] = {}
        self.profiler_first: dict[str, str] = {}
        self.not_lowered_ops: set[str] = set()
        self._summary_entries: list[dict] = []  # PyTorch/XLA's latest unlowered-op summary, lifted at the end
        self._failure: Failure | None = None  # the latest failure: its HLO's path may follow
        self._oom_open: dict | None = None  # the out-of-memory entry of the failure whose explainer lines follow
        self._summary = SummaryReader()
        self._in_summary = False
        self._summary_entry: dict | None = None

    def is_empty(self) -> bool:
        """True when nothing of PT_XLA_DEBUG output was read."""
        return not (self.compiles or self.run.executions or self.profiler or self.run.fallbacks or self.run_summary
                    or self.run.failures or self.run.warnings)

    def add_out_of_memory(self, lineno: int, found: dict) -> dict | None:
        """Counts an out-of-memory message that is no failure's (XLA's own, as PyTorch/XLA logs it)."""
        return self.run.failures.out_of_memory_seen(lineno, found)

    def feed(self, lineno: int, text: str) -> bool:
        """Reads one line.

        Args:
          lineno: its 1-based line number.
          text: the line without its newline.

        Returns:
          True when the line was PT_XLA_DEBUG output (so no other reader needs it).
        """
        if self._oom_open is not None:
            # The indented lines after xladev's out-of-memory failure are its explainer (runtime/execute/memory_budget.py).
            if text.startswith("  "):
                details = self._oom_open.setdefault("details", ())
                if len(details) < 40:
                    self._oom_open["details"] = (*details, text.strip())
                    self._failure.record.message += "\n" + text.strip()  # as the event log's record holds it
                return True
            self._oom_open = None
        if _SUMMARY_PREFIX in text:
            self._summary.feed(lineno, text.split(_SUMMARY_PREFIX, 1)[1].rstrip())
            return True
        # PyTorch/XLA's old unlowered-op summary, written by its `pt-xla-profiler` logger (every line prefixed)
        # or to PT_XLA_DEBUG_FILE (no prefix): read before the profiler's one-line messages.
        if "Unlowered Op usage summary" in text:
            self._in_summary = True
            self._summary_entries = []  # the latest summary counts every call so far: it replaces the one before
            self._summary_entry = None
            return True
        if self._in_summary and self._feed_summary(lineno, text.split(_PROFILER_PREFIX, 1)[-1]):
            return True
        if "Analysis: " in text and self.feed_analysis(lineno, text):
            return True
        if "pt-xla-profiler" in text:
            match = _PROFILER_RE.search(text)
            if match:
                self._feed_profiler(lineno, match.group(1))
                return True
        if "Computation hash: " in text:
            match = _COMPUTATION_HASH_RE.search(text)
            if match and self._last_compile is not None and not self._last_compile.computation_hash:
                self._last_compile.computation_hash = match.group(1)
            return bool(match)
        found = analysis.parse_out_of_memory(text)
        if found is not None:  # XLA's own out-of-memory lines, as PyTorch/XLA logs and raises them
            self.add_out_of_memory(lineno, found)
            return True
        return False

    @property
    def compiles(self) -> int:
        """The compiles read: an event log's compile records, or a debug log's Compilation Analysis blocks."""
        return self.run.compiles + (self._unsized is not None)

    @property
    def step_syncs(self) -> int:
        """The steps: an event log's step records, or a debug log's executions caused by a step barrier (an
        estimate: a barrier with nothing to run writes no block)."""
        return self.run.steps

    @property
    def run_summary(self) -> dict | None:
        """xladev's end-of-run summary, when the log has one (`debug_summary.SummaryReader`)."""
        return self._summary.summary

    def between_blocks(self) -> bool:
        """True when no analysis block, summary or out-of-memory explainer is open: the next line starts afresh."""
        return not self.blocks_open() and self._oom_open is None and not self._in_summary

    # ------------------------------------------------------------ analysis blocks

    def _outside_block(self, lineno: int, stripped: str) -> None:
        """xladev's lines for a graph that failed, written outside any block: the failure, then its HLO's path."""
        self._flush_compile()  # folded before the failure, as it was written
        failed = debug_text.failure_of(stripped)
        if failed:  # xladev's lines for a graph XLA rejected, that failed while running, or was refused
            graph_hash, kind, message = failed
            record = (rec.CompileFailed if kind == "compile" else rec.ExecuteFailed)(hash=graph_hash, message=message)
            self.run.feed(record, lineno)
            self._failure = self.run.failures.latest
            self._oom_open = self._failure.out_of_memory
            return
        saved = debug_text.saved_hlo_of(stripped)
        if saved and self._failure is not None and not self._failure.record.hlo_path:
            self._failure.record.hlo_path = saved
            if self._failure.out_of_memory is not None:
                self._failure.out_of_memory.setdefault("hlo_path", saved)

    def _emit(self, event: GraphEvent) -> None:
        """A block closed: its site and step are set, and it is lifted to the record it stands for."""
        self._flush_compile()  # a compile before this block is whole: its memory analysis came right after it
        if event.frames and _DYNAMO_BRIDGE_RE.search(event.frames[0]) and _VALUE_READ_RE.search(event.cause):
            event.cause = f"{DYNAMO_INPUT_SYNC} (PyTorch/XLA printed: {event.cause})"
        marked = event.frames[event.user_frame:event.user_frame + 1] if event.user_frame is not None else []
        self.written_by_xladev = self.written_by_xladev or bool(marked)
        event.site, event.function = user_site(marked or event.frames)
        recompile, named = (record_wording.recompile_of_lines(event.recompilation) if event.recompilation
                            else (None, None))
        site = join_site(event.site, event.function)
        if event.kind == "compile":  # fed once its Post Compilation Analysis block is read (`_flush_compile`)
            # its step: the one xladev's recompilation cause names, else the barriers' blocks counted so far
            step = named if named is not None else self.step_syncs
            self._unsized = (rec.Compile(step=step, hash=event.graph_hash, inputs=event.inputs, outputs=event.outputs,
                                         cause={"text": event.cause}, site=site, recompile=recompile,
                                         name=event.name or None), event, named is not None)
            return
        self.run.feed(rec.Execute(hash=event.graph_hash, inputs=event.inputs, outputs=event.outputs,
                                  cause={"text": event.cause}, site=site), event.line)
        if is_step_cause(event.cause):  # the barrier's step ended with its graph: the record an event log holds
            self.run.feed(rec.Step(step=self.run.steps, cause={"text": event.cause}, site=site), event.line)

    def _flush_compile(self) -> None:
        """Folds the compile block read last, with the sizes of its Post Compilation Analysis block (XLA's memory
        analysis, in the record's keys) and the computation hash printed before them."""
        if self._unsized is None:
            return
        record, event, step_known = self._unsized
        self._unsized = None
        record.memory = memory_sizes.from_columns(event.sizes)
        kept = len(self.run.compiled)
        self.run.feed(record, event.line)
        if len(self.run.compiled) > kept:  # the input's step, where it names one, and what only the text holds
            seen = self.run.compiled[-1]
            seen.steps_before, seen.step_known = record.step, step_known
            seen.computation_hash = event.computation_hash

    def finish(self) -> None:
        """Closes blocks left open at the end of the input (a warning each), and folds the last compile and
        PyTorch/XLA's latest unlowered-op summary."""
        super().finish()
        self._flush_compile()
        self._lift_fallback_summary()

    def _lift_fallback_summary(self) -> None:
        """The latest unlowered-op summary, lifted to the `fallback` records it counts: one per entry, standing for
        its calls, at the user's frame of its stack. The op is named where the entry names it (as an ``aten::``
        name); PyTorch/XLA 2.x tags every entry ``xla_fallback``, and its ``Op(s) not lowered`` line
        (`not_lowered_ops`) names the ops instead."""
        for entry in self._summary_entries:
            op = entry["op"]
            name = (rec.Fallback.UNKNOWN_OP if not op or op == _GENERIC_FALLBACK_TAG
                    else op if "::" in op else f"aten::{op}")
            self.run.feed(rec.Fallback(op=name, site=join_site(*user_site(entry["frames"])) or None,
                                       count=entry["count"]), entry["line"])
        self._summary_entries = []

    # ------------------------------------------------------------ other debug lines

    def _feed_profiler(self, lineno: int, message: str) -> None:
        numbers: dict[str, float | str] = {}
        if (match := _FREQUENT_RE.search(message)) is not None:
            kind = f"{match.group(1)} too frequent"
            numbers = {"count": int(match.group(2)), "steps": int(match.group(3))}
            steady = analysis.parse_steady_transfers_line(message)
            if steady is not None:  # xladev's: the reads went on after set-up (`steady_transfers_line`)
                numbers.update(steady_transfers=steady[0], steady_steps=steady[1])
        elif (match := _SLOW_RE.search(message)) is not None:
            kind = f"{match.group(1)} too slow"
            numbers = {"longest": match.group(2)}
        elif (match := _NOT_LOWERED_RE.search(message)) is not None:
            kind = "Op(s) not lowered"
            self.not_lowered_ops.update(op.strip() for op in match.group(1).split(",") if op.strip())
        elif (record := record_of_line(message)) is not None:
            self.run.feed(record, lineno)
            kind = _WARNING_KINDS.get(type(record)) or message.split(":", 1)[0][:80]
        else:
            kind = message.split(":", 1)[0][:80]
        if kind not in self.profiler and len(self.profiler) >= MAX_PROFILER_KINDS:
            return
        seen = self.profiler.get(kind, (0, "", 0))[2]
        self.profiler[kind] = (lineno, message, seen + 1)
        self.profiler_first.setdefault(kind, message)
        if numbers:
            self.profiler_numbers[kind] = numbers

    def _feed_summary(self, lineno: int, text: str) -> bool:
        stripped = text.strip()
        if stripped.startswith("====="):
            self._in_summary = False
            return True
        if (match := _SUMMARY_COUNT_RE.search(stripped)) is not None:
            self._summary_entry = {"count": int(match.group(1)), "op": "", "frames": [], "line": lineno}
            self._summary_entries.append(self._summary_entry)
        elif (match := _SUMMARY_OP_RE.search(stripped)) is not None and self._summary_entry is not None:
            self._summary_entry["op"] = match.group(1)
        elif FRAME_RE.match(stripped) and self._summary_entry is not None:
            self._summary_entry["frames"].append(stripped)
        elif stripped and not stripped.startswith(("Note:", "-----", "=====", "Python Frames:")):
            self._in_summary = False
            return False
        return True
