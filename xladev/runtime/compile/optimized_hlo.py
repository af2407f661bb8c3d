"""Which instructions of a compiled graph's optimized HLO run a jax function or Pallas kernel given to `call_jax`.

A profile of the CPU backend names each event by the instruction it runs (`ynn_fusion`, `while.49`), as xprof's
op views do; a fusion keeps its fused ops' metadata, which for a `call_jax` function reads
`jit(call_jax.<name>)/...` (record/jax_call.py lowers each function as a jitted function of that name). So the
instructions, read from the text once, tell the profile which events run which function.
"""

from __future__ import annotations

import re

_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?([\w.\-]+)\s*=")
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"\bbranch_computations=\{([^}]*)\}")
_JAX_CALL = re.compile(r"jit\(call_jax\.([^/\"]*?)\)(?=/|\")")


def jax_call_ops(hlo_text: str) -> tuple[str, dict[str, tuple[str, ...]]]:
    """The module's name and, per instruction that runs part of a `call_jax` function, that function's names.

    An instruction counts when its own metadata, or that of an instruction in a computation it calls (a
    fusion's, a loop's body), says it came from `jit(call_jax.<name>)`.

    Args:
      hlo_text: a compiled graph's optimized HLO (`Compiled.as_text()`).

    Returns:
      (module name as the profile's `hlo_module` stat gives it, {instruction name: function names}).
    """
    module = ""
    own: dict[str, set[str]] = {}  # computation -> names in its instructions' own metadata
    calls: dict[str, list[str]] = {}  # computation -> computations its instructions call
    instructions: dict[str, tuple[set[str], list[str]]] = {}
    current = None
    for line in hlo_text.splitlines():
        if line.startswith("HloModule "):
            module = line.split()[1].rstrip(",")
            continue
        header = _COMPUTATION.match(line) if not line.startswith(" ") else None
        if header:
            current = header.group(1)
            own[current], calls[current] = set(), []
            continue
        op = _INSTRUCTION.match(line) if current is not None else None
        if op is None:
            continue
        names = set(_JAX_CALL.findall(line))
        called = _CALLED.findall(line)
        for branches in _BRANCHES.findall(line):
            called += [b.strip().lstrip("%") for b in branches.split(",") if b.strip()]
        own[current] |= names
        calls[current] += called
        instructions[op.group(1)] = (names, called)

    seen: dict[str, frozenset[str]] = {}

    def within(computation: str) -> frozenset[str]:
        if computation not in seen:
            seen[computation] = frozenset()  # a cycle cannot happen in HLO; this only guards the recursion
            found = set(own.get(computation, ()))
            for callee in calls.get(computation, ()):
                found |= within(callee)
            seen[computation] = frozenset(found)
        return seen[computation]

    out = {}
    for name, (names, called) in instructions.items():
        found = set(names)
        for callee in called:
            found |= within(callee)
        if found:
            out[name] = tuple(sorted(found))
    return module, out
