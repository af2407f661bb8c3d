"""Every error class of the torch_xla alias subclasses `xladev.XladevError` and keeps the built-in base users catch."""

from __future__ import annotations

import importlib

import pytest

from tests.test_error_bases import _modules, _our_exception_classes, _without_the_base
from xladev.errors import XladevError


def test_every_error_class_of_the_torch_xla_alias_subclasses_xladev_error(tx):
    classes = _our_exception_classes(_modules("torch_xla"))
    assert {"torch_xla._xladev.UnsupportedAttributeError", "torch_xla._xladev.UnsupportedImportError",
            "torch_xla._xladev.UnsupportedModuleError"} <= set(classes)
    assert _without_the_base(classes) == []


def test_a_refused_torch_xla_import_is_caught_as_import_error_and_as_ours(tx):
    with pytest.raises(ImportError) as caught:
        importlib.import_module("torch_xla.no_such_module_here")
    assert isinstance(caught.value, XladevError) and isinstance(caught.value, ModuleNotFoundError)
    assert caught.value.name == "torch_xla.no_such_module_here"
