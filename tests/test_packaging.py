"""The distribution's package list names every package folder, and the TUI installs as `xladev_tui`."""

from __future__ import annotations

import importlib.util
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed():
    config = _config()
    folders = {"xladev": "xladev", **{name: path for name, path in config["package-dir"].items()}}
    found = set()
    for package, folder in folders.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            found.add(".".join((package, *rel.parts)) if rel.parts else package)
    assert sorted(found) == sorted(config["packages"])


def test_tui_installs_under_its_own_name():
    assert _config()["package-dir"] == {"xladev_tui": "tui"}
    spec = importlib.util.find_spec("xladev_tui")
    assert spec is not None and pathlib.Path(spec.origin).parent == ROOT / "tui"
