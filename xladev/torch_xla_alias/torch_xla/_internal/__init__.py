"""`torch_xla._internal` on xladev: the two private modules PyTorch/XLA's Pallas tests and kernels import.

`jax_workarounds` (readying jax before use: nothing to do here, jax is xladev's own runtime) and `tpu` (the
TPU generation, which a host without a TPU does not have).
"""

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__, submodules=("jax_workarounds", "tpu"))
