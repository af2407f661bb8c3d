"""Reading and tidying a captured XSpace (`.xplane.pb`) before TensorBoard reads it.

jaxlib annotates every call of a jitted function twice, from two nested places in its C++ dispatch,
so each call shows as two identical `PjitFunction(...)` events. And while xladev lowers a graph to
jax, every `jnp` function the lowering calls is such a call, on tracers: dozens of
`PjitFunction(add)`-style events inside each `xladev.compile` span that ran nothing (and inside each
`xladev.call_jax <fn>` span, where a jax function given to `call_jax` is traced). `tidy` drops both: an
event nested in an event of the same name over the same time (the inner copy), and the `PjitFunction`
calls made inside those spans (with what they contain). And it names what the backend's per-instruction
events run: given which instructions of which compiled graph run a jax function or Pallas kernel given to
`call_jax` (runtime/compile/optimized_hlo.py), each such event gets a `jax_call` stat with the function's
name, so a steady step's profile says where the time of `flash_attention.pallas` went, not only its
`ynn_fusion`. Nothing else changes; fields this module does not describe are kept as they were.

The messages are those of TSL's `xplane.proto` (XSpace > XPlane > XLine > XEvent, with event and stat
metadata per plane), built here from descriptors since no installed package ships them for Python.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

_classes: dict | None = None

COMPILE_SPAN = "xladev.compile"
CALL_JAX_SPAN = "xladev.call_jax "  # then the function's name
JAX_CALL_PREFIX = "PjitFunction("
# jaxlib's two annotations of one call start and end a few microseconds apart (the C++ between them).
DUPLICATE_SLACK_PS = 50_000_000


def _message_classes() -> dict:
    """XSpace and the messages it holds, as protobuf classes (built once, in a private pool)."""
    global _classes
    if _classes is not None:
        return _classes
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="xladev_xplane.proto", package="xladev_xplane", syntax="proto3")

    def message(name: str, fields, nested=(), oneofs=()):
        msg = file.message_type.add(name=name)
        for oneof in oneofs:
            msg.oneof_decl.add(name=oneof)
        for spec in fields:
            _add_field(msg, *spec)
        for entry_name, key_type, value_type, value_name in nested:
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            _add_field(entry, "key", 1, key_type)
            _add_field(entry, "value", 2, value_type, value_name)
        return msg

    def _add_field(msg, name, number, kind, type_name=None, repeated=False, oneof=None):
        field = msg.field.add(name=name, number=number, type=kind,
                              label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
        if type_name:
            field.type_name = f".xladev_xplane.{type_name}"
        if oneof is not None:
            field.oneof_index = oneof

    message("XSpace", [("planes", 1, F.TYPE_MESSAGE, "XPlane", True), ("errors", 2, F.TYPE_STRING, None, True),
                       ("warnings", 3, F.TYPE_STRING, None, True), ("hostnames", 4, F.TYPE_STRING, None, True)])
    message("XPlane", [("id", 1, F.TYPE_INT64), ("name", 2, F.TYPE_STRING),
                       ("lines", 3, F.TYPE_MESSAGE, "XLine", True),
                       ("event_metadata", 4, F.TYPE_MESSAGE, "XPlane.EventMetadataEntry", True),
                       ("stat_metadata", 5, F.TYPE_MESSAGE, "XPlane.StatMetadataEntry", True),
                       ("stats", 6, F.TYPE_MESSAGE, "XStat", True)],
            nested=[("EventMetadataEntry", F.TYPE_INT64, F.TYPE_MESSAGE, "XEventMetadata"),
                    ("StatMetadataEntry", F.TYPE_INT64, F.TYPE_MESSAGE, "XStatMetadata")])
    message("XLine", [("id", 1, F.TYPE_INT64), ("display_id", 10, F.TYPE_INT64), ("name", 2, F.TYPE_STRING),
                      ("display_name", 11, F.TYPE_STRING), ("timestamp_ns", 3, F.TYPE_INT64),
                      ("duration_ps", 9, F.TYPE_INT64), ("events", 4, F.TYPE_MESSAGE, "XEvent", True)])
    message("XEvent", [("metadata_id", 1, F.TYPE_INT64), ("offset_ps", 2, F.TYPE_INT64, None, False, 0),
                       ("num_occurrences", 5, F.TYPE_INT64, None, False, 0), ("duration_ps", 3, F.TYPE_INT64),
                       ("stats", 4, F.TYPE_MESSAGE, "XStat", True)], oneofs=["data"])
    message("XStat", [("metadata_id", 1, F.TYPE_INT64), ("double_value", 2, F.TYPE_DOUBLE, None, False, 0),
                      ("uint64_value", 3, F.TYPE_UINT64, None, False, 0),
                      ("int64_value", 4, F.TYPE_INT64, None, False, 0),
                      ("str_value", 5, F.TYPE_STRING, None, False, 0), ("bytes_value", 6, F.TYPE_BYTES, None, False, 0),
                      ("ref_value", 7, F.TYPE_UINT64, None, False, 0)], oneofs=["value"])
    message("XEventMetadata", [("id", 1, F.TYPE_INT64), ("name", 2, F.TYPE_STRING),
                               ("display_name", 4, F.TYPE_STRING), ("metadata", 3, F.TYPE_BYTES),
                               ("stats", 5, F.TYPE_MESSAGE, "XStat", True), ("child_id", 6, F.TYPE_INT64, None, True)])
    message("XStatMetadata", [("id", 1, F.TYPE_INT64), ("name", 2, F.TYPE_STRING), ("description", 3, F.TYPE_STRING)])

    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    _classes = {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"xladev_xplane.{name}"))
                for name in ("XSpace", "XPlane", "XLine", "XEvent", "XStat")}
    return _classes


def parse(data: bytes):
    """The XSpace message of a serialized `.xplane.pb`.

    Raises:
      ValueError: the bytes are not an XSpace.
    """
    from google.protobuf.message import DecodeError

    space = _message_classes()["XSpace"]()
    try:
        space.ParseFromString(data)
    except DecodeError as exc:
        raise ValueError(f"not an XSpace: {exc}") from None
    return space


@dataclasses.dataclass
class TidyResult:
    """What `tidy` removed: `duplicates` (inner copies of an event) and `lowering` (jax calls made while
    lowering inside `xladev.compile` or tracing inside `xladev.call_jax`, with the events they contained); and
    the runtime steps the profile covers, `first_step`..`last_step`: the steps whose barrier
    (`xladev.mark_step`) it holds, or without one the steps its `xladev.*` spans were recorded in (None
    without any)."""

    duplicates: int = 0
    lowering: int = 0
    jax_calls_named: int = 0  # events given a `jax_call` stat
    first_step: int | None = None
    last_step: int | None = None

    def saw_step(self, step: int) -> None:
        self.first_step = step if self.first_step is None else min(self.first_step, step)
        self.last_step = step if self.last_step is None else max(self.last_step, step)

    @property
    def removed(self) -> int:
        return self.duplicates + self.lowering


STEP_STAT = "step"
JAX_CALL_STAT = "jax_call"
HLO_MODULE_STAT, HLO_OP_STAT = "hlo_module", "hlo_op"  # the backend's per-instruction events carry both
RUNTIME_PREFIX = "xladev."
BARRIER_SPAN = "xladev.mark_step"


def _stat_int(stat) -> int | None:
    kind = stat.WhichOneof("value")
    if kind in ("int64_value", "uint64_value"):
        return int(getattr(stat, kind))
    if kind == "str_value" and stat.str_value.lstrip("-").isdigit():
        return int(stat.str_value)
    return None


def _note_steps(events, names: dict, step_stat: int | None, barriers: TidyResult, spans: TidyResult) -> None:
    """Adds the `step` arguments of the runtime's barrier spans to `barriers`, of all its spans to `spans`."""
    if step_stat is None:
        return
    for event in events:
        name = names.get(event.metadata_id, "")
        if not name.startswith(RUNTIME_PREFIX):
            continue
        for stat in event.stats:
            if stat.metadata_id == step_stat:
                value = _stat_int(stat)
                if value is not None:
                    spans.saw_step(value)
                    if name == BARRIER_SPAN:
                        barriers.saw_step(value)
                break


