"""`torch_xla._dynamo` on xladev: the dynamo bridge is xladev's torch.compile backend (`backend="openxla"`)."""

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__, submodules=("config", "dynamo_bridge"))
