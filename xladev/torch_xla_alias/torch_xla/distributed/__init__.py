"""`torch_xla.distributed` on xladev: the loaders and `xmp.spawn`, for one process."""

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__, submodules=("parallel_loader", "xla_multiprocessing"))
