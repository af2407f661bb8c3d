"""`torch_xla.utils` on xladev: `utils` (`xu`), the small helpers PyTorch/XLA's examples and tests use, and
`serialization` (`save`/`load` with each tensor in its own file) and `checkpoint` (gradient checkpointing)."""

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__, submodules=("checkpoint", "serialization", "utils"))
