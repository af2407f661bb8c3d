"""`torch_xla.experimental.custom_kernel` on xladev: Pallas kernels and flash attention.

`make_kernel_from_pallas(kernel, output_shape_dtype_fn)` and `flash_attention(q, k, v, causal=False, ...)` keep
PyTorch/XLA's signatures; each call is one `xla::call_jax` node of the step's graph (xladev's
`runtime/record/pallas_kernels.py`). On the CPU, Pallas kernels run in interpret mode and flash attention as the same
attention in jax; on a GPU, through Pallas's GPU backend. PyTorch/XLA's TPU-only kernels (paged and ragged paged
attention, gmm, quantized matmul) and its TPU custom call (`trace_pallas`) are not provided.
"""

from __future__ import annotations

import torch

from xladev.runtime.graph import backend as _backend
from xladev.runtime.record.pallas_kernels import DEFAULT_MASK_VALUE, flash_attention, make_kernel_from_pallas

from torch_xla import _xladev
from torch_xla._internal.jax_workarounds import jax_import_guard, requires_jax  # noqa: F401  (PyTorch/XLA's names)

__all__ = ["DEFAULT_MASK_VALUE", "convert_torch_dtype_to_jax", "flash_attention", "jax_import_guard",
           "make_kernel_from_pallas", "requires_jax", "to_jax_shape_dtype_struct"]


def convert_torch_dtype_to_jax(dtype: torch.dtype):
    """The jax (numpy) dtype of a torch dtype."""
    return _backend.to_jnp_dtype(dtype)


def to_jax_shape_dtype_struct(tensor: torch.Tensor):
    """A `jax.ShapeDtypeStruct` of the tensor's shape and dtype."""
    import jax

    return jax.ShapeDtypeStruct(tuple(tensor.shape), convert_torch_dtype_to_jax(tensor.dtype))


__getattr__ = _xladev.module_getattr(__name__)
