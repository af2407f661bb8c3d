"""Pallas kernels on device tensors: PyTorch/XLA's `make_kernel_from_pallas` and `flash_attention`.

Both run through `call_jax` (jax_call.py), so a kernel is one `xla::call_jax` node of the step's graph, named
after it. On a CPU device Pallas runs in its interpret mode (forced while tracing: a kernel written for a GPU
or TPU runs unchanged); on a GPU it lowers through Pallas's GPU backend.

`flash_attention` has PyTorch/XLA's signature and results. Where the Pallas GPU kernel applies (a CUDA device,
no `ab` bias, one set of segment ids for queries and keys, sizes the kernel's blocks divide) it runs jax's
Pallas flash-attention kernel (`jax.experimental.pallas.ops.gpu.attention.mha`, with its own backward kernels);
elsewhere, the CPU included, the same attention written in jax (`reference_attention`), differentiated by
`jax.vjp`. Both compute softmax((Q K^T + ab) * sm_scale + mask) V with PyTorch/XLA's mask: a large negative
number (`DEFAULT_MASK_VALUE`) added where a key is after the query (`causal`) or in another segment.
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable

import torch

from xladev.runtime.graph import backend
from xladev.runtime.record.jax_call import CallJaxError, call_jax, name_of

# PyTorch/XLA's (and jax's flash-attention kernels') mask value: large and negative, finite.
DEFAULT_MASK_VALUE = -0.7 * float(torch.finfo(torch.float32).max)


def make_kernel_from_pallas(kernel: Callable, output_shape_dtype_fn: Callable) -> Callable:
    """A torch function of xla tensors running a Pallas kernel (PyTorch/XLA's `make_kernel_from_pallas`).

    Args:
      kernel: a jax function calling `pl.pallas_call` (jitted or not). Its tensor arguments arrive as jax
        arrays; the others (and the keyword arguments) are static.
      output_shape_dtype_fn: called with the same arguments, returns a list of `(shape, torch dtype)`, one per
        output of the kernel.

    Returns:
      `fn(*args, static_argnums=None, static_argnames=None, **kwargs)`: the kernel's output (one tensor), or a
      tuple of them. `static_argnums`/`static_argnames` are accepted for PyTorch/XLA's signature: every
      argument that is not a tensor is static here.

    Raises (from the returned function):
      TypeError: output_shape_dtype_fn does not return a list of (shape, dtype).
      ValueError: the kernel's outputs differ from what output_shape_dtype_fn declares.
      CallJaxError: jax could not trace the kernel.
    """
    name = name_of(kernel)

    def run(*args, static_argnums=None, static_argnames=None, **kwargs):
        declared = output_shape_dtype_fn(*args)
        if not isinstance(declared, list) or not all(isinstance(d, (tuple, list)) and len(d) == 2 for d in declared):
            raise TypeError(f"make_kernel_from_pallas: output_shape_dtype_fn must return a list of (shape, dtype), "
                            f"got {declared!r}")
        import jax

        outputs = jax.tree_util.tree_leaves(call_jax(kernel, args, kwargs, name=name))
        got = [(tuple(o.shape), o.dtype) for o in outputs]
        wanted = [(tuple(shape), dtype) for shape, dtype in declared]
        if got != wanted:
            # PyTorch/XLA runs only the kernel's pallas_call (its TPU custom call) and returns its raw outputs;
            # xladev runs the whole function, so work done around the pallas_call shows here.
            raise ValueError(f"make_kernel_from_pallas: {name} returns {_outputs_text(got)}, but "
                             f"output_shape_dtype_fn declares {_outputs_text(wanted)} (xladev runs the whole "
                             "function, including any jax work around its pallas_call)")
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    return functools.wraps(kernel)(run) if hasattr(kernel, "__name__") else run


def _outputs_text(outputs) -> str:
    return "[" + ", ".join(f"({list(shape)}, {dtype})" for shape, dtype in outputs) + "]"


def flash_attention(q, k, v, causal: bool = False, q_segment_ids=None, kv_segment_ids=None, sm_scale: float = 1.0,
                    *, ab=None, partition_spec=None, mesh=None):
    """Attention over xla tensors, as PyTorch/XLA's `custom_kernel.flash_attention`.

    Args:
      q: queries, `[*batch, heads, q_len, head_dim]`.
      k, v: keys and values, `[*batch, heads, kv_len, head_dim]`.
      causal: mask the keys after each query (key position > query position).
      q_segment_ids, kv_segment_ids: `[*batch, q_len]` and `[*batch, kv_len]`: a query attends only to keys of
        its segment. Both or neither.
      sm_scale: multiplies the logits (PyTorch/XLA's default 1.0: pass `1 / sqrt(head_dim)` for the usual scale).
      ab: an additive bias of the logits, `[*batch, heads, q_len, kv_len]`.
      partition_spec, mesh: PyTorch/XLA's SPMD hints for its TPU kernel; accepted and not needed here (the
        attention is ordinary graph ops that SPMD partitions like any other).

    Returns:
      `[*batch, heads, q_len, head_dim]`, differentiable in q, k, v and ab.

    Raises:
      ValueError: shapes that do not fit together, or one segment-id tensor without the other.
    """
    _check_attention(q, k, v, q_segment_ids, kv_segment_ids, ab)
    statics = {"causal": bool(causal), "sm_scale": float(sm_scale)}
    if _pallas_gpu_applies(q, k, v, q_segment_ids, kv_segment_ids, ab):
        try:
            return call_jax(_pallas_attention, (q, k, v, q_segment_ids), statics, name="flash_attention.pallas")
        except CallJaxError as exc:  # a shape or dtype the kernel's blocks refuse: the same attention in jax
            warnings.warn(f"flash_attention: the Pallas GPU kernel does not take these inputs ({exc}); "
                          "running the attention as XLA ops", stacklevel=2)
    return call_jax(reference_attention, (q, k, v, ab, q_segment_ids, kv_segment_ids), statics,
                    name="flash_attention")


def _check_attention(q, k, v, q_segment_ids, kv_segment_ids, ab) -> None:
    for label, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() < 3:
            raise ValueError(f"flash_attention: {label} must be a tensor [*batch, heads, seq_len, head_dim], got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if k.shape != v.shape or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"flash_attention: q {list(q.shape)}, k {list(k.shape)} and v {list(v.shape)} must share "
                         "batch, heads and head_dim, and k and v their shape")
    if (q_segment_ids is None) != (kv_segment_ids is None):
        raise ValueError("flash_attention: pass both q_segment_ids and kv_segment_ids, or neither")
    batch = tuple(q.shape[:-3])
    if q_segment_ids is not None and (tuple(q_segment_ids.shape) != batch + (q.shape[-2],)
                                      or tuple(kv_segment_ids.shape) != batch + (k.shape[-2],)):
        raise ValueError(f"flash_attention: segment ids must be [*batch, seq_len]: {list(batch) + [q.shape[-2]]} and "
                         f"{list(batch) + [k.shape[-2]]}, got {list(q_segment_ids.shape)} and "
                         f"{list(kv_segment_ids.shape)}")
    if ab is not None and tuple(ab.shape) != tuple(q.shape[:-1]) + (k.shape[-2],):
        raise ValueError(f"flash_attention: ab must be {list(q.shape[:-1]) + [k.shape[-2]]}, got {list(ab.shape)}")


def reference_attention(q, k, v, ab, q_segment_ids, kv_segment_ids, *, causal: bool, sm_scale: float):
    """softmax((q k^T + ab) * sm_scale + mask) v in jax, in float32 (the result in q's dtype).

    Args:
      q, k, v, ab, q_segment_ids, kv_segment_ids: jax arrays (ab and the segment ids may be None).
      causal, sm_scale: as `flash_attention`.

    Returns:
      The attention output, shaped as q.
    """
    import jax
    import jax.numpy as jnp

    highest = jax.lax.Precision.HIGHEST
    f32 = jnp.float32
    logits = jnp.einsum("...qd,...kd->...qk", q.astype(f32), k.astype(f32), precision=highest)
    if ab is not None:
        logits = logits + ab.astype(f32)
    if sm_scale != 1.0:
        logits = logits * sm_scale
    mask = None
    if q_segment_ids is not None:
        mask = (q_segment_ids[..., None, :, None] == kv_segment_ids[..., None, None, :])
    if causal:
        rows = jnp.arange(q.shape[-2])[:, None]
        cols = jnp.arange(k.shape[-2])[None, :]
        mask = (cols <= rows) if mask is None else jnp.logical_and(mask, cols <= rows)
    if mask is not None:
        logits = logits + jnp.where(mask, 0.0, DEFAULT_MASK_VALUE).astype(f32)
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    weights = jnp.exp(logits)
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return jnp.einsum("...qk,...kd->...qd", weights, v.astype(f32), precision=highest).astype(q.dtype)


def _pallas_gpu_applies(q, k, v, q_segment_ids, kv_segment_ids, ab) -> bool:
    """Whether jax's Pallas GPU kernel takes these inputs: a CUDA device, 4-d q/k/v of a float type, no bias,
    the same segment ids for queries and keys, and sizes its blocks divide."""
    if ab is not None or q.dim() != 4 or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return False
    if q_segment_ids is not None and (q_segment_ids is not kv_segment_ids or q.shape[-2] != k.shape[-2]):
        return False
    if backend.jax_devices()[q.device.index or 0].platform not in ("gpu", "cuda"):
        return False
    head_dim = q.shape[-1]
    return head_dim >= 16 and head_dim & (head_dim - 1) == 0 and all(_blocks_fit(n) for n in (q.shape[-2], k.shape[-2]))


def _blocks_fit(length: int) -> bool:
    # The kernel's blocks: 128 along the sequence forward (or the whole of a shorter one), 32 backward.
    return length >= 32 and length % 32 == 0 and (length <= 128 or length % 128 == 0)


def _pallas_attention(q, k, v, segment_ids, *, causal: bool, sm_scale: float):
    """jax's Pallas GPU flash attention on PyTorch/XLA's layout ([batch, heads, seq, head_dim])."""
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.gpu import attention

    def to_kernel(x):  # the kernel's layout is [batch, seq, heads, head_dim]
        return jnp.swapaxes(x, 1, 2)

    if segment_ids is not None:
        segment_ids = segment_ids.astype(jnp.int32)
    out = attention.mha(to_kernel(q), to_kernel(k), to_kernel(v), segment_ids, sm_scale=sm_scale, causal=causal)
    return jnp.swapaxes(out, 1, 2)
