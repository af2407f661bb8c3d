"""`torch_xla.test` on xladev: `test_utils`, the reporting helpers PyTorch/XLA's example training scripts import."""

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__, submodules=("test_utils",))
