"""The CTC loss and its backward; the backward passes of the multi-class and multi-label margin losses.

CTC: the forward-backward algorithm in log space, one `lax.scan` over time each way, batched over the
sequences. Shapes are static: the time axis is log_probs' own, and the label axis is bounded by
the targets' shape. Lengths may be Python lists (`_ctc_loss`) or tensors (`_ctc_loss.Tensor`), which
stay on the device: each sequence's own lengths only select where its recursion starts and ends.

  log_alpha  [N, T, 2L + 1]: L = max(target_lengths) for list lengths (PyTorch's shape). With tensor
             lengths L would depend on their values, so it is the targets' bound instead: the padded
             width of 2-D targets, the total length of concatenated 1-D ones. Only the backward below
             reads it (it recomputes alpha rather than trust a log_alpha from elsewhere).

The gradient is PyTorch's: for t < input_length, exp(log_probs) - exp(log(sum of alpha·beta over the
label's positions) + nll - log_probs), times the incoming gradient; 0 after the input's end, and 0 for
a sequence whose loss is infinite when zero_infinity is set. (The exp(log_probs) term makes it the
gradient through a log_softmax, not of the loss itself with respect to log_probs, as in PyTorch.)

`ctc_loss` with CPU length tensors and device log_probs: PyTorch's composite hands the CPU tensors to
`_ctc_loss.Tensor` and then divides the device loss by them; CUDA accepts that, so the xla autograd
kernel below moves CPU lengths to the device first (as CUDA reads them to the host itself).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES

aten = torch.ops.aten


def _lse(*terms):
    """log(sum(exp(terms))) elementwise; all -inf gives -inf (no NaN)."""
    top = terms[0]
    for t in terms[1:]:
        top = jnp.maximum(top, t)
    safe = jnp.where(jnp.isfinite(top), top, 0)
    return safe + jnp.log(sum(jnp.exp(t - safe) for t in terms))


def _shift(a, k):
    """a[:, s - k] at position s (-inf where s < k)."""
    return jnp.concatenate([jnp.full(a.shape[:-1] + (k,), -jnp.inf, a.dtype), a[..., :-k]], axis=-1)


def _unshift(a, k):
    """a[:, s + k] at position s (-inf past the end)."""
    return jnp.concatenate([a[..., k:], jnp.full(a.shape[:-1] + (k,), -jnp.inf, a.dtype)], axis=-1)


def _labels(targets, target_lengths, width):
    """[N, width] padded labels from 2-D padded or 1-D concatenated targets (positions past a length are unused)."""
    if targets.ndim == 2:
        return targets[:, :width]
    starts = jnp.cumsum(target_lengths) - target_lengths
    pos = starts[:, None] + jnp.arange(width)[None, :]
    return targets[jnp.clip(pos, 0, max(targets.shape[0] - 1, 0))] if targets.shape[0] else \
        jnp.zeros(pos.shape, targets.dtype)


def _setup(log_probs, targets, input_lengths, target_lengths, blank, width):
    """(lp of each extended-label position [T, N, S], extended labels [N, S], skip mask [N, S], lengths)."""
    il = jnp.asarray(input_lengths, jnp.int64)
    tl = jnp.asarray(target_lengths, jnp.int64)
    labels = _labels(targets, tl, width).astype(jnp.int64)
    n = log_probs.shape[1]
    ext = jnp.full((n, 2 * width + 1), blank, jnp.int64).at[:, 1::2].set(labels)
    # A label may be reached from two positions back (skipping a blank) unless it repeats the label before.
    skip = jnp.zeros(ext.shape, bool).at[:, 3::2].set(labels[:, 1:] != labels[:, :-1])
    lpe = jnp.take_along_axis(log_probs, jnp.broadcast_to(ext[None], (log_probs.shape[0],) + ext.shape), axis=2)
    return lpe, ext, skip, il, tl


def _alpha(lpe, skip, tl):
    """log alpha [T, N, S]: the log probability of the label prefixes ending at each position and time."""
    neg = jnp.asarray(-jnp.inf, lpe.dtype)
    first = jnp.full(lpe.shape[1:], neg).at[:, 0].set(lpe[0, :, 0])
    if lpe.shape[2] > 1:
        first = first.at[:, 1].set(jnp.where(tl > 0, lpe[0, :, 1], neg))

    def step(prev, lp_t):
        new = _lse(prev, _shift(prev, 1), jnp.where(skip, _shift(prev, 2), neg)) + lp_t
        return new, new

    _, rest = lax.scan(step, first, lpe[1:])
    return jnp.concatenate([first[None], rest], axis=0)


def _end_positions(tl, size):
    """Masks [N, S] of the two positions a complete path may end at: the last label and the final blank."""
    s = jnp.arange(size)[None, :]
    return (s == 2 * tl[:, None]) | ((s == 2 * tl[:, None] - 1) & (tl[:, None] > 0))


def _nll(alpha, il, tl):
    last = alpha[jnp.clip(il - 1, 0, alpha.shape[0] - 1), jnp.arange(alpha.shape[1])]  # [N, S]
    ends = jnp.where(_end_positions(tl, alpha.shape[2]), last, -jnp.inf)
    top = jnp.max(ends, axis=1)
    safe = jnp.where(jnp.isfinite(top), top, 0)
    return -(safe + jnp.log(jnp.sum(jnp.exp(ends - safe[:, None]), axis=1)))


def _beta(lpe, skip, il, tl):
    """log beta [T, N, S]: the log probability of the label suffixes from each position and time."""
    neg = jnp.asarray(-jnp.inf, lpe.dtype)
    ends = _end_positions(tl, lpe.shape[2])
    skip_from = _unshift(skip.astype(lpe.dtype), 2) > 0  # position s may jump to s + 2

    def step(nxt, inputs):
        t, lp_t = inputs
        rec = _lse(nxt, _unshift(nxt, 1), jnp.where(skip_from, _unshift(nxt, 2), neg)) + lp_t
        start = jnp.where(ends, lp_t, neg)
        here = (t == il - 1)[:, None]
        before = (t < il - 1)[:, None]
        new = jnp.where(here, start, jnp.where(before, rec, neg))
        return new, new

    steps = jnp.arange(lpe.shape[0])[::-1]
    _, out = lax.scan(step, jnp.full(lpe.shape[1:], neg), (steps, lpe[::-1]))
    return out[::-1]


def _width(ctx_meta_alpha) -> int:
    return (ctx_meta_alpha.shape[2] - 1) // 2


@lowers(aten._ctc_loss.default, aten._ctc_loss.Tensor)
def _ctc_loss(ctx, log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    lpe, _, skip, il, tl = _setup(log_probs, targets, input_lengths, target_lengths, blank, _width(ctx.meta[1]))
    alpha = _alpha(lpe, skip, tl)
    return _nll(alpha, il, tl), jnp.transpose(alpha, (1, 0, 2))


def _ctc_backward(ctx, grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                  blank, zero_infinity=False):
    lpe, ext, skip, il, tl = _setup(log_probs, targets, input_lengths, target_lengths, blank,
                                    (log_alpha.shape[2] - 1) // 2)
    alpha = _alpha(lpe, skip, tl)
    nll = _nll(alpha, il, tl)
    both = alpha + _beta(lpe, skip, il, tl)  # [T, N, S]
    # Per class, log of the sum of alpha·beta over the positions carrying it: scatter a max, then the
    # exponentials relative to it.
    steps, n, size = both.shape
    classes = log_probs.shape[2]
    where_t = jnp.broadcast_to(jnp.arange(steps)[:, None, None], both.shape)
    where_n = jnp.broadcast_to(jnp.arange(n)[None, :, None], both.shape)
    where_c = jnp.broadcast_to(ext[None], both.shape)
    top = jnp.full(log_probs.shape, -jnp.inf, both.dtype).at[where_t, where_n, where_c].max(both)
    safe = jnp.where(jnp.isfinite(top), top, 0)
    total = jnp.zeros(log_probs.shape, both.dtype).at[where_t, where_n, where_c].add(
        jnp.exp(both - safe[where_t, where_n, where_c]))
    lcab = jnp.log(total) + safe
    out = (jnp.exp(log_probs) - jnp.exp(lcab + nll[None, :, None] - log_probs)) * grad[None, :, None]
    keep = jnp.arange(steps)[:, None] < il[None, :]
    if zero_infinity:
        keep = keep & (nll != jnp.inf)[None, :]
    return jnp.where(keep[:, :, None], out, 0)


lowers(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)(_ctc_backward)


# ---- shape rules ------------------------------------------------------------------------------------
def _ctc_loss_tensor_shape(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    torch._check(log_probs.dim() == 3, lambda: f"log_probs must be 3-D (T, N, C), got {log_probs.dim()}-D")
    torch._check(targets.dim() in (1, 2), lambda: f"targets must be 1-D or 2-D, got {targets.dim()}-D")
    steps, batch, _ = log_probs.shape
    torch._check(input_lengths.numel() == batch and target_lengths.numel() == batch,
                 lambda: f"input_lengths and target_lengths must have {batch} entries")
    width = targets.shape[1] if targets.dim() == 2 else targets.shape[0]
    return (torch.empty((batch,), dtype=log_probs.dtype, device="meta"),
            torch.empty((batch, steps, 2 * width + 1), dtype=log_probs.dtype, device="meta"))


def _ctc_backward_shape(grad, log_probs, *args, **kwargs):
    return torch.empty(log_probs.shape, dtype=log_probs.dtype, device="meta")


SHAPE_RULES[aten._ctc_loss.Tensor] = _ctc_loss_tensor_shape
SHAPE_RULES[aten._ctc_loss_backward.default] = _ctc_backward_shape
SHAPE_RULES[aten._ctc_loss_backward.Tensor] = _ctc_backward_shape


# ---- CPU length tensors ---------------------------------------------------------------------------
def _ctc_loss_autograd(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
                       zero_infinity=False):
    """`ctc_loss.Tensor` on xla: CPU length tensors move to log_probs' device, then PyTorch's composite runs.

    Under `torch.inference_mode()` autograd kernels are skipped and CPU lengths still fail the
    same-device check (no_grad is fine).
    """
    device = log_probs.device
    if device.type != "cpu":
        if input_lengths.device.type == "cpu":
            input_lengths = input_lengths.to(device)
        if target_lengths.device.type == "cpu":
            target_lengths = target_lengths.to(device)
    return aten.ctc_loss.Tensor.decompose(log_probs, targets, input_lengths, target_lengths, blank, reduction,
                                          zero_infinity)


# Kept alive for the life of the process: dropping the library would drop the registration.
_lib = torch.library.Library("aten", "IMPL")
_lib.impl("ctc_loss.Tensor", _ctc_loss_autograd, "AutogradPrivateUse1")


# ---- margin losses ----------------------------------------------------------------------------------
# Their forwards run as PyTorch decompositions or lowerings elsewhere; torch._decomp has no backward
# for them, so the backward is the vjp of the loss written out here. A hinge contributes only where it
# is strictly positive, as in PyTorch's kernels (jnp.maximum would split the gradient at 0).
def _reduce(loss, reduction):
    if reduction == 1:
        return jnp.mean(loss)
    if reduction == 2:
        return jnp.sum(loss)
    return loss


def _multi_margin(x, target, p, margin, weight, reduction):
    rows = x.reshape(-1, x.shape[-1] if x.ndim else 1)
    t = target.reshape(-1).astype(jnp.int64)
    classes = rows.shape[1]
    picked = jnp.take_along_axis(rows, t[:, None], axis=1)
    z = margin - picked + rows
    z = jnp.where((jnp.arange(classes)[None, :] != t[:, None]) & (z > 0), z, 0)
    z = jnp.where(p == 2, z * z, z)  # p (1 or 2) arrives as a graph input
    if weight is not None:
        z = z * weight[t][:, None]
    return _reduce(jnp.sum(z, axis=1) / classes, reduction)


@lowers(aten.multi_margin_loss_backward.default)
def _multi_margin_loss_backward(ctx, grad, x, target, p, margin, weight=None, reduction=1):
    loss, vjp = jax.vjp(lambda v: _multi_margin(v, target, p, margin, weight, reduction), x)
    return vjp(grad.reshape(loss.shape).astype(loss.dtype))[0]


def _multilabel_margin(x, target, is_target, reduction):
    classes = x.shape[-1] if x.ndim else 1
    rows = x.reshape(-1, classes)
    labels, listed = _listed(target, classes)  # only the labels before the first -1 count
    picked = jnp.take_along_axis(rows, jnp.where(listed, labels, 0), axis=1)
    z = 1 - picked[:, :, None] + rows[:, None, :]
    others = is_target.reshape(-1, classes) == 0
    z = jnp.where(listed[:, :, None] & others[:, None, :] & (z > 0), z, 0)
    return _reduce(jnp.sum(z, axis=(1, 2)).reshape(x.shape[:-1]) / classes, reduction)


def _listed(target, classes):
    """(labels [N, C], mask of the labels before the first -1)."""
    labels = target.reshape(-1, classes).astype(jnp.int64)
    return labels, jnp.cumprod(labels != -1, axis=1).astype(bool)


@lowers(aten.multilabel_margin_loss_forward.default)
def _multilabel_margin_loss_forward(ctx, x, target, reduction):
    """(loss, is_target). Lowered rather than decomposed: torch._decomp's version also counts the
    positions after the first -1 (as label 0), which PyTorch's kernels ignore."""
    classes = x.shape[-1] if x.ndim else 1
    labels, listed = _listed(target, classes)
    hits = listed[:, :, None] & (labels[:, :, None] == jnp.arange(classes)[None, None, :])
    is_target = jnp.any(hits, axis=1).astype(x.dtype).reshape(target.shape)
    return _multilabel_margin(x, target, is_target, reduction), is_target


