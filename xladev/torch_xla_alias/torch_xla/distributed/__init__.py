"""`torch_xla.distributed` on xladev: the loaders, `xmp.spawn`, the `xla` backend of torch.distributed, FSDP and ZeRO-1."""

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__, submodules=(
    "fsdp", "parallel_loader", "spmd", "xla_backend", "xla_multiprocessing", "zero_redundancy_optimizer"))
