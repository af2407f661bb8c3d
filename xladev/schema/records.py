"""The event log's records (schema `xladev.events`, docs/event-log.md): one type per JSON line.

The writer (`xladev.sinks.eventlog_writer`) builds these from runtime events and calls `to_record()`;
the report's reader and the TUI call `parse_line()` / `from_record()`. Nothing else knows the format.
A log's first line is read by `log_header`; the sentences records are shown as are in `record_wording`; what
every record shares (its JSON object, the schema's version, the errors) is in `record_base`.

    {"type":"header","schema":"xladev.events/1",...}     first line
    {"type":"compile","t":...,"step":0,"hash":...}       one per event
    {"type":"end","t":...,"reason":"exit","steps":10}   last line of a run that ended

`from_record` is lenient where a field is missing (its default) and strict where one has the wrong
type (`RecordError` naming the field), so one bad line never loses the rest of a log.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, ClassVar

from xladev.schema.record_base import (  # re-exported: a reader imports the whole format from here
    SCHEMA, SCHEMA_NAME, SCHEMA_VERSION, NotAnEventLog, Record, RecordError, TimedRecord)
from xladev.schema.record_fields import transient
from xladev.schema.record_wording import step_window, tensorboard_command

# ---------------------------------------------------------------- the record types
# `cause` is {"kind": CauseKind name, "text": what PT_XLA_DEBUG prints, "detail": ...};
# `site` is `file:line (function)` of the user's frame and `frame` the same as {"file","line","name"}.

# The detail of a DYNAMO_COMPILE cause when a torch.compile graph compiled before is compiled again for new input
# shapes (a dynamic graph): TorchDynamo did not hand it over again, so PyTorch/XLA's DynamoExtractCompiledGraph
# does not count it; CompileTime does.
DYNAMO_NEW_SHAPES = "new input shapes of a graph compiled before"


@dataclasses.dataclass(slots=True)
class Header(Record):
    """The first line. Only `schema` identifies a log; the rest describes the run and may be null."""

    TYPE: ClassVar[str] = "header"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("runtime", "absent")
    schema: str = SCHEMA
    version: int = SCHEMA_VERSION
    command: str | None = ""
    argv: list | None = None
    cwd: str | None = ""
    pid: int | None = None
    host: str | None = ""
    rank: int | None = 0
    world_size: int | None = 1
    versions: dict | None = None
    device: str | None = ""
    start_unix: float | None = 0.0
    start_iso: str | None = ""
    clock: str | None = "perf_counter_ns"
    clock_start_ns: int | None = 0
    api: str | None = None  # "xladev", or "torch_xla" through xladev's alias (xladev run); null in older logs
    # Who ran the graphs: "torch_xla" for a real torch_xla observed by `xladev.attach`; left out for xladev's own.
    runtime: str | None = None
    # What this log cannot hold (an adapter's: no IR text...), in words, so that an absence is not read as a zero.
    absent: list | None = None


@dataclasses.dataclass(slots=True)
class GraphText(TimedRecord):
    """A graph's IR text, written once per graph hash before its first compile or execute record."""

    TYPE: ClassVar[str] = "graph"
    EVENTS: ClassVar[tuple[str, ...]] = ()  # written before the first compile or execute record of its graph
    REQUIRED: ClassVar[tuple[str, ...]] = ("hash",)
    hash: str = ""
    nodes: int = 0
    inputs: int = 0
    outputs: int = 0
    ir: str = ""


