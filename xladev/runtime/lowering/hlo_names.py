"""HLO instruction names as PyTorch/XLA's HLO text has them: each named after its opcode (`%exponential.12`,
`%convert.3`, `%dot.21`), a parameter `%p<N>` (`%p0.1`), numbered in the order they appear.

jax names an instruction after the jax primitive that made it (`%exp.1`, `%convert_element_type.2`,
`%dot_general.1`, `%inputs_0_.1`). PyTorch/XLA's own tests, and scripts written against its dumps, read the text
of `_get_xla_tensors_hlo` and of XLA_SAVE_TENSORS_FMT=hlo with patterns such as `exponential.*f32.*exponential.*f32`
(an instruction named after its opcode, on one line), so the names are what PyTorch/XLA users read. Only names
change: the program, its shapes and its metadata are the same.
"""

from __future__ import annotations

import re

# `ENTRY %main.4 (p0.1: f32[5,3], ...) -> f32[3] {`; a nested computation has no ENTRY.
_HEADER = re.compile(r"^(ENTRY )?%(\S+) (\(.*\)) -> (.*) \{$")
# `  ROOT %name = f32[4,5]{1,0} exponential(f32[4,5]{1,0} %sub.7), ...`: the opcode is the first lower-case word
# followed by `(` after the shape (a tuple shape is itself in parentheses, with no word before them).
_INSTRUCTION = re.compile(r"^(\s+(?:ROOT )?)%([\w.\-]+) = (.*?)([a-z][a-z0-9\-]*)\((.*)$")
_PARAMETER_NUMBER = re.compile(r"^(\d+)\)")
_REFERENCE = re.compile(r"%([\w.\-]+)")
_SIGNATURE_NAME = re.compile(r"([(,] ?)([\w.\-]+):")


def opcode_names(text: str) -> str:
    """`text` with each instruction renamed after its opcode (see the module's docstring).

    Args:
      text: an HLO module as XLA prints it, with `%` before every name.

    Returns:
      The renamed text; `text` itself when a line does not read as expected (never a half-renamed module).
    """
    lines = text.split("\n")
    computations = {m.group(2) for line in lines if (m := _HEADER.match(line))}
    out: list[str] = []
    counter = 0
    index = 0
    while index < len(lines):
        header = _HEADER.match(lines[index])
        if header is None:
            out.append(lines[index])
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end] != "}":
            end += 1
        if end == len(lines):
            return text
        counter += 1
        mapping: dict[str, str] = {}
        for line in lines[index + 1:end]:
            found = _INSTRUCTION.match(line)
            if found is None:
                return text
            old, opcode = found.group(2), found.group(4)
            if old in computations:  # a name shared with a computation: renaming could redirect a call
                continue
            if opcode == "parameter":
                number = _PARAMETER_NUMBER.match(found.group(5))
                if number is None:
                    return text
                stem = f"p{number.group(1)}"
            else:
                stem = opcode
            counter += 1
            while f"{stem}.{counter}" in computations:
                counter += 1
            mapping[old] = f"{stem}.{counter}"
        out.append(_SIGNATURE_NAME.sub(lambda m: m.group(1) + mapping.get(m.group(2), m.group(2)) + ":",
                                       lines[index]) if header.group(3) else lines[index])
        out.extend(_REFERENCE.sub(lambda m: "%" + mapping.get(m.group(1), m.group(1)), line)
                   for line in lines[index + 1:end])
        out.append("}")
        index = end + 1
    return "\n".join(out)
