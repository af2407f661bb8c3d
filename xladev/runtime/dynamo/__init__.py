"""torch.compile and `xladev.compile`: an FX graph traced once through the op table, then run as one program.
Imports the layers below it up to api/.

The order of the layers is in docs/architecture.md and checked by tests/test_layers.py.
"""
