"""Reading PyTorch/XLA's text outputs without the runtime or pandas, for the report, `xladev diff` and the torch_xla
adapter: a graph dump file (`XLA_SAVE_TENSORS_FILE`: its records with their steps, `dump_file`) and the IR text in
it (`ir_parser`), and PT_XLA_DEBUG output (`debug_analysis`: each analysis block's site and step, profiler lines,
failures, xladev's summary). The formats' own grammar is the schema's (`xladev.schema.graph_dump`,
`xladev.schema.debug_text`)."""
