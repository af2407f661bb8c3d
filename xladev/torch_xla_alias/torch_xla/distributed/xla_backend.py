"""`torch_xla.distributed.xla_backend` on xladev: torch.distributed's `xla` backend and `xla://` rendezvous.

xladev registers both when it starts (importing this module is what registers them in PyTorch/XLA), so
`dist.init_process_group("xla", init_method="xla://")` works under torchrun, `xmp.spawn` and `torch_xla.launch`.
"""

from __future__ import annotations

from xladev.runtime.distributed.process_group import ProcessGroupXla, new_group as new_xla_process_group, register

from torch_xla import _xladev

register()

__all__ = ["ProcessGroupXla", "new_xla_process_group"]

__getattr__ = _xladev.module_getattr(__name__)
