"""Sharded-training strategies built on the step API and the collectives: FSDP, ZeRO-1, distributed
checkpoints. Imports the layers below it up to api/.

The order of the layers is in docs/architecture.md and checked by tests/test_layers.py.
"""
