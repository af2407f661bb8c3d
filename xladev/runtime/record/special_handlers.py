"""Ops with a handler of their own, tried before any lowering: copies, value reads, random draws...

Handlers register here (handlers.py, rng.py, random_ops.py and a few lowering modules); `dispatch`
routes such an op to its handler, and a decomposition leaves it whole for the handler to see.
"""

from __future__ import annotations

# aten overload -> fn(func, args, kwargs) returning the op's result.
SPECIAL_HANDLERS: dict = {}


def special(*ops):
    """Registers the decorated function as the handler of each aten overload in `ops`."""

    def register(fn):
        for op in ops:
            SPECIAL_HANDLERS[op] = fn
        return fn

    return register
