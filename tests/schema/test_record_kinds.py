"""Each kind of event-log record is declared once (`xladev.schema.records`: its class, its `type` name and the
runtime events it is written for), and every table that handles records has an entry for every kind: the
writer's builder, the counter table, the run's one fold (`RunState`), the report's replay and the TUI's run model. A kind added to one and not
to another fails here, before a log is written that some reader drops."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from xladev import events
from xladev.analysis import run_state
from xladev.report import eventlog_input
from xladev.schema import counters, records
from xladev.sinks import event_records
from xladev_tui import run_model

KINDS = set(records.RECORD_TYPES.values())


def _event_classes() -> set[type]:
    return {cls for _, cls in inspect.getmembers(events, inspect.isclass)
            if issubclass(cls, events.Event) and cls is not events.Event}


def test_every_record_kind_has_a_unique_type_name_and_is_readable():
    assert len({cls.TYPE for cls in KINDS}) == len(KINDS) and all(cls.TYPE for cls in KINDS)
    assert {cls for cls in vars(records).values() if isinstance(cls, type) and issubclass(cls, records.Record)
            and cls.TYPE} == KINDS  # no record class outside the reader's table


def test_every_runtime_event_is_written_as_exactly_one_kind():
    declared = [name for cls in KINDS for name in cls.EVENTS]
    assert len(declared) == len(set(declared)), declared
    assert set(declared) == {cls.__name__ for cls in _event_classes()}


def test_the_writer_builds_every_declared_event_and_no_other():
    assert {cls.__name__ for cls in event_records._BUILDERS} == {name for cls in KINDS for name in cls.EVENTS}


@pytest.mark.parametrize("table, where", [
    (counters.TABLE, "xladev.schema.counters.TABLE"),
    (run_state._FOLDS, "the run's one fold, RunState"),
    (eventlog_input._HANDLERS, "the report's EventLogReplay"),
    (run_model._HANDLERS, "the TUI's RunModel"),
])
def test_every_table_has_an_entry_for_every_kind(table, where):
    missing, unknown = KINDS - set(table), set(table) - KINDS
    assert not missing and not unknown, (where, sorted(c.__name__ for c in missing), sorted(c.__name__ for c in unknown))


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def test_an_event_is_named_as_the_record_it_is_written_as():
    """One name per kind: the event is the record's class name, or the record's name and a direction
    (`TransferToDevice` for a `transfer` record of `dir` `to_device`), or the record field it fills
    (`Recompile` goes into a compile record's `recompile`)."""
    for cls in KINDS:
        fields = {f.name for f in dataclasses.fields(cls)}
        for name in cls.EVENTS:
            direction = _snake(name[len(cls.__name__):]) if name.startswith(cls.__name__) else ""
            assert (name == cls.__name__ or direction in ("to_device", "from_device")
                    or _snake(name) in fields), (name, cls.__name__)