def _tidy_line(line, names: dict, result: TidyResult) -> None:
    """Drops the line's duplicate events and its lowering-time jax calls (see the module docstring)."""
    events = list(line.events)
    if not events:
        return
    order = sorted(range(len(events)), key=lambda i: (events[i].offset_ps, -events[i].duration_ps))
    keep = [True] * len(events)
    # The stack of open events: (end_ps, name, inside a compile span, dropped subtree, start_ps).
    stack: list[tuple[int, str, bool, bool, int]] = []
    for i in order:
        event = events[i]
        start, end = event.offset_ps, event.offset_ps + event.duration_ps
        while stack and stack[-1][0] <= start:
            stack.pop()
        name = names.get(event.metadata_id, "")
        parent = stack[-1] if stack else None
        in_compile = bool(parent and (parent[2] or parent[1] == COMPILE_SPAN or parent[1].startswith(CALL_JAX_SPAN)))
        dropped_subtree = bool(parent and parent[3])
        if dropped_subtree:
            keep[i] = False
            result.lowering += 1
            stack.append((end, name, in_compile, True, start))
            continue
        if in_compile and name.startswith(JAX_CALL_PREFIX):
            keep[i] = False
            result.lowering += 1
            stack.append((end, name, in_compile, True, start))
            continue
        if (parent is not None and parent[1] == name and name.startswith(JAX_CALL_PREFIX)
                and parent[4] <= start <= parent[4] + DUPLICATE_SLACK_PS and end <= parent[0] <= end + DUPLICATE_SLACK_PS):
            # jaxlib's second annotation of the same call: the parent already shows it.
            keep[i] = False
            result.duplicates += 1
            continue
        stack.append((end, name, in_compile, False, start))
    if all(keep):
        return
    kept = [e for e, k in zip(events, keep) if k]
    del line.events[:]
    line.events.extend(kept)


