"""Every `xladev` name the benchmarks, tools and examples import exists (they are not run by the suite,
so a rename would otherwise break them silently, as it once broke three benchmarks)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("tools", "examples") for p in (ROOT / folder).rglob("*.py"))


def _xladev_imports(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("xladev", "xladev_tui"):
                    yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] in ("xladev", "xladev_tui"):
                for alias in node.names:
                    yield node.module, alias.name


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_imported_xladev_names_exist(path):
    missing = []
    for module, name in _xladev_imports(path):
        if importlib.util.find_spec(module) is None:
            missing.append(module)
        elif name is not None:
            imported = importlib.import_module(module)
            is_package = hasattr(imported, "__path__")
            if not hasattr(imported, name) and not (is_package and importlib.util.find_spec(f"{module}.{name}")):
                missing.append(f"{module}.{name}")
    assert not missing, f"{path.name} imports what does not exist: {', '.join(missing)}"
