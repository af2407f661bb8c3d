"""XLA's memory analysis of a compiled graph: one table of its sizes, and what a graph needs while it runs.

A compile record's `memory` holds the sizes in bytes under the keys below (the runtime takes them from
`compiled.memory_analysis()`); PyTorch/XLA's "Post Compilation Analysis" prints the same five in GB, and the debug-log
reader keeps them under its own column names. Standard library only: the runtime, the report and the TUI share it.
"""

from __future__ import annotations

from collections.abc import Mapping

# key -> (XLA's CompiledMemoryStats attribute, the debug-log reader's column, the label screens and tables show),
# in the order PyTorch/XLA prints them.
SIZES = {
    "argument": ("argument_size_in_bytes", "input_bytes", "inputs"),
    "output": ("output_size_in_bytes", "output_bytes", "outputs"),
    "alias": ("alias_size_in_bytes", "aliased_bytes", "aliased"),
    "temp": ("temp_size_in_bytes", "temp_bytes", "temporaries"),
    "generated_code": ("generated_code_size_in_bytes", "program_bytes", "program"),
}


def need_bytes(memory: Mapping[str, float]) -> float | None:
    """Device memory a graph holds while it runs: its arguments, its outputs less those written into donated
    (aliased) inputs, its temporaries and its generated code.

    Args:
      memory: the sizes in bytes under `SIZES`' keys.

    Returns:
      The sum, or None when a size is missing (XLA gave none: never counted as 0).
    """
    sizes = [memory.get(key) for key in SIZES]
    if any(size is None for size in sizes):
        return None
    argument, output, alias, temp, code = sizes
    return argument + output - alias + temp + code
