"""docs/architecture.md matches the tree: every module its runtime table names exists, in the folder the table
gives, every runtime module is in the table, and every path the page names exists."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
RUNTIME = ROOT / "xladev" / "runtime"


def runtime_table() -> dict[str, list[str]]:
    """folder -> the module names its row lists."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `(\w+)/` \| (.+?) \|", line)
        if m:
            rows[m[1]] = re.findall(r"`([\w/]+)`", m[2])
    return rows


def test_the_table_names_only_modules_that_exist():
    rows = runtime_table()
    assert len(rows) >= 9, rows
    missing = []
    for folder, names in rows.items():
        for name in names:
            name = name.rstrip("/")
            if not ((RUNTIME / folder / f"{name}.py").exists() or (RUNTIME / folder / name).is_dir()):
                missing.append(f"{folder}/{name}")
    assert not missing, f"docs/architecture.md names runtime modules that do not exist: {missing}"


def test_every_runtime_module_is_in_the_table():
    rows = runtime_table()
    listed = {(folder, name.rstrip("/")) for folder, names in rows.items() for name in names}
    unlisted = []
    for folder in rows:
        for path in (RUNTIME / folder).iterdir():
            name = path.stem if path.suffix == ".py" else path.name
            if name in ("__init__", "__pycache__") or (folder == "lowering" and name not in (
                    "registry", "catalog", "collective_ops", "graph_lowering", "views")):
                continue  # lowering/ is listed by its shared modules and "one module per op family"
            if (folder, name) not in listed:
                unlisted.append(f"{folder}/{name}")
    assert not unlisted, f"runtime modules docs/architecture.md does not place: {unlisted}"


def test_every_path_the_page_names_exists():
    text = DOC.read_text()
    paths = set(re.findall(r"`((?:xladev|tui|tests|tools|docs)/[\w/.]+)`", text))
    paths |= {"xladev/" + p for p in re.findall(r"`(runtime/[\w/.]+)`", text)}
    assert paths
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"
