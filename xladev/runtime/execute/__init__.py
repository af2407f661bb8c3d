"""Running compiled graphs: executions and work in flight, the step barrier and (async) closures, host↔device
copies, the ranks' check before a graph with collectives, the runtime's part of the run's end, device memory.
Imports graph/, lowering/ and compile/.

The order of the layers is in docs/architecture.md and checked by tests/test_layers.py.
"""
