"""How a record's fields are read from JSON: the exact JSON types each field's annotation accepts, and the fields
kept in memory only. `xladev.schema.records` uses these for every record type.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


def transient(default=None, factory=None):
    """A field kept in memory only (never written): e.g. the per-op tracing samples."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"transient": True}, compare=False)
    return dataclasses.field(default=default, metadata={"transient": True}, compare=False)


# The exact Python types `json.loads` gives for a field's annotation. Exact, not isinstance: JSON's
# `true` is a bool, which isinstance would also accept as an int.
_JSON_TYPES: dict[Any, frozenset] = {
    int: frozenset({int}), float: frozenset({int, float}), str: frozenset({str}), bool: frozenset({bool}),
    dict: frozenset({dict}), list: frozenset({list}),
}


def accepts(annotation) -> frozenset | None:
    """The JSON value types a field annotation accepts (`NoneType` when it may be null); None: any."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        accepted: frozenset = frozenset()
        for arg in typing.get_args(annotation):
            if arg is type(None):
                accepted |= {type(None)}
                continue
            inner = accepts(arg)
            if inner is None:
                return None
            accepted |= inner
        return accepted
    if annotation is typing.Any:
        return None
    return _JSON_TYPES.get(origin if origin is not None else annotation)


_FIELD_CHECKS: dict[type, list] = {}


def field_checks(cls) -> list:
    """(name, accepted JSON types or None, whether an int becomes a float) per written field of `cls`."""
    checks = _FIELD_CHECKS.get(cls)
    if checks is None:
        hints = typing.get_type_hints(cls)
        checks = []
        for f in dataclasses.fields(cls):
            if f.metadata.get("transient"):
                continue
            accepted = accepts(hints[f.name])
            checks.append((f.name, accepted, accepted is not None and float in accepted))
        _FIELD_CHECKS[cls] = checks
    return checks
