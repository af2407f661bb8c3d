"""Every exception and warning class xladev defines has the one base users can catch (`xladev.XladevError`).

The classes are found by importing every module of the package and the TUI (the torch_xla alias's, in
tests/compat/test_alias_error_bases.py), so a new error class anywhere is checked without being listed here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import xladev
from xladev.errors import UsageError, XladevError, XladevWarning


def _modules(package: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Every module of a package, less the `__main__` entry points (importing one runs its command)."""
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=package + "."):
        if not info.name.startswith(skip) and not info.name.endswith(".__main__"):
            names.append(info.name)
    return names


def _our_exception_classes(module_names: list[str]) -> dict[str, type]:
    found = {}
    for name in module_names:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{attr}"] = value
    return found


def _without_the_base(classes: dict[str, type]) -> list[str]:
    return [name for name, cls in classes.items()
            if not issubclass(cls, (XladevError, XladevWarning)) and cls not in (XladevError, XladevWarning)]


def test_every_error_class_of_the_package_and_the_tui_subclasses_xladev_error():
    # The alias is a separate import root (torch_xla): tests/compat/test_alias_error_bases.py.
    names = _modules("xladev", skip=("xladev.torch_xla_alias",)) + _modules("xladev_tui")
    classes = _our_exception_classes(names)
    assert len(classes) >= 20  # the walk found the package's errors, not an empty set
    assert _without_the_base(classes) == []


def test_a_class_without_the_base_is_caught_by_the_check():
    planted = type("PlantedError", (RuntimeError,), {"__module__": "xladev.somewhere"})
    assert _without_the_base({"xladev.somewhere.PlantedError": planted}) == ["xladev.somewhere.PlantedError"]


def test_the_builtin_bases_users_catch_are_kept():
    from xladev._flags import ConfigError
    from xladev.runtime.compile.compilation import XlaCompileError
    from xladev.runtime.record.fallback import UnsupportedOpError

    assert issubclass(ConfigError, ValueError) and issubclass(XlaCompileError, RuntimeError)
    assert issubclass(UnsupportedOpError, NotImplementedError) and issubclass(UsageError, XladevError)
    assert xladev.XladevError is XladevError and xladev.XladevWarning is XladevWarning
    assert issubclass(xladev.GraphGrowthWarning, XladevWarning)
