"""Small ops with a static output shape whose lowering needs more than one jax call.

- `logspace`: the exponents filled from both ends, as in linspace.
- `nonzero_static` pads or truncates the nonzero indices to a given count (`jnp.nonzero(size=)`).
- `as_strided_scatter` writes `src` at the flat positions the strides describe, on a contiguous input.

Their handlers (what reads a bool back, what returns a list, what falls back for a strided input) are
in `record/static_handlers.py`: this folder holds lowerings only.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.logspace.default)
def _logspace(ctx, start, end, steps, base=10.0, **kwargs):
    dtype = ctx.out_dtype
    if steps == 0:
        return jnp.zeros((0,), dtype)
    if steps == 1:
        return jnp.full((1,), jnp.power(jnp.float64(base), jnp.asarray(start, jnp.float64)), dtype)
    i = jnp.arange(steps, dtype=jnp.float64)
    start, end = jnp.asarray(start, jnp.float64), jnp.asarray(end, jnp.float64)
    step = (end - start) / (steps - 1)
    # The exponents are filled from both ends, as in linspace.
    exponent = jnp.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i))
    return jnp.power(jnp.float64(base), exponent).astype(dtype)


@lowers(aten.nonzero_static.default)
def _nonzero_static(ctx, x, *, size, fill_value=-1):
    if x.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)  # a 0-d input has no index coordinates
    found = jnp.nonzero(x, size=size, fill_value=fill_value)
    return jnp.stack(found, axis=1).astype(jnp.int64)


@lowers(aten.as_strided_scatter.default)
def _as_strided_scatter(ctx, x, src, size, stride, storage_offset=None):
    offset = storage_offset or 0
    positions = np.full(tuple(size), offset, np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        positions = positions + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    flat = x.reshape(-1).at[positions.reshape(-1)].set(src.reshape(-1).astype(x.dtype))
    return flat.reshape(x.shape)