@dataclasses.dataclass(slots=True)
class Compile(TimedRecord):
    """A graph compiled. `recompile` is set when its site had compiled another graph before:
    {"previous", "changes", "graphs_at_site", "compile_ns_at_site"}."""

    TYPE: ClassVar[str] = "compile"
    # A recompile's cause (`Recompile`, published just before) goes into its graph's compile record.
    EVENTS: ClassVar[tuple[str, ...]] = ("Compile", "Recompile")
    REQUIRED: ClassVar[tuple[str, ...]] = ("hash",)
    hash: str = ""
    nodes: int = 0
    inputs: int = 0
    outputs: int = 0
    compile_ns: int = 0
    memory: dict = dataclasses.field(default_factory=dict)
    cause: dict = dataclasses.field(default_factory=dict)
    site: str | None = None
    frame: dict | None = None
    persistent_cache_hit: bool | None = None
    recompile: dict | None = None  # present only on a recompilation
    donated: int | None = None  # input buffers donated to the executable (InputOutputAliasCount); None in older logs
    name: str | None = None  # the compiled region's graph name (PyTorch/XLA's "Graph Name"), when there is one
    # SPMD only: each input's and output's shape, sharding and bytes per device (`Compile.shardings`).
    shardings: dict | None = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("recompile", "name", "shardings")


@dataclasses.dataclass(slots=True)
class CompileStart(TimedRecord):
    """XLA started compiling a graph; its ``compile`` or ``compile_failed`` record follows."""

    TYPE: ClassVar[str] = "compile_start"
    EVENTS: ClassVar[tuple[str, ...]] = ("CompileStart",)
    REQUIRED: ClassVar[tuple[str, ...]] = ("hash",)
    hash: str = ""
    nodes: int = 0
    site: str | None = None
    frame: dict | None = None
    name: str | None = None  # the compiled region's graph name, when there is one

    OPTIONAL: ClassVar[tuple[str, ...]] = ("name",)


@dataclasses.dataclass(slots=True)
class _GraphFailed(TimedRecord):
    """A graph that failed; `hlo_path` is where its HLO was saved."""

    hash: str = ""
    message: str = ""
    hlo_path: str = ""
    cause: dict = dataclasses.field(default_factory=dict)
    site: str | None = None
    frame: dict | None = None


@dataclasses.dataclass(slots=True)
class CompileFailed(_GraphFailed):
    """XLA (or the lowering) rejected a graph."""

    TYPE: ClassVar[str] = "compile_failed"
    EVENTS: ClassVar[tuple[str, ...]] = ("CompileFailed",)


@dataclasses.dataclass(slots=True)
class ExecuteFailed(_GraphFailed):
    """A compiled graph failed while running."""

    TYPE: ClassVar[str] = "execute_failed"
    EVENTS: ClassVar[tuple[str, ...]] = ("ExecuteFailed",)


@dataclasses.dataclass(slots=True)
class Execute(TimedRecord):
    TYPE: ClassVar[str] = "execute"
    EVENTS: ClassVar[tuple[str, ...]] = ("Execute",)
    REQUIRED: ClassVar[tuple[str, ...]] = ("hash",)
    hash: str = ""
    execute_ns: int = 0
    cached: bool = False
    nodes: int = 0
    inputs: int = 0
    outputs: int = 0
    cause: dict = dataclasses.field(default_factory=dict)
    site: str | None = None
    frame: dict | None = None
    name: str | None = None  # the compiled region's graph name, when there is one
    # The host's work around the run (UnwrapXlaData, WrapXlaData, DeviceLockWait); None in older logs.
    unwrap_ns: int | None = None
    wrap_ns: int | None = None
    lock_wait_ns: int | None = None
    # The devices it ran on at once when more than one (SPMD mode); absent for a run on one device.
    devices: int | None = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("name", "devices")


@dataclasses.dataclass(slots=True)
class Step(TimedRecord):
    """A step barrier ended; `interval_ns` is the time since the previous one (or the log's start).

    `device_bytes` (live at the step's end) and `peak_device_bytes` (the most the step held) are written for the
    steps the runtime sampled, and absent otherwise.
    """

    TYPE: ClassVar[str] = "step"
    EVENTS: ClassVar[tuple[str, ...]] = ("Step",)
    duration_ns: int = 0
    interval_ns: int = 0
    cause: dict = dataclasses.field(default_factory=dict)
    site: str | None = None
    frame: dict | None = None
    device_bytes: int | None = None
    peak_device_bytes: int | None = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("device_bytes", "peak_device_bytes")

    def memory_sample(self) -> tuple[int, int, int] | None:
        """(step, live device bytes, peak bytes) of a sampled step (a peak not written is the live figure); None
        for a step the runtime did not sample."""
        if self.device_bytes is None:
            return None
        peak = self.peak_device_bytes if self.peak_device_bytes is not None else self.device_bytes
        return self.step, self.device_bytes, peak


