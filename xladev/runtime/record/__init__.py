"""Recording ops: the tensor subclass, the dispatcher and the per-signature recording cache, special handlers,
decompositions, the CPU fallback, random numbers, autocast and AMP, checkpointing, scan, jax and Pallas calls.
Imports every layer below it (graph/, lowering/, compile/, execute/): an op may need a value now.

The order of the layers is in docs/architecture.md and checked by tests/test_layers.py.
"""
