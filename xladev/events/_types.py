"""Event records. Plain dataclasses so sinks can serialise them without the runtime."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class CauseKind(str, enum.Enum):
    """Why a barrier ran. The set is closed so analysis can rely on it."""

    USER_MARK_STEP = "user mark_step"
    DEVICE_LOADER = "mark_step in DeviceLoader at step end"
    STEP_TRACE = "mark_step when exiting a profiler StepTrace region"
    OPTIMIZER_STEP = "mark_step in optimizer_step(barrier=True)"
    VALUE_ACCESS = "value access"
    FALLBACK = "CPU fallback op"
    STEP_CLOSURE = "step closure reading a tensor"
    EAGER_DEBUG = "eager debug mode"
    WAIT_DEVICE_OPS = "wait_device_ops"


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


@dataclasses.dataclass(slots=True)
class Event:
    """Base of every event: a monotonic timestamp in ns and the step number it belongs to."""

    time_ns: int
    step: int


@dataclasses.dataclass(slots=True)
class OpsRecorded(Event):
    """Ops recorded since the last barrier: counts per op and total tracing time."""

    counts: dict[str, int]
    tracing_ns: int
    tracing_samples: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class GraphCompiled(Event):
    """A graph missed the in-memory cache and was compiled.

    `graph` is the runtime's read-only `Graph` description (ops, input shapes and creation sites,
    constants, source locations); `memory` holds XLA's memory analysis in bytes.
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
    graph: Any = None


@dataclasses.dataclass(slots=True)
class GraphExecuted(Event):
    """A compiled graph ran; `execute_ns` lasts until its results were ready."""

    graph_hash: str
    execute_ns: int
    cached: bool
    num_nodes: int
    num_inputs: int
    num_outputs: int
    cause: Cause
    frames: tuple[Frame, ...] | None
    graph: Any = None


@dataclasses.dataclass(slots=True)
class CompileFailed(Event):
    """XLA rejected a graph. `hlo_path` is where its HLO was saved."""

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
class FallbackOp(Event):
    """An op without a lowering ran on the CPU. `name` is `aten::op.overload`."""

    name: str
    frames: tuple[Frame, ...] | None


@dataclasses.dataclass(slots=True)
class StepMarked(Event):
    """A step barrier finished; `step` is the number of the step that just ended."""

    cause: Cause
    duration_ns: int
    frames: tuple[Frame, ...] | None


@dataclasses.dataclass(slots=True)
class DeviceDataCacheMiss(Event):
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
