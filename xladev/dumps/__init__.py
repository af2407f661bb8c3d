"""Reading graph dumps (`XLA_SAVE_TENSORS_FILE`), without the runtime: records and IR text."""
