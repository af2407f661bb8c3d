"""Running a compiled graph while a profile records: once on the timeline, and linked to its HLO.

jaxlib annotates each call of a jitted function twice (`PjitFunction(...)` from two nested places in its
C++ dispatch), so a graph run through the executable's fast path shows twice in a profile. While a
capture records, `call` runs the executable through jax's own Python path (the one jax falls back to
when its fast path cannot serve a call), which makes no such annotation: the run shows once, as the
runtime's `xladev.execute` span. It costs some 40 µs more per run (17 → 55 µs for a small graph on a 2-core
CPU machine), and only while a capture records.

`link` names a compiled graph the way xprof's HLO tools do: the module as `<name>(<program id>)`
(the `.hlo_proto.pb` files of a capture) and its root instruction, so the trace viewer's selected
`xladev.execute` span links to the graph viewer.
"""

from __future__ import annotations

_MODULE_NAME, _MODULE_ENTRY, _MODULE_COMPUTATIONS, _MODULE_ID = 1, 2, 3, 5  # HloModuleProto fields
_COMPUTATION_NAME, _COMPUTATION_INSTRUCTIONS, _COMPUTATION_ROOT = 1, 2, 6  # HloComputationProto fields
_INSTRUCTION_NAME, _INSTRUCTION_ID = 1, 35  # HloInstructionProto fields


def call(compiled, arrays: list):
    """`compiled(*arrays)` without jaxlib's call annotations (the same results, donations included).

    Args:
      compiled: a `jax.stages.Compiled`.
      arrays: its inputs.

    Returns:
      Its outputs, structured as `compiled(*arrays)` returns them.
    """
    try:
        params = compiled._params
        run = compiled._executable.unsafe_call
    except AttributeError:  # another jax: its fast path, annotations and all
        return compiled(*arrays)
    import jax

    flat = run(*params.const_args, *arrays)
    return jax.tree_util.tree_unflatten(params.out_tree, flat)


def _varint(data, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _fields(data):
    """(field number, value) of one serialized protobuf message: varints as int, the rest as bytes."""
    i, end = 0, len(data)
    while i < end:
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            length, i = _varint(data, i)
            value, i = data[i:i + length], i + length
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, value


def _read(data, scalars: dict[int, str], repeated: dict[int, str]) -> dict:
    """The named fields of one message: `scalars` by their last value, `repeated` as lists."""
    out: dict = {name: [] for name in repeated.values()}
    for number, value in _fields(data):
        if number in scalars:
            out[scalars[number]] = value
        elif number in repeated:
            out[repeated[number]].append(value)
    return out


def _text(value) -> str:
    return bytes(value).decode() if value is not None else ""


def link_of_module(proto: bytes) -> tuple[str, str]:
    """(`<module name>(<program id>)`, root instruction of the entry computation) of a serialized HloModuleProto.

    Raises:
      ValueError: the bytes are not such a module, or it has no entry computation root.
    """
    module = _read(memoryview(proto), {_MODULE_NAME: "name", _MODULE_ENTRY: "entry", _MODULE_ID: "id"},
                   {_MODULE_COMPUTATIONS: "computations"})
    name, entry = _text(module.get("name")), _text(module.get("entry"))
    for data in module["computations"]:
        computation = _read(data, {_COMPUTATION_NAME: "name", _COMPUTATION_ROOT: "root"},
                            {_COMPUTATION_INSTRUCTIONS: "instructions"})
        if _text(computation.get("name")) != entry:
            continue
        for instruction in computation["instructions"]:
            op = _read(instruction, {_INSTRUCTION_NAME: "name", _INSTRUCTION_ID: "id"}, {})
            if op.get("id") == computation.get("root"):
                return f"{name}({module.get('id', 0)})", _text(op.get("name"))
    raise ValueError(f"HLO module {name!r} has no root instruction in its entry computation {entry!r}")


def link(compiled) -> tuple[str, str] | None:
    """(module, root instruction) of a compiled graph as xprof's HLO tools name them; None if jax cannot say."""
    try:
        module = compiled.runtime_executable().hlo_modules()[0]
        return link_of_module(module.as_serialized_hlo_module_proto())
    except Exception:  # a link is a convenience: never fail a run for it
        return None
