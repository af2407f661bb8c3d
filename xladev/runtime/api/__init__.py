"""The step-level API the public names call: mark_step/sync and the optimizer step, the runtime's state
handle (`runtime_state.executor.reset()`), and the debug getters. Imports the layers below it up to
distributed/.

The order of the layers is in docs/architecture.md and checked by tests/test_layers.py.
"""
