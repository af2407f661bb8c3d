"""Running a compiled graph while a profile records: once on the timeline, and linked to its HLO.

jaxlib annotates each call of a jitted function twice (`PjitFunction(...)` from two nested places in its
C++ dispatch), so a graph run through the executable's fast path shows twice in a profile. While a
capture records, `call` runs the executable through jax's own Python path (the one jax falls back to
when its fast path cannot serve a call), which makes no such annotation: the run shows once, as the
runtime's `xladev.execute` span. It costs some 60 µs more per run, and only while a capture records.

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


def link_of_module(proto: bytes) -> tuple[str, str]:
    """(`<module name>(<program id>)`, root instruction of the entry computation) of a serialized HloModuleProto.

    Raises:
      ValueError: the bytes are not such a module, or it has no entry computation root.
    """
    data = memoryview(proto)
    name = entry = ""
    module_id = 0
    computations = []
    for number, value in _fields(data):
        if number == _MODULE_NAME:
            name = bytes(value).decode()
        elif number == _MODULE_ENTRY:
            entry = bytes(value).decode()
        elif number == _MODULE_ID:
            module_id = value
        elif number == _MODULE_COMPUTATIONS:
            computations.append(value)
    for computation in computations:
        instructions, root_id, comp_name = [], None, ""
        for number, value in _fields(computation):
            if number == _COMPUTATION_NAME:
                comp_name = bytes(value).decode()
            elif number == _COMPUTATION_ROOT:
                root_id = value
            elif number == _COMPUTATION_INSTRUCTIONS:
                instructions.append(value)
        if comp_name != entry:
            continue
        for instruction in instructions:
            op_name, op_id = "", None
            for number, value in _fields(instruction):
                if number == _INSTRUCTION_NAME:
                    op_name = bytes(value).decode()
                elif number == _INSTRUCTION_ID:
                    op_id = value
            if op_id == root_id:
                return f"{name}({module_id})", op_name
    raise ValueError(f"HLO module {name!r} has no root instruction in its entry computation {entry!r}")


def link(compiled) -> tuple[str, str] | None:
    """(module, root instruction) of a compiled graph as xprof's HLO tools name them; None if jax cannot say."""
    try:
        module = compiled.runtime_executable().hlo_modules()[0]
        return link_of_module(module.as_serialized_hlo_module_proto())
    except Exception:  # a link is a convenience: never fail a run for it
        return None
