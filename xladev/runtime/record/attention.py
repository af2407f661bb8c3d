"""`scaled_dot_product_attention` on xla tensors as one node forward and one backward.

PyTorch reaches a PrivateUse1 device with attention's math decomposition: 25 recorded ops forward and 22
backward for a causal call, most of a small transformer layer's recording. Its fused entry for such devices is
chosen by a C++ stub that Python cannot register, so, as for `einsum`, a kernel at the AutogradPrivateUse1 key
takes the op: it runs the same math in jax as one `call_jax` node (`scaled_dot_product_attention`), whose
backward is one node of `jax.vjp`. It follows torch's math path step by step (each of q and k scaled by the
square root of the scale, the boolean mask as 0 / -inf, softmax with a row that masks everything giving
zeros), at the precision of xladev's other matmuls, so the numbers are eager's up to float32 rounding.
Grouped-query attention repeats the key and value heads as torch does. Dropout, and anything but xla tensors of
one floating dtype whose batch dimensions match, go to torch's math path, as before; so do `torch.compile`'s
traces (their tensors are fakes).
"""

from __future__ import annotations

import math

import torch

from xladev.runtime.record.jax_call import CallJaxError, call_jax
from xladev.runtime.record.tensor import XlaTensor

aten = torch.ops.aten
_FLOATING = frozenset((torch.float32, torch.float64, torch.float16, torch.bfloat16))


def _attention(query, key, value, mask, *, scale_root: float, negative: bool, causal: bool, groups: int):
    """torch's `_scaled_dot_product_attention_math` in jax, operation for operation."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    dtype = query.dtype
    if groups > 1:  # grouped-query attention: each key and value head serves `groups` query heads
        key, value = jnp.repeat(key, groups, axis=-3), jnp.repeat(value, groups, axis=-3)
    q = query * jnp.asarray(-scale_root if negative else scale_root, dtype)
    k_t = jnp.swapaxes(key, -2, -1) * jnp.asarray(scale_root, dtype)
    scores = jnp.matmul(q, k_t, precision=lax.Precision.HIGHEST)
    if causal:
        length, keys = query.shape[-2], key.shape[-2]
        allowed = jnp.tril(jnp.ones((length, keys), dtype=bool))
        mask = jnp.where(allowed, jnp.asarray(0, dtype), jnp.asarray(-jnp.inf, dtype))
    elif mask is not None and mask.dtype == jnp.bool_:
        mask = jnp.where(mask, jnp.asarray(0, dtype), jnp.asarray(-jnp.inf, dtype))
    if mask is not None:
        scores = scores + mask
    # _safe_softmax: a row whose every score is -inf attends to nothing, zeros where softmax gives NaN; its
    # scores are made finite first, so that its gradient is zero too (eager's backward reads the zeros).
    nothing = jnp.all(scores == -jnp.inf, axis=-1, keepdims=True)
    scores = jnp.where(nothing, jnp.asarray(0, dtype), scores)
    weights = jnp.where(nothing, jnp.asarray(0, dtype), jax.nn.softmax(scores, axis=-1))  # as aten::_softmax lowers
    return jnp.matmul(weights, value, precision=lax.Precision.HIGHEST)


def _takes(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa) -> bool:
    """Whether the one-node path computes exactly what torch's math path would (else that path runs)."""
    tensors = (query, key, value) if attn_mask is None else (query, key, value, attn_mask)
    if dropout_p != 0.0 or not all(type(t) is XlaTensor for t in tensors):
        return False
    if query.dtype not in _FLOATING or key.dtype != query.dtype or value.dtype != query.dtype:
        return False
    if query.dim() < 2 or not query.dim() == key.dim() == value.dim():
        return False
    if enable_gqa and query.dim() >= 3 and query.shape[-3] != key.shape[-3]:
        heads, kv_heads = query.shape[-3], key.shape[-3]
        if (kv_heads == 0 or heads % kv_heads or value.shape[-3] != kv_heads or query.shape[:-3] != key.shape[:-3]
                or key.shape[:-3] != value.shape[:-3]):
            return False  # torch's own error
    elif query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
        return False
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        return False
    if attn_mask is not None:
        if is_causal or attn_mask.dtype not in (torch.bool, query.dtype):
            return False  # torch's own error or promotion
        scores = (*query.shape[:-1], key.shape[-2])
        try:
            if torch.broadcast_shapes(tuple(attn_mask.shape), scores) != scores:
                return False
        except RuntimeError:
            return False
    return len({t.device for t in tensors}) == 1


def _sdpa_autograd(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   enable_gqa=False):
    if _takes(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        chosen = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
        groups = query.shape[-3] // key.shape[-3] if enable_gqa and query.dim() >= 3 else 1
        try:
            return call_jax(_attention, (query, key, value, attn_mask),
                            {"scale_root": math.sqrt(abs(chosen)), "negative": chosen < 0, "causal": bool(is_causal),
                             "groups": groups},
                            name="scaled_dot_product_attention", override_hash="xladev.scaled_dot_product_attention")
        except CallJaxError:
            pass  # arguments jax reads otherwise than torch: torch's own path says what is wrong
    return aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]


# Kept alive for the life of the process: dropping the library would drop the registration.
_lib = torch.library.Library("aten", "IMPL")
_lib.impl("scaled_dot_product_attention", _sdpa_autograd, "AutogradPrivateUse1")