@dataclasses.dataclass(slots=True)
class Transfer(TimedRecord):
    """A copy: `dir` is `to_device` (with `count` uploads) or `from_device` (with the access `kind`)."""

    TYPE: ClassVar[str] = "transfer"
    EVENTS: ClassVar[tuple[str, ...]] = ("TransferToDevice", "TransferFromDevice")
    dir: str = "from_device"
    bytes: int = 0
    ns: int = 0
    count: int = 1
    kind: str | None = None
    site: str | None = None
    frame: dict | None = None

    def to_record(self) -> dict:
        out = Record.to_record(self)
        # Each direction writes its own fields only, as the log always has.
        for name in (("kind", "site", "frame") if self.dir == "to_device" else ("count",)):
            del out[name]
        return out


@dataclasses.dataclass(slots=True)
class Ops(TimedRecord):
    """Ops recorded since the last barrier; `tracing_count` of them timed, `tracing_ns` in total."""

    TYPE: ClassVar[str] = "ops"
    EVENTS: ClassVar[tuple[str, ...]] = ("Ops",)
    counts: dict = dataclasses.field(default_factory=dict)
    tracing_ns: int = 0
    tracing_count: int = 0
    tracing_samples: list = transient(factory=list)
    tensors_created: int = 0  # device tensors created (CreateXlaTensor); 0 in older logs
    tensors_destroyed: int = 0  # device tensors freed (DestroyXlaTensor); 0 in older logs

    @classmethod
    def from_record(cls, data: dict) -> "Ops":
        record = super(Ops, cls).from_record(data)
        bad = next((k for k, v in record.counts.items() if type(v) is not int), None)
        if bad is not None:
            raise RecordError(f"ops record: the count of {bad!r} is {type(record.counts[bad]).__name__}, expected int")
        return record


@dataclasses.dataclass(slots=True)
class Fallback(TimedRecord):
    """An op ran on the CPU fallback. `op` is `UNKNOWN_OP` where the input does not name it (PyTorch/XLA 2.x's
    unlowered-op summary tags every call ``xla_fallback``); `count` is set where one record stands for several
    calls (that summary, read back): absent, one."""

    TYPE: ClassVar[str] = "fallback"
    EVENTS: ClassVar[tuple[str, ...]] = ("Fallback",)
    UNKNOWN_OP: ClassVar[str] = "?"
    op: str = "?"
    site: str | None = None
    frame: dict | None = None
    cpu_ns: int = 0  # the CPU kernel's time (0 in logs written before it was recorded)
    count: int | None = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("count",)

    @property
    def calls(self) -> int:
        """The calls it stands for."""
        return 1 if self.count is None else self.count


@dataclasses.dataclass(slots=True)
class CacheMiss(TimedRecord):
    """A Python scalar uploaded because it was not in the scalar cache."""

    TYPE: ClassVar[str] = "cache_miss"
    EVENTS: ClassVar[tuple[str, ...]] = ("CacheMiss",)
    value: Any = None
    dtype: str = ""


@dataclasses.dataclass(slots=True)
class GraphGrowing(TimedRecord):
    TYPE: ClassVar[str] = "graph_growing"
    EVENTS: ClassVar[tuple[str, ...]] = ("GraphGrowing",)
    ops: int = 0
    site: str | None = None
    frame: dict | None = None


