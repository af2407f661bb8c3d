"""One table of metric and counter names across PyTorch/XLA's eras (schema/metric_names.py): no other module
spells an old name, and a report of the XRT era is read through the same names as a current one."""

from __future__ import annotations

import pathlib
import re

from xladev.report.names import canonical_numbers
from xladev.schema.metric_names import COUNTER_ALIASES, METRIC_ALIASES, metric_names

ROOT = pathlib.Path(__file__).resolve().parents[2]
OLD_NAMES = {old for names in (*METRIC_ALIASES.values(), *COUNTER_ALIASES.values()) for old in names[1:]}


def test_only_the_table_spells_an_old_name():
    assert "XrtCompile" in OLD_NAMES and "CachedSyncTensors" in OLD_NAMES
    table = ROOT / "xladev" / "schema" / "metric_names.py"
    # The writer's counter table emits CreateCompileHandles as PyTorch/XLA's PJRT client does: a writer, not a reader.
    writer = ROOT / "xladev" / "schema" / "counters.py"
    spelled = []
    for path in list((ROOT / "xladev").rglob("*.py")) + list((ROOT / "tui").rglob("*.py")):
        if path in (table, writer):
            continue
        for name in OLD_NAMES:
            if re.search(rf'["\']{name}["\']', path.read_text()):
                spelled.append(f"{path.relative_to(ROOT)}: {name}")
    assert not spelled, "old metric names outside schema/metric_names.py: " + ", ".join(spelled)


def test_old_and_new_names_give_the_same_numbers():
    new = canonical_numbers({"UncachedCompile": 3, "CachedCompile": 5}, {"CompileTime": 3, "ExecuteTime": 8,
                            "TransferFromDeviceTime": 2}, {"CompileTime": 9e9, "ExecuteTime": 4e9})
    old = canonical_numbers({"CreateCompileHandles": 3, "CachedSyncTensors": 5}, {"XrtCompile": 3, "XrtExecute": 8,
                            "TransferFromServerTime": 2}, {"XrtCompile": 9e9, "XrtExecute": 4e9})
    for key in ("compiles", "cached_compiles", "executions", "transfers_from_device", "compile_time_ns",
                "execute_time_ns"):
        assert new[key] == old[key] != 0, key
    assert metric_names("CompileTime")[0] == "CompileTime" and metric_names("LazyTracing") == ("LazyTracing",)
