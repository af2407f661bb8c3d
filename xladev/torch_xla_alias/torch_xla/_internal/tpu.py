"""`torch_xla._internal.tpu` on xladev: xladev runs on CPUs and GPUs, never a TPU."""

from torch_xla import _xladev


def version() -> int:
    """The TPU generation; there is none here.

    Raises:
      EnvironmentError: always, as PyTorch/XLA's `tpu.version()` does on a host without TPU metadata.
    """
    raise EnvironmentError("Failed to get TPU metadata: xladev runs on CPU and CUDA devices, not TPUs")


__getattr__ = _xladev.module_getattr(__name__)
