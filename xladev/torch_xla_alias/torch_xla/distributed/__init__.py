"""`torch_xla.distributed` on xladev: the loaders, `xmp.spawn` and the `xla` backend of torch.distributed."""

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__, submodules=("parallel_loader", "spmd", "xla_backend", "xla_multiprocessing"))
