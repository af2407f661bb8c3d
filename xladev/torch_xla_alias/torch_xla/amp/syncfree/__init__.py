"""`torch_xla.amp.syncfree` on xladev: `xladev.amp.syncfree`'s SGD, Adam and AdamW, whose
`step(closure=None, found_inf=None)` skips a step with infs in the graph, without a host read."""

from __future__ import annotations

from xladev.amp.syncfree import SGD, Adam, AdamW  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
