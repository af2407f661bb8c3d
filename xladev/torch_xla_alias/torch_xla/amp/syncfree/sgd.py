"""`torch_xla.amp.syncfree.sgd` on xladev: the module PyTorch/XLA keeps its sync-free SGD in (`xladev.amp.syncfree`)."""

from __future__ import annotations

from xladev.amp.syncfree import SGD  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
