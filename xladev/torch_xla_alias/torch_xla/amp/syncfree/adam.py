"""`torch_xla.amp.syncfree.adam` on xladev: the module PyTorch/XLA keeps its sync-free Adam in (`xladev.amp.syncfree`)."""

from __future__ import annotations

from xladev.amp.syncfree import Adam  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