@dataclasses.dataclass(slots=True)
class MemoryGrowing(TimedRecord):
    """Live device memory (`space` "device") or the process's resident memory ("host") rose at every sampled step
    from `from_step` to `step`; `holders` says what grew (the runtime's `MemoryGrowing` event: kind, line,
    per_step_bytes, buffers)."""

    TYPE: ClassVar[str] = "memory_growing"
    EVENTS: ClassVar[tuple[str, ...]] = ("MemoryGrowing",)
    from_step: int = 0
    from_bytes: int = 0
    to_bytes: int = 0
    per_step_bytes: float = 0.0
    holders: list = dataclasses.field(default_factory=list)
    space: str = "device"  # "host": the process's resident memory grew


@dataclasses.dataclass(slots=True)
class GraphBreak(TimedRecord):
    """torch.compile's capture stopped at `site`: the code there runs outside the compiled graphs.

    `by` is `dynamo` (TorchDynamo could not trace it; it runs eagerly, recorded lazily) or `xladev` (a captured
    graph needs the host for an op, so it runs lazily op by op instead of as one program).
    """

    TYPE: ClassVar[str] = "graph_break"
    EVENTS: ClassVar[tuple[str, ...]] = ("GraphBreak",)
    REQUIRED: ClassVar[tuple[str, ...]] = ("reason",)
    by: str = "dynamo"
    reason: str = ""
    site: str | None = None
    frame: dict | None = None


@dataclasses.dataclass(slots=True)
class DynamoRecompile(TimedRecord):
    """A torch.compile'd function compiled again because `guard` failed; `compiles` counts its compiles so far."""

    TYPE: ClassVar[str] = "dynamo_recompile"
    EVENTS: ClassVar[tuple[str, ...]] = ("DynamoRecompile",)
    REQUIRED: ClassVar[tuple[str, ...]] = ("guard",)
    function: str = "?"
    guard: str = ""
    compiles: int = 0
    site: str | None = None
    frame: dict | None = None


@dataclasses.dataclass(slots=True)
class Profile(TimedRecord):
    """A profile capture of this process was written: the `.xplane.pb`, its TensorBoard log directory, the
    runtime steps it covers (`first_step`..`last_step`, null when unknown) and the call that captured it."""

    TYPE: ClassVar[str] = "profile"
    EVENTS: ClassVar[tuple[str, ...]] = ("Profile",)
    REQUIRED: ClassVar[tuple[str, ...]] = ("path",)
    path: str = ""
    logdir: str = ""
    first_step: int | None = None
    last_step: int | None = None
    how: str = ""

    def window(self) -> str:
        """The steps it covers: `steps 5–7`, `step 5`, or `steps ?` when the capture did not say."""
        return step_window(self.first_step, self.last_step)

    def open_command(self) -> str:
        """The command that shows it: `tensorboard --logdir <logdir>` (Profile tab)."""
        return tensorboard_command(self.logdir or os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.dirname(self.path)))))


@dataclasses.dataclass(slots=True)
class Collective(TimedRecord):
    """A graph holding collectives ran on every rank: `count` collectives of `bytes` from this rank, `wait_ns`
    spent waiting for the other ranks to reach it, `ns` running it; `sites` the user's line of each."""

    TYPE: ClassVar[str] = "collective"
    EVENTS: ClassVar[tuple[str, ...]] = ("Collective",)
    REQUIRED: ClassVar[tuple[str, ...]] = ("hash",)
    hash: str = ""
    count: int = 0
    bytes: int = 0
    wait_ns: int = 0
    ns: int = 0
    sites: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class RankLost(TimedRecord):
    """Another rank of the job is gone (it died, or stopped answering): this rank's collectives fail."""

    TYPE: ClassVar[str] = "rank_lost"
    EVENTS: ClassVar[tuple[str, ...]] = ("RankLost",)
    rank: int = -1
    reason: str = ""


