"""Reading PyTorch/XLA's text outputs without the runtime or pandas: graph dumps (`XLA_SAVE_TENSORS_FILE`: records
and IR text) and PT_XLA_DEBUG's analysis blocks (`debug_analysis`), for the report and the torch_xla adapter."""
