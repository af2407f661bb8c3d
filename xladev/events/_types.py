"""Event records. Plain dataclasses so sinks can serialise them without the runtime.

An event never hands out a runtime object: a graph travels as a `GraphInfo`, a read-only view the
runtime implements (summary, IR/dot/HLO text, hashes), so no subscriber imports the runtime.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from xladev.schema.record_wording import change_headline

if TYPE_CHECKING:
    from xladev.graphdiff import GraphSummary


class CauseKind(str, enum.Enum):
    """Why a barrier ran. The set is closed so analysis can rely on it."""

    # PyTorch/XLA's cause lines where it has one. DEVICE_LOADER and STEP_TRACE keep 2.7's words, as event
    # logs already hold them; the analysis blocks write 2.8+'s (sinks/pt_xla_debug/blocks.py PT_XLA_CAUSES).
    USER_MARK_STEP = "user torch_xla.sync"
    DEVICE_LOADER = "mark_step in parallel loader at step end"
    STEP_TRACE = "mark_step when exiting a profiler StepTrace region"
    OPTIMIZER_STEP = "mark_step in optimizer_step(barrier=True)"
    VALUE_ACCESS = "value access"
    FALLBACK = "CPU fallback op"
    STEP_CLOSURE = "step closure reading a tensor"
    EAGER_DEBUG = "eager debug mode"
    WAIT_DEVICE_OPS = "wait_device_ops"
    # The two syncs of a compiled region (`xladev.compile`, `torch_xla.compile`), in PyTorch/XLA's words.
    COMPILE_PENDING = "torch_xla.compile clear the pending graph prior calling the target function"
    COMPILE_REGION = "torch_xla.compile"
    # torch.compile(backend="xladev"): computing a compiled graph's pending inputs, compiling the graph,
    # running it (PyTorch/XLA's words for its dynamo bridge).
    DYNAMO_INPUTS = "torch_xla.sync when dynamo processing input graphs"
    DYNAMO_COMPILE = "dynamo is compiling a FX graph to HLO"
    DYNAMO_EXECUTE = "dynamo is executing a compiled program"
    # A multi-process job: a graph of collectives synchronising the replicas.
    COLLECTIVE = "collective synchronising the replicas"


@dataclasses.dataclass(frozen=True, slots=True)
class Cause:
    """The exact reason for a sync.

    Attributes:
      kind: the category.
      detail: what exactly: the access kind (`.item()`, `print`, `.cpu()`, `bool()`...) or the fallback op name.
    """

    kind: CauseKind
    detail: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame: function name, file, line."""

    name: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.name} ({self.file}:{self.line})"


@runtime_checkable
class GraphInfo(Protocol):
    """What subscribers may know of a graph: the runtime's graphs implement this and nothing more.

    Attributes:
      hash: the graph hash (the same as the event's `graph_hash`).
    """

    hash: str

    def summary(self) -> "GraphSummary":
        """Ops, attributes, shapes and input origins, for `xladev.graphdiff` (no device buffers)."""

    def ir_text(self) -> str:
        """The IR in PyTorch/XLA's text format."""

    def dot_text(self) -> str:
        """Graphviz text."""

    def hlo_text(self, dialect: str = "hlo", debug_info: bool = False) -> str:
        """The lowered module as text: `hlo`, or `stablehlo` (lowering only; nothing compiles).

        Raises:
          ValueError: an unknown dialect.
        """

    def root_hashes(self) -> list[str]:
        """A structural hash per output (PyTorch/XLA's "Root Hashes")."""

    def collectives(self) -> list[tuple[str, int, str | None]]:
        """(op, bytes from this rank, the user's line) of each collective of the graph, in order."""

    def output_shardings(self) -> list[str] | None:
        """Per output of an SPMD run, its shape and sharding (`f32[8,4] {devices=[2,1]0,1}`); None outside SPMD."""

    def recomputed_ops(self) -> int:
        """How many of the graph's ops recompute a checkpointed region's forward in the backward."""


@dataclasses.dataclass(slots=True)
class Event:
    """Base of every event: a monotonic timestamp in ns and the step number it belongs to."""

    time_ns: int
    step: int


@dataclasses.dataclass(slots=True)
class Ops(Event):
    """Ops recorded since the last barrier: counts per op and total tracing time."""

    counts: dict[str, int]
    tracing_ns: int
    tracing_samples: list[int] = dataclasses.field(default_factory=list)
    tensors_created: int = 0  # device tensors created meanwhile (PyTorch/XLA's CreateXlaTensor)
    tensors_destroyed: int = 0  # device tensors freed meanwhile (PyTorch/XLA's DestroyXlaTensor)
    # How many traces `tracing_ns` sums when their samples are not kept (a real torch_xla's, `xladev.attach`);
    # None: one per sample.
    tracing_count: int | None = None


