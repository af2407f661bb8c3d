"""The bottom layer: IR nodes and graphs, shape inference, IR text, the step counter, Python frames, this
process's place in a job, jax devices, host→device copies, profiler spans, and the op ledger (op counts and
tracing time since the last barrier). Imports no other layer of the runtime.

The order of the layers is in docs/architecture.md and checked by tests/test_layers.py.
"""
