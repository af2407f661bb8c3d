"""Several devices or processes: collectives and their process group, point-to-point, the SPMD tensor API
(meshes live in graph/), launching. Imports the layers below it up to record/.

The order of the layers is in docs/architecture.md and checked by tests/test_layers.py.
"""
