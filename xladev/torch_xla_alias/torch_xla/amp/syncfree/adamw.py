"""`torch_xla.amp.syncfree.adamw` on xladev: the module PyTorch/XLA keeps its sync-free AdamW in (`xladev.amp.syncfree`)."""

from __future__ import annotations

from xladev.amp.syncfree import AdamW  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
