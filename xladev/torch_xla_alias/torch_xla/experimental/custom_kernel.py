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
           "make_kernel_from_pallas", "repeat_with_fixed_output_size", "requires_jax", "to_jax_shape_dtype_struct"]


def convert_torch_dtype_to_jax(dtype: torch.dtype):
    """The jax (numpy) dtype of a torch dtype."""
    return _backend.to_jnp_dtype(dtype)


def to_jax_shape_dtype_struct(tensor: torch.Tensor):
    """A `jax.ShapeDtypeStruct` of the tensor's shape and dtype."""
    import jax

    return jax.ShapeDtypeStruct(tuple(tensor.shape), convert_torch_dtype_to_jax(tensor.dtype))


def repeat_with_fixed_output_size(input: torch.Tensor, repeats: torch.Tensor, total_repeat_length: int):
    """`torch.repeat_interleave(input, repeats)` cut or padded to `total_repeat_length` elements, with no
    data-dependent shape (so no host read and no recompile): position j holds the element whose block of repeats
    covers j; past the last block, the last element.

    Args:
      input: a 1-D tensor.
      repeats: a 1-D tensor of non-negative counts, one per element of `input`.
      total_repeat_length: the output's length.

    Returns:
      A 1-D tensor of `total_repeat_length` elements.
    """
    torch._check(input.dim() == 1 and repeats.dim() == 1,
                 lambda: "repeat_with_fixed_output_size: input and repeats must be 1-D")
    ends = torch.cumsum(repeats, dim=0)
    positions = torch.arange(total_repeat_length, device=input.device, dtype=ends.dtype)
    # How many blocks end at or before each position: the index of the block that covers it.
    index = torch.searchsorted(ends, positions, right=True).clamp(max=input.shape[0] - 1)
    return input.index_select(0, index)


__getattr__ = _xladev.module_getattr(__name__)
