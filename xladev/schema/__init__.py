"""The event-record schema, shared by the writers (sinks) and the readers (report, TUI).

Standard library only: reading a log never imports torch, jax or the runtime.

- `xladev.schema.records`: the record types of the event log (`to_record`/`from_record`), the schema
  name and version, header sniffing.
- `xladev.schema.counters`: the one table of record → counter and metric updates.
- `xladev.schema.units`: value kinds, and how times, bytes and values are parsed and printed.
- `xladev.schema.memory`: XLA's memory analysis of a graph (its sizes, in PyTorch/XLA's order) and what a graph needs.
- `xladev.schema.sites`: trigger sites (which frame is the user's) and how they are shortened.
- `xladev.schema.ranks`: the rank of this process in a job, and the per-rank names of output files.
- `xladev.schema.opener`: opening a log to read it, plain or gzip-compressed (also when damaged), and
  telling text from binary data.
"""

from xladev.schema import counters, memory, opener, ranks, records, sites, units

__all__ = ["counters", "memory", "opener", "ranks", "records", "sites", "units"]
