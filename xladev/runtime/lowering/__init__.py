"""Op lowerings to jax, grouped by kind, and their registry (registry.py).

Importing the package loads only the registry. `catalog` imports every lowering module, which
registers its lowerings (and the few special handlers that live beside them); `device.register()`
imports it.
"""