@dataclasses.dataclass(slots=True)
class CompileStart(Event):
    """XLA started compiling a graph; its `Compile` or `CompileFailed` follows when it ends.

    Lets a live view say "compiling…" while a long compile runs.
    """

    graph_hash: str
    num_nodes: int
    num_inputs: int
    num_outputs: int
    frames: tuple[Frame, ...] | None
    graph: GraphInfo | None = None
    graph_name: str | None = None  # the compiled region's name (`xladev.compile(name=...)`), if any


@dataclasses.dataclass(slots=True)
class Compile(Event):
    """A graph missed the in-memory cache and was compiled.

    `graph` describes the graph (see `GraphInfo`); `memory` holds XLA's memory analysis in bytes (per device, for
    an SPMD graph: XLA analyses the partitioned program). `shardings`, for an SPMD graph only, is how each input and
    output is split over the devices (`{"inputs": [...], "outputs": [...]}`, entries `{"shape", "sharding",
    "device_bytes"}`).
    """

    graph_hash: str
    num_nodes: int
    num_inputs: int
    num_outputs: int
    compile_ns: int
    memory: dict[str, int]
    cause: Cause
    frames: tuple[Frame, ...] | None
    persistent_cache_hit: bool | None  # None when the persistent compilation cache is off
    graph: GraphInfo | None = None
    donated: int = 0  # input buffers donated to the executable (PyTorch/XLA's InputOutputAliasCount)
    graph_name: str | None = None  # the compiled region's name (PyTorch/XLA's "Graph Name"), if any
    shardings: dict | None = None


@dataclasses.dataclass(slots=True)
class Execute(Event):
    """A compiled graph ran; `execute_ns` lasts until its results were ready."""

    graph_hash: str
    execute_ns: int
    cached: bool
    num_nodes: int
    num_inputs: int
    num_outputs: int
    cause: Cause
    frames: tuple[Frame, ...] | None
    graph: GraphInfo | None = None
    graph_name: str | None = None  # the compiled region's name (PyTorch/XLA's "Graph Name"), if any
    unwrap_ns: int = 0  # taking the input buffers out of the graph's input nodes (PyTorch/XLA's UnwrapXlaData)
    wrap_ns: int = 0  # making the output buffers device data (WrapXlaData)
    lock_wait_ns: int = 0  # waiting for the execution lock and the graphs still running (DeviceLockWait)
    devices: int = 1  # devices the graph ran on at once: every local device in SPMD mode


@dataclasses.dataclass(slots=True)
class Recompile(Event):
    """A trigger site that had compiled before compiled a different graph: what changed, once.

    The runtime publishes it just before the `Compile` of the same graph, so a subscriber can
    attach it to that compile. Sites are `file:line (function)` (see `xladev.schema.sites`).

    Attributes:
      graph_hash: the new graph.
      previous_hash: the graph of this site it was compared with (the most similar one).
      site: the trigger site.
      changes: what differs, one sentence each, most telling first.
      graphs_at_site: graphs compiled at this site so far, this one included.
      compile_ns_at_site: their compile time in total.
    """

    graph_hash: str
    previous_hash: str
    site: str
    changes: tuple[str, ...]
    graphs_at_site: int
    compile_ns_at_site: int

    def headline(self) -> str:
        return change_headline(self.changes)


@dataclasses.dataclass(slots=True)
class CompileFailed(Event):
    """XLA rejected a graph. `hlo_path` is where its HLO was saved."""

    graph_hash: str
    message: str
    hlo_path: str
    cause: Cause
    frames: tuple[Frame, ...] | None


@dataclasses.dataclass(slots=True)
class ExecuteFailed(Event):
    """A compiled graph failed while running (out of memory, a runtime check...). `hlo_path` is its saved HLO."""

    graph_hash: str
    message: str
    hlo_path: str
    cause: Cause
    frames: tuple[Frame, ...] | None


@dataclasses.dataclass(slots=True)
class TransferToDevice(Event):
    nbytes: int
    duration_ns: int
    count: int = 1


@dataclasses.dataclass(slots=True)
class TransferFromDevice(Event):
    """Device→host copy; `kind` is the access that needed it (`.item()`, `print`, fallback op...)."""

    nbytes: int
    duration_ns: int
    kind: str
    frames: tuple[Frame, ...] | None


@dataclasses.dataclass(slots=True)
class Fallback(Event):
    """An op without a lowering ran on the CPU. `name` is `aten::op.overload`.

    `time_ns` is when the op was called; `cpu_ns` the time its CPU kernel took (its operands'
    transfers are TransferToDevice/TransferFromDevice events of their own).
    """

    name: str
    frames: tuple[Frame, ...] | None
    cpu_ns: int = 0


