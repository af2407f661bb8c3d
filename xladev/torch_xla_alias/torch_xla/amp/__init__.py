"""`torch_xla.amp` on xladev: `xladev.amp` under PyTorch/XLA's names.

`autocast(device, enabled=True, dtype=None, cache_enabled=True)` is `torch.autocast("xla")` with PyTorch/XLA's
policy (bfloat16 by default, float16 when asked); `GradScaler` (PyTorch/XLA 2.8's signature, with
`use_zero_grad`) checks gradients and updates its scale on the device; `syncfree.SGD`, `Adam`, `AdamW` skip a
step with infs in the graph. PyTorch/XLA 2.9's `torch_xla.amp.autocast` ignores devices other than TPUs (its
`torch.autocast("xla")` works) and its GradScaler is gone since 2.9; here all work on the CPU and CUDA
backends (docs/amp.md).
"""

from __future__ import annotations

from xladev.amp import GradScaler, autocast  # noqa: F401

from torch_xla import _xladev
from torch_xla.amp import syncfree  # noqa: F401

__getattr__ = _xladev.module_getattr(__name__)