@lowers(aten.multilabel_margin_loss_backward.default)
def _multilabel_margin_loss_backward(ctx, grad, x, target, reduction, is_target):
    loss, vjp = jax.vjp(lambda v: _multilabel_margin(v, target, is_target, reduction), x)
    return vjp(grad.reshape(loss.shape).astype(loss.dtype))[0]


def _like_input(grad, x, *args, **kwargs):
    return torch.empty(x.shape, dtype=x.dtype, device="meta")


def _multilabel_forward_shape(x, target, reduction):
    """PyTorch's meta kernel gives a 1-D input's unreduced loss shape [1]; its CPU kernel gives []."""
    torch._check(x.dim() <= 2 and tuple(target.shape) == tuple(x.shape),
                 lambda: f"inconsistent target size: {list(target.shape)} for input of size: {list(x.shape)}")
    loss_shape = tuple(x.shape[:-1]) if reduction == 0 else ()
    return (torch.empty(loss_shape, dtype=x.dtype, device="meta"),
            torch.empty(tuple(target.shape), dtype=x.dtype, device="meta"))


SHAPE_RULES[aten.multilabel_margin_loss_forward.default] = _multilabel_forward_shape
SHAPE_RULES[aten.multi_margin_loss_backward.default] = _like_input
SHAPE_RULES[aten.multilabel_margin_loss_backward.default] = _like_input