@dataclasses.dataclass(slots=True)
class MetricsReport(TimedRecord):
    """A metrics report: the run's counters and metrics at one point, as PyTorch/XLA's `met.metrics_report()` and
    XLA_METRICS_FILE print them; a report read from text is lifted to one. They are cumulative: folded, a report
    stands for every count before it.

    Attributes:
      counters: counter name -> value.
      metrics: metric name -> its printed fields (`xladev.schema.metrics_text.MetricBlock.printed`).
      report_step: N of the ``[MetricsData; step=N]`` line before it, when it has one.
      index: its place among the reports of its input (0-based).
      counter_lines, metric_lines: name -> the input line of its block (kept in memory only: a reader's).
    """

    TYPE: ClassVar[str] = "metrics_report"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("report_step",)
    counters: dict = dataclasses.field(default_factory=dict)
    metrics: dict = dataclasses.field(default_factory=dict)
    report_step: int | None = None
    index: int = 0
    counter_lines: dict = transient(factory=dict)
    metric_lines: dict = transient(factory=dict)


@dataclasses.dataclass(slots=True)
class End(Record):
    """The last line of a log whose run ended (a killed run has none).

    `reason` is `exit` (the process exited), `stop` (`event_log.stop()`), or `terminated` (SIGTERM ended the
    process: xladev wrote this line, then the process died by the signal). `signal` names the signal the
    process received (`SIGTERM`), also when a handler of the script's then let it exit; it is left out when
    none came. Both added in version 1 without a version change: older readers show the reason as text and
    skip the field.
    """

    TYPE: ClassVar[str] = "end"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("signal",)
    t: int = 0
    reason: str = "exit"
    steps: int = 0
    signal: str | None = None

    def describe(self) -> str:
        """How the run ended, in words: `exit`, `stop`, `terminated by SIGTERM`, `exit after SIGTERM`."""
        if self.reason == "terminated":
            return f"terminated by {self.signal}" if self.signal else "terminated"
        return f"{self.reason} after {self.signal}" if self.signal else self.reason


RECORD_TYPES: dict[str, type[Record]] = {cls.TYPE: cls for cls in (
    Header, GraphText, CompileStart, Compile, CompileFailed, Execute, ExecuteFailed, Step, Transfer, Ops, Fallback, CacheMiss,
    GraphGrowing, MemoryGrowing, GraphBreak, DynamoRecompile, Profile, Collective, RankLost, MetricsReport, End)}

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def dumps(record: Record) -> str:
    """One line of the log (without its newline)."""
    return _encode(record.to_record())


def is_end_line(raw: bytes) -> bool:
    """True for the log's `end` record, however it was serialised (spacing, key order, escapes).

    The line is parsed: a log rewritten by another JSON writer (`json.dumps` of each record, `jq`)
    still ends. Only a line that can hold the type's name is parsed, so that a follower of a
    growing log parses almost no other line twice: ``"end"`` appears as is unless a JSON escape
    (``\\u0065``) spells it.

    Args:
      raw: one line of the log.

    Returns:
      True for a well-formed `end` record.
    """
    if End.TYPE.encode() not in raw and b"\\u" not in raw:
        return False
    try:
        return isinstance(parse_line(raw), End)
    except RecordError:
        return False


def from_record(data: dict) -> Record | None:
    """The typed record of a JSON object; None for a type this reader does not know (a newer writer).

    Raises:
      RecordError: the object has no string `type`, or a field of the wrong type.
    """
    kind = data.get("type")
    if not isinstance(kind, str):
        raise RecordError(f"record without a string 'type' field (keys: {', '.join(sorted(map(str, data))[:6])})")
    cls = RECORD_TYPES.get(kind)
    return None if cls is None else cls.from_record(data)


def parse_line(text: str | bytes) -> Record | None:
    """The record of one log line; None for an unknown record type.

    Raises:
      RecordError: the line is not a JSON object, or a field has the wrong type.
    """
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"not a JSON record ({exc.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise RecordError(f"not a JSON object but {type(data).__name__}")
    return from_record(data)
