"""`torch_xla.distributed.data_parallel` on xladev: the module imports, and its `DataParallel` (PyTorch/XLA's
deprecated single-process, multi-thread data parallelism) explains what to use instead when it is constructed.

PyTorch/XLA replaced it with one process per device (`torch_xla.launch`, `xmp.spawn`) and with SPMD; xladev runs
those. A script that only imports the module (as PyTorch/XLA's own tests do) runs on.
"""

from __future__ import annotations

from torch_xla import _xladev

__all__ = ["DataParallel"]


class DataParallel:
    """Refused: see the module's docstring."""

    def __init__(self, network, device_ids=None):
        raise _xladev.UnsupportedAttributeError(_xladev.message("torch_xla.distributed.data_parallel.DataParallel"))


__getattr__ = _xladev.module_getattr(__name__)