@dataclasses.dataclass(slots=True)
class Step(Event):
    """A step barrier finished; `step` is the number of the step that just ended.

    `device_bytes` is the device memory live at its end and `peak_device_bytes` the most the step held while a graph
    ran (an estimate from XLA's memory analysis), both in bytes; None for a step the runtime did not sample.
    """

    cause: Cause
    duration_ns: int
    frames: tuple[Frame, ...] | None
    device_bytes: int | None = None
    peak_device_bytes: int | None = None


@dataclasses.dataclass(slots=True)
class CacheMiss(Event):
    """A Python scalar was uploaded because it was not in the scalar cache."""

    value: float
    dtype: str


@dataclasses.dataclass(slots=True)
class GraphGrowing(Event):
    """The pending graph passed the growth threshold with no barrier: `ops` recorded since the last graph ran.

    `step` is the step being recorded; `site` is the user's `file:line` that recorded the latest op.
    """

    ops: int
    site: str
    frames: tuple[Frame, ...] | None


@dataclasses.dataclass(slots=True)
class MemoryGrowing(Event):
    """Live device memory (or, with `space="host"`, the process's resident memory) rose at every step sampled since
    `from_step` (`step` is the latest).

    `holders` says what grew, biggest first: dicts with `kind` (parameter, gradient, optimizer state, saved
    activation, batch, other, runtime; on the host, host copy or CPU tensor), `line` (the user line that made those
    buffers), `per_step_bytes` and `buffers` (how many more there are), from two censuses of the live buffers.
    """

    from_step: int
    from_bytes: int
    to_bytes: int
    per_step_bytes: float
    holders: tuple[dict, ...]
    space: str = "device"  # or "host"


@dataclasses.dataclass(slots=True)
class GraphBreak(Event):
    """torch.compile's capture stopped: code around `frames`' user line runs outside the compiled graphs.

    Attributes:
      by: "dynamo" (TorchDynamo could not trace the code: it runs eagerly, recorded lazily) or "xladev" (an
        FX graph needs the host for an op, so it runs lazily op by op instead of as one program).
      reason: what stopped it, one line first (TorchDynamo's reason and explanation, or the op and why).
      frames: the user's stack where it happened (TorchDynamo's user frame first, when it names one).
    """

    by: str
    reason: str
    frames: tuple[Frame, ...] | None


@dataclasses.dataclass(slots=True)
class DynamoRecompile(Event):
    """A torch.compile'd function compiled again because a guard failed.

    Attributes:
      function: the compiled function's name.
      guard: the failed guard as TorchDynamo states it (`tensor 'x' size mismatch at index 0. expected 8,
        actual 16`), without its `frame/compile` id.
      compiles: the number of times this function has been compiled so far, this one included.
      frames: the user's stack that called it (innermost first).
    """

    function: str
    guard: str
    compiles: int
    frames: tuple[Frame, ...] | None


@dataclasses.dataclass(slots=True)
class Profile(Event):
    """A profile capture of this process was written (`xladev.debug.profiler`): where, and which steps.

    `step` is the step being recorded when it was written. The window is the runtime's steps the
    capture covers, `first_step`..`last_step` (the step being recorded when it started and when it
    stopped, or a `profile_steps` window's exact steps); None when the profile does not say.

    Attributes:
      path: the `.xplane.pb` file.
      logdir: the TensorBoard log directory it was written under.
      first_step, last_step: the step window.
      how: the call that captured it (`xp.profile_steps(5, 3)`, `xp.start_trace`, `xp.trace from host:port`).
    """

    path: str
    logdir: str
    first_step: int | None
    last_step: int | None
    how: str


@dataclasses.dataclass(slots=True)
class RankLost(Event):
    """Another process of the job is gone: it left without saying so (it died, or stopped answering).

    Attributes:
      rank: the rank that is gone.
      reason: what was seen.
    """

    rank: int
    reason: str


@dataclasses.dataclass(slots=True)
class Collective(Event):
    """A graph holding collectives ran on every rank (announced after its `Execute`).

    Attributes:
      graph_hash: the graph.
      count: its collectives (all-reduce, all-gather...).
      nbytes: the bytes they reduce or send from this rank.
      wait_ns: how long this rank waited for the others to reach the graph before it ran: the time a
        faster rank loses to a straggler.
      execute_ns: the graph's run, collectives included.
      sites: the user's line of each collective (`file:line (function)`), in order.
    """

    graph_hash: str
    count: int
    nbytes: int
    wait_ns: int
    execute_ns: int
    sites: tuple[str, ...] = ()
