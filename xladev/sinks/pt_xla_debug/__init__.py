"""`PT_XLA_DEBUG_LEVEL` analysis: compile/execution blocks, recompilation causes, transfer hot spots."""
