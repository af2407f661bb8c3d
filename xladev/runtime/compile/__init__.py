"""Compiling graphs: the compile cache, the persistent cache, failed-HLO saving, the GraphInfo view of a graph,
and each trigger site's history (recompilations). Imports graph/ and lowering/.

The order of the layers is in docs/architecture.md and checked by tests/test_layers.py.
"""
