"""The event-record schema, shared by the writers (sinks) and the readers (report, TUI).

Standard library only: reading a log never imports torch, jax or the runtime.

- `xladev.schema.records`: the record types of the event log (`to_record`/`from_record`), the schema
  name and version.
- `xladev.schema.log_header`: an event log's first line: recognising a header, a clear error for anything else.
- `xladev.schema.record_wording`: how records are put into words (step windows, recompilation lines, run identity).
- `xladev.schema.metric_names`: PyTorch/XLA's metric and counter names across its eras.
- `xladev.schema.metrics_text`: PyTorch/XLA's metrics report text, written and read.
- `xladev.schema.debug_text`: PT_XLA_DEBUG's analysis blocks, written and read.
- `xladev.schema.graph_dump`: the records of a graph dump (XLA_SAVE_TENSORS_FILE), written and read.
- `xladev.schema.counters`: the one table of record → counter and metric updates.
- `xladev.schema.units`: value kinds, and how times, bytes and values are parsed and printed.
- `xladev.schema.memory`: XLA's memory analysis of a graph (its sizes, in PyTorch/XLA's order) and what a graph needs.
- `xladev.schema.sites`: trigger sites (which frame is the user's) and how they are shortened.
- `xladev.schema.ranks`: the rank of this process in a job, and the per-rank names of output files.
- `xladev.schema.opener`: opening a log to read it, plain or gzip-compressed (also when damaged), and
  telling text from binary data.
"""

from xladev.schema import (counters, debug_text, graph_dump, log_header, memory, metric_names, metrics_text, opener,
                           ranks, record_wording, records, sites, units)

__all__ = ["counters", "debug_text", "graph_dump", "log_header", "memory", "metric_names", "metrics_text", "opener",
           "ranks", "record_wording", "records", "sites", "units"]