def _stat_text(stat, stat_names: dict) -> str | None:
    kind = stat.WhichOneof("value")
    if kind == "str_value":
        return stat.str_value
    if kind == "ref_value":  # an interned string: the name of the stat metadata it points at
        return stat_names.get(stat.ref_value)
    return None


def _name_jax_calls(plane, jax_ops: dict) -> int:
    """Gives each event of `plane` that runs a `call_jax` function's instructions a `jax_call` stat."""
    stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    ids = {name: key for key, name in stat_names.items()}
    module_id, op_id = ids.get(HLO_MODULE_STAT), ids.get(HLO_OP_STAT)
    if module_id is None or op_id is None:
        return 0
    call_id = ids.get(JAX_CALL_STAT)
    named = 0
    for line in plane.lines:
        for event in line.events:
            module = op = None
            for stat in event.stats:
                if stat.metadata_id == module_id:
                    module = _stat_text(stat, stat_names)
                elif stat.metadata_id == op_id:
                    op = _stat_text(stat, stat_names)
            functions = jax_ops.get(module, {}).get(op) if module and op else None
            if not functions:
                continue
            if call_id is None:
                call_id = max(plane.stat_metadata.keys(), default=0) + 1
                plane.stat_metadata[call_id].id = call_id
                plane.stat_metadata[call_id].name = JAX_CALL_STAT
            stat = event.stats.add()
            stat.metadata_id = call_id
            stat.str_value = "; ".join(functions)
            named += 1
    return named


def tidy(data: bytes, jax_ops: dict | None = None) -> tuple[bytes, TidyResult]:
    """The XSpace without jaxlib's duplicate call events and xladev's lowering-time jax calls, its events
    of `call_jax` functions named.

    Args:
      data: a serialized XSpace.
      jax_ops: {HLO module: {instruction: names of the call_jax functions it runs}}
        (`compilation.jax_call_ops_by_module()`); None names nothing.

    Returns:
      (the serialized, tidied XSpace; what was removed and the steps it covers). The input is returned
      as it was when nothing had to go.

    Raises:
      ValueError: the bytes are not an XSpace.
    """
    space = parse(data)
    result = TidyResult()
    spans = TidyResult()
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        step_stat = next((key for key, meta in plane.stat_metadata.items() if meta.name == STEP_STAT), None)
        for line in plane.lines:
            _tidy_line(line, names, result)
            _note_steps(line.events, names, step_stat, result, spans)
        if jax_ops:
            result.jax_calls_named += _name_jax_calls(plane, jax_ops)
    if result.first_step is None:  # no barrier in the profile: the steps its spans were recorded in
        result.first_step, result.last_step = spans.first_step, spans.last_step
    if not result.removed and not result.jax_calls_named:
        return data, result
    return space.SerializeToString(), result


def tidy_file(path: str, jax_ops: dict | None = None) -> TidyResult:
    """Tidies a written `.xplane.pb` in place (replaced whole, so a reader never sees half a file).

    Raises:
      ValueError: the file is not an XSpace.
      OSError: it cannot be read or replaced.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    tidied, result = tidy(data, jax_ops)
    if tidied is not data:
        directory = os.path.dirname(path) or "."
        fd, tmp = tempfile.mkstemp(prefix=".xladev_tidy_", suffix=".xplane.pb", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(tidied)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise
    return result
