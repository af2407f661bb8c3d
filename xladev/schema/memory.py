"""XLA's memory analysis of a compiled graph: one table of its sizes, and what a graph needs while it runs.

A compile record's `memory` holds the sizes in bytes under the keys below (the runtime takes them from
`compiled.memory_analysis()`); PyTorch/XLA's "Post Compilation Analysis" prints the same five in GB, and the debug-log
reader keeps them under its own column names. Standard library only: the runtime, the report and the TUI share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

class Size(NamedTuple):
    """One size of XLA's memory analysis, as each part of xladev names it.

    Attributes:
      attribute: XLA's `CompiledMemoryStats` attribute.
      column: the debug-log reader's column (`report.compile_events`).
      label: what screens and tables call it.
      printed: its words in PyTorch/XLA's Post Compilation Analysis.
    """

    attribute: str
    column: str
    label: str
    printed: str


# The compile record's key -> its names, in the order PyTorch/XLA prints them.
SIZES = {
    "argument": Size("argument_size_in_bytes", "input_bytes", "inputs", "Graph input size"),
    "output": Size("output_size_in_bytes", "output_bytes", "outputs", "Graph output size"),
    "alias": Size("alias_size_in_bytes", "aliased_bytes", "aliased", "Aliased Input size"),
    "temp": Size("temp_size_in_bytes", "temp_bytes", "temporaries", "Intermediate tensor size"),
    "generated_code": Size("generated_code_size_in_bytes", "program_bytes", "program", "Compiled program size"),
}


def measured(memory: Mapping) -> dict[str, float]:
    """A compile record's `memory` as numbers: the sizes under `SIZES`' keys that hold one (a log's other or
    unreadable fields left out).

    Args:
      memory: a record's `memory`.

    Returns:
      Key -> bytes.
    """
    return {key: float(value) for key, value in memory.items()
            if key in SIZES and isinstance(value, (int, float))}


def from_columns(sizes: Mapping) -> dict[str, float]:
    """Sizes kept under the report's column names (`Size.column`), under the record's keys; a size absent or None
    is left out.

    Args:
      sizes: column -> bytes (a debug log's Post Compilation sizes, a table row).

    Returns:
      Key -> bytes.
    """
    return {key: sizes[size.column] for key, size in SIZES.items() if sizes.get(size.column) is not None}


def need_bytes(memory: Mapping[str, float]) -> float | None:
    """Device memory a graph holds while it runs: its arguments, its outputs less those written into donated
    (aliased) inputs, its temporaries and its generated code.

    Args:
      memory: the sizes in bytes under `SIZES`' keys.

    Returns:
      The sum, or None when a size is missing (XLA gave none: never counted as 0).
    """
    added = added_bytes(memory)
    argument = memory.get("argument")
    return None if added is None or argument is None else argument + added


def added_bytes(memory: Mapping[str, float]) -> float | None:
    """Device memory a graph adds while it runs to what is already live (its arguments are): its outputs less those
    written into donated inputs, its temporaries and its generated code.

    Args:
      memory: the sizes in bytes under `SIZES`' keys.

    Returns:
      The sum, or None when a size is missing.
    """
    sizes = [memory.get(key) for key in ("output", "alias", "temp", "generated_code")]
    if any(size is None for size in sizes):
        return None
    output, alias, temp, code = sizes
    return output - alias + temp + code
