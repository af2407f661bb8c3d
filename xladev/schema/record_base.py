"""The base of the event log's records (`xladev.schema.records` declares each kind): the schema's name and version,
how a record becomes its JSON object and is read back from one, and the errors of a line that is not a record.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from xladev.errors import XladevError
from xladev.schema.record_fields import field_checks

SCHEMA_NAME = "xladev.events"
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_NAME}/{SCHEMA_VERSION}"


class RecordError(XladevError, ValueError):
    """A line that is not a valid record: names the record type and the field that is wrong."""


class NotAnEventLog(XladevError, ValueError):
    """The file is not an xladev event log (its first line is not an `xladev.events` header)."""


@dataclasses.dataclass(slots=True)
class Record:
    """Base of every record type: `TYPE` is its `"type"` field."""

    TYPE: ClassVar[str] = ""
    # The runtime events (`xladev.events` class names) this kind is written for; () for the writer's own lines
    # (header, graph text, end). Each kind is declared once, in `xladev.schema.records`: the writer's builder
    # (`xladev.sinks.event_records`), the counter table (`xladev.schema.counters`) and each fold (the report's
    # replay, the TUI's run model) have an entry for every kind, which tests/schema/test_record_kinds.py checks.
    EVENTS: ClassVar[tuple[str, ...]] = ()
    REQUIRED: ClassVar[tuple[str, ...]] = ()  # fields without which the record means nothing
    OPTIONAL: ClassVar[tuple[str, ...]] = ()  # fields written only when set (not null)

    def to_record(self) -> dict:
        """The JSON object of this record (transient fields, and optional fields that are None, left out)."""
        out = {"type": self.TYPE}
        optional = self.OPTIONAL
        for f in dataclasses.fields(self):
            if not f.metadata.get("transient"):
                value = getattr(self, f.name)
                if value is None and f.name in optional:
                    continue
                out[f.name] = value
        return out

    @classmethod
    def from_record(cls, data: dict) -> "Record":
        """The record of a JSON object (its `"type"` already matched).

        Raises:
          RecordError: a required field is missing, or a field has a value of the wrong type.
        """
        for name in cls.REQUIRED:
            if data.get(name) is None:
                raise RecordError(f"{cls.TYPE} record without its {name!r} field")
        values = {}
        for name, accepted, to_float in field_checks(cls):
            if name not in data:
                continue
            value = data[name]
            if accepted is not None and type(value) not in accepted:
                expected = " or ".join(sorted("null" if t is type(None) else t.__name__ for t in accepted))
                raise RecordError(f"{cls.TYPE} record: field {name!r} is {type(value).__name__} {str(value)[:40]!r}, "
                                  f"expected {expected}")
            values[name] = float(value) if to_float and value is not None else value
        cause = values.get("cause")
        if cause and not all(isinstance(v, str) for v in cause.values()):
            raise RecordError(f"{cls.TYPE} record: field 'cause' holds a value that is not text")
        return cls(**values)


@dataclasses.dataclass(slots=True)
class TimedRecord(Record):
    """An event's record: `t` ns since the log started, and the runtime step it belongs to."""

    t: int = 0
    step: int = 0
