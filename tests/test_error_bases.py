"""Every exception and warning class xladev defines has the one base users can catch (`xladev.XladevError`).

The classes are found by importing every module of the package, the TUI and the torch_xla alias, so a new
error class anywhere is checked without being listed here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys

import pytest

import xladev
from xladev.cli.run import ALIAS_DIR
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


@pytest.fixture(scope="module")
def alias_modules():
    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("a real torch_xla is importable here; the alias is checked where it is not")
    sys.path.insert(0, ALIAS_DIR)
    try:
        yield _modules("torch_xla")
    finally:
        sys.path.remove(ALIAS_DIR)
        for name in [m for m in sys.modules if m == "torch_xla" or m.startswith("torch_xla.")]:
            del sys.modules[name]
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != "torch_xla._xladev"]


def _without_the_base(classes: dict[str, type]) -> list[str]:
    return [name for name, cls in classes.items()
            if not issubclass(cls, (XladevError, XladevWarning)) and cls not in (XladevError, XladevWarning)]


def test_every_error_class_of_the_package_and_the_tui_subclasses_xladev_error():
    # The alias is a separate import root (torch_xla), checked below.
    names = _modules("xladev", skip=("xladev.torch_xla_alias",)) + _modules("xladev_tui")
    classes = _our_exception_classes(names)
    assert len(classes) >= 20  # the walk found the package's errors, not an empty set
    assert _without_the_base(classes) == []


def test_every_error_class_of_the_torch_xla_alias_subclasses_xladev_error(alias_modules):
    classes = _our_exception_classes(alias_modules)
    assert {"torch_xla._xladev.UnsupportedAttributeError", "torch_xla._xladev.UnsupportedImportError",
            "torch_xla._xladev.UnsupportedModuleError"} <= set(classes)
    assert _without_the_base(classes) == []


def test_a_class_without_the_base_is_caught_by_the_check():
    planted = type("PlantedError", (RuntimeError,), {"__module__": "xladev.somewhere"})
    assert _without_the_base({"xladev.somewhere.PlantedError": planted}) == ["xladev.somewhere.PlantedError"]


def test_the_builtin_bases_users_catch_are_kept():
    from xladev._flags import ConfigError
    from xladev.runtime.compilation import XlaCompileError
    from xladev.runtime.fallback import UnsupportedOpError

    assert issubclass(ConfigError, ValueError) and issubclass(XlaCompileError, RuntimeError)
    assert issubclass(UnsupportedOpError, NotImplementedError) and issubclass(UsageError, XladevError)
    assert xladev.XladevError is XladevError and xladev.XladevWarning is XladevWarning
    assert issubclass(xladev.GraphGrowthWarning, XladevWarning)


def test_a_refused_torch_xla_import_is_caught_as_import_error_and_as_ours(alias_modules):
    with pytest.raises(ImportError) as caught:
        importlib.import_module("torch_xla.no_such_module_here")
    assert isinstance(caught.value, XladevError) and isinstance(caught.value, ModuleNotFoundError)
    assert caught.value.name == "torch_xla.no_such_module_here"
