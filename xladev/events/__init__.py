"""Typed runtime events and the in-process bus that carries them.

The runtime emits; sinks (metrics, debug analysis, dumps, event log) subscribe. The runtime never
imports a sink. With no subscriber an `emit` costs one attribute check, and Python frames are
captured only while some subscriber asked for them.
"""

from xladev.events import _ending as ending
from xladev.events._bus import Bus, PropagatingError, Subscription, bus
from xladev.events._types import (
    Cause,
    CauseKind,
    Frame,
    Event,
    Ops,
    CompileStart,
    Compile,
    Execute,
    TransferToDevice,
    TransferFromDevice,
    Fallback,
    Step,
    CompileFailed,
    ExecuteFailed,
    CacheMiss,
    GraphGrowing,
    GraphInfo,
    MemoryGrowing,
    Recompile,
    GraphBreak,
    DynamoRecompile,
    Profile,
    RankLost,
    Collective,
)

__all__ = [
    "ending", "Bus", "PropagatingError", "bus", "Subscription", "Cause", "CauseKind", "Frame", "Event", "Ops", "CompileStart", "Compile",
    "Execute", "TransferToDevice", "TransferFromDevice", "Fallback", "Step", "CompileFailed", "ExecuteFailed",
    "CacheMiss", "GraphGrowing", "GraphInfo", "MemoryGrowing", "Recompile", "GraphBreak", "DynamoRecompile",
    "Profile", "RankLost", "Collective",
]
