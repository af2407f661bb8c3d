"""Cache keys for Python callables and the static values handed to them (`call_jax`'s specialization cache).

A training step often builds its jax function afresh (`lambda x: jnp.sin(x) * scale`, a closure made in the
step, `functools.partial(f, n=3)`): a new object each time, the same computation. Keying such a function by
its identity would trace it again every step, so a plain function is keyed by what decides what it computes
when called: its code object, and the values its closure cells, defaults and keyword defaults hold. Numbers,
strings, tuples of them, functions (by these same rules, recursively), partials and bound methods are keyed
by value; any other object (an array, a module, a dict) by its identity, holding a reference so the identity
cannot be reused while the key lives. Like `jax.jit`, the key does not cover the module globals a function
reads: a global that changes between calls is read once per specialization.
"""

from __future__ import annotations

import enum
import functools
import types

import numpy as np
import torch

# Values keyed as (type, value): immutable, and equal exactly when they behave alike (the type keeps 1, 1.0
# and True apart, which hash alike).
_PLAIN = (int, bool, str, bytes, complex, type(None), type(Ellipsis))
# Deeper than this (a closure of a closure of...), a function is keyed by its identity.
_MAX_DEPTH = 8


class Identity:
    """A key part equal only to a key part of the same object (for values with no usable equality).

    Holds the object, so its id is not reused by another object while a key holding it exists.
    """

    __slots__ = ("obj",)

    def __init__(self, obj) -> None:
        self.obj = obj

    def __eq__(self, other) -> bool:
        return type(other) is Identity and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"Identity({type(self.obj).__name__}@{id(self.obj):#x})"


def value_key(value, depth: int = 0):
    """A hashable key that is equal for two values exactly when `call_jax` may treat them as the same.

    Args:
      value: any Python value (a static argument, a closure cell's content).
      depth: how many functions deep this value sits (closures of closures), to bound the walk.

    Returns:
      The key: `(type, value)` for plain immutable values (floats by `repr`, so 0.0 and -0.0 differ and a
      NaN equals itself), tuples of keys, a function's key, or an `Identity`.
    """
    kind = type(value)
    if kind is float:
        return (float, repr(value))
    if kind in _PLAIN:
        return (kind, value)
    if kind is tuple or kind is frozenset:
        return (kind, tuple(value_key(v, depth) for v in value))
    if kind is types.FunctionType:
        return function_key(value, depth + 1)
    if kind is functools.partial:
        return ("partial", function_key(value.func, depth + 1), value_key(tuple(value.args), depth),
                value_key(tuple(sorted(value.keywords.items())), depth))
    if kind is types.MethodType:
        return ("method", function_key(value.__func__, depth + 1), Identity(value.__self__))
    if _hashable_by_value(value):
        return (kind, value)  # dtypes (torch's and numpy's), enums, types: equal when they are the same
    return Identity(value)


def _hashable_by_value(value) -> bool:
    return isinstance(value, (torch.dtype, np.dtype, np.generic, enum.Enum, type))


def function_key(fn, depth: int = 0):
    """The key of a callable: a plain function by its code and captured values, anything else by identity.

    Args:
      fn: the callable.
      depth: nesting depth (see `value_key`).

    Returns:
      A hashable key.
    """
    if type(fn) is not types.FunctionType:
        if type(fn) in (functools.partial, types.MethodType):
            return value_key(fn, depth)
        return Identity(fn)
    if depth > _MAX_DEPTH:
        return Identity(fn)
    cells = fn.__closure__ or ()
    captured = []
    for cell in cells:
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell: a name the enclosing function has not bound yet
            captured.append(("empty",))
            continue
        # A function that refers to itself (a recursive closure) holds itself in a cell.
        captured.append(("self",) if content is fn else value_key(content, depth))
    defaults = value_key(fn.__defaults__ or (), depth)
    kwdefaults = value_key(tuple(sorted((fn.__kwdefaults__ or {}).items())), depth)
    return ("function", fn.__code__, tuple(captured), defaults, kwdefaults)
