"""embedding_bag and its backward; segment_reduce lives in segment_reduce.py (imported here).

`F.embedding_bag` reaches the device as `_embedding_bag` (when a gradient is wanted) or
`_embedding_bag_forward_only`, with 1-D `indices` and `offsets` (the composite flattens 2-D input).
Both return (output, offset2bag, bag_size, max_indices) with the shapes PyTorch's meta kernel gives
for a non-CPU device, the same as CUDA's, and autograd hands the last three back to
`_embedding_bag_backward` / `_embedding_bag_per_sample_weights_backward`. Their contents here:

  offset2bag  [num_indices]  the bag of each index position; a position after the last bag's end
                             (include_last_offset with offsets[-1] < num_indices) gets num_bags, so
                             every consumer drops it;
  bag_size    [len(offsets)] the number of non-padding indices of each bag (0 past num_bags);
  max_indices [num_bags, D]  (max mode; else [0]) the weight row that gave each maximum, the first
                             one on ties, -1 for a bag with no index.

Only these lowerings read them, so these conventions are this module's own (they follow CUDA's).
Padding indices (`padding_idx >= 0`) contribute nothing and get no gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import torch

from xladev.runtime.lowering import segment_reduce  # noqa: F401  (registers segment_reduce)
from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES

aten = torch.ops.aten

MODE_SUM, MODE_MEAN, MODE_MAX = 0, 1, 2


def _bags(indices, offsets, num_bags, include_last_offset, padding_idx):
    """(offset2bag, used, counts): each position's bag, whether it contributes, non-padding counts per bag."""
    n = indices.shape[0]
    pos = jnp.arange(n, dtype=offsets.dtype)
    bag = jnp.searchsorted(offsets[:num_bags], pos, side="right") - 1
    inside = bag >= 0
    if include_last_offset:
        inside = inside & (pos < offsets[num_bags])
    bag = jnp.where(inside, bag, num_bags)
    used = inside if padding_idx < 0 else inside & (indices != padding_idx)
    counts = jax.ops.segment_sum(used.astype(jnp.int64), bag, num_bags)
    return bag, used, counts


def _forward(ctx, weight, indices, offsets, scale_grad_by_freq=False, mode=MODE_SUM, sparse=False,
             per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    num_bags = ctx.meta[0].shape[0]
    dim = weight.shape[1]
    bag, used, counts = _bags(indices, offsets, num_bags, include_last_offset, padding_idx)
    rows = weight[indices]
    bag_size = jnp.zeros(offsets.shape[0], jnp.int64).at[:num_bags].set(counts)
    empty = (counts == 0)[:, None]
    if mode == MODE_MAX:
        masked = jnp.where(used[:, None], rows, -jnp.inf)
        best = jax.ops.segment_max(masked, bag, num_bags)
        # The first position of each bag holding its maximum names the row, as CUDA's kernel keeps
        # the first of equal values.
        hit = used[:, None] & (rows == best[bag.clip(0, num_bags - 1)])
        first = jax.ops.segment_min(jnp.where(hit, jnp.arange(rows.shape[0])[:, None], rows.shape[0]), bag, num_bags)
        max_indices = jnp.where(empty, -1, indices[first.clip(0, max(rows.shape[0] - 1, 0))]) \
            if rows.shape[0] else jnp.full((num_bags, dim), -1, jnp.int64)
        output = jnp.where(empty, 0, best).astype(weight.dtype)
        return output, bag, bag_size, max_indices
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None]
    output = jax.ops.segment_sum(jnp.where(used[:, None], rows, 0), bag, num_bags)
    if mode == MODE_MEAN:
        output = jnp.where(empty, 0, output / jnp.maximum(counts, 1)[:, None].astype(output.dtype))
    return output, bag, bag_size, jnp.zeros((0,), jnp.int64)


lowers(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)(_forward)


def _dense_backward(grad, indices, offset2bag, bag_size, max_indices, num_weights, scale_grad_by_freq, mode,
                    per_sample_weights, padding_idx):
    num_bags, dim = grad.shape
    if mode == MODE_MAX:
        # Each (bag, column) maximum came from one weight row; -1 (an empty bag) is dropped.
        rows = jnp.where(max_indices >= 0, max_indices, num_weights)
        cols = jnp.broadcast_to(jnp.arange(dim), rows.shape)
        return jnp.zeros((num_weights, dim), grad.dtype).at[rows, cols].add(grad, mode="drop")
    used = offset2bag < num_bags
    if padding_idx >= 0:
        used = used & (indices != padding_idx)
    bag = offset2bag.clip(0, num_bags - 1)
    g = grad[bag]
    if per_sample_weights is not None:
        g = g * per_sample_weights[:, None].astype(g.dtype)
    if mode == MODE_MEAN:
        g = g / jnp.maximum(bag_size[bag], 1)[:, None].astype(g.dtype)
    if scale_grad_by_freq:
        # Every occurrence of a row in the whole batch shares its gradient, as in `embedding`.
        freq = jnp.zeros(num_weights, jnp.int64).at[indices].add(1)
        g = g / jnp.maximum(freq[indices], 1)[:, None].astype(g.dtype)
    return jnp.zeros((num_weights, dim), grad.dtype).at[indices].add(jnp.where(used[:, None], g, 0))


@lowers(aten._embedding_bag_backward.default)
def _embedding_bag_backward(ctx, grad, indices, offsets, offset2bag, bag_size, max_indices, num_weights,
                            scale_grad_by_freq, mode, sparse, per_sample_weights=None, padding_idx=-1):
    return _dense_backward(grad, indices, offset2bag, bag_size, max_indices, num_weights, scale_grad_by_freq,
                           mode, per_sample_weights, padding_idx)


@lowers(aten._embedding_bag_dense_backward.default)
def _embedding_bag_dense_backward(ctx, grad, indices, offset2bag, bag_size, max_indices, num_weights,
                                  scale_grad_by_freq, mode, per_sample_weights=None, padding_idx=-1):
    return _dense_backward(grad, indices, offset2bag, bag_size, max_indices, num_weights, scale_grad_by_freq,
                           mode, per_sample_weights, padding_idx)


@lowers(aten._embedding_bag_per_sample_weights_backward.default)
def _per_sample_weights_backward(ctx, grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    """d output / d per_sample_weights[i]: the dot product of the bag's gradient with the index's row."""
    num_bags = grad.shape[0]
    used = offset2bag < num_bags
    if padding_idx >= 0:
        used = used & (indices != padding_idx)
    out = jnp.sum(grad[offset2bag.clip(0, num_bags - 1)] * weight[indices], axis=1)
    return jnp.where(used, out, 0)


def _backward_shape(grad, indices, offsets, offset2bag, bag_size, max_indices, num_weights, scale_grad_by_freq,
                    mode, sparse, per_sample_weights=None, padding_idx=-1):
    """The dense gradient's shape (sparse=True arrives here as False: runtime/record/sparse_gradients.py)."""
    return torch.empty((num_weights, grad.shape[1]), dtype=grad.dtype, device="meta")


SHAPE_RULES[aten._embedding_bag_backward.default] = _backward_shape
