"""Distributions on the device RNG: each draw is a `jax.random` sampler fed by the threaded key (rng.py).

Covered here: `cauchy_`, `geometric_`, `log_normal_`, every `normal` overload, `rand_like`, `randn_like`,
`randint_like`, `multinomial`, `poisson`, `_standard_gamma` (and its gradient), `binomial`,
`_sample_dirichlet`, `rrelu_with_noise` (training draws its noise here) and `fractional_max_pool2d/3d`
(deterministic given the samples `F.fractional_max_pool*d` draws with `torch.rand`, so a lowering, with
its backward). `torch.distributions`' samplers reduce to these.

As on CUDA, the checks PyTorch's CPU kernels make on tensor *values* (a negative `std` tensor, a
multinomial row without enough positive weights) would need a host read per call and are not made: the
draw is still a sample of the distribution the arguments define where one exists (a negative `std` acts
as its absolute value, the normal being symmetric). An explicit `generator=` is not followed: the device
has one generator per device, as under torch_xla.
"""

from __future__ import annotations

import math

import torch

from xladev.runtime.record.arguments import argument as _arg
from xladev.runtime.graph.backend import device_index
from xladev.runtime.record.dispatch import handle
from xladev.runtime.record.fallback import run_on_cpu
from xladev.runtime.record.handlers import FACTORY_HANDLERS  # also registers the `*_like` handlers, before ours
from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES, _to_meta
from xladev.runtime.record.recording import write_into
from xladev.runtime.record.rng import _broadcast, _fill_random, _float_for, random_tensor, sampler
from xladev.runtime.record.special_handlers import SPECIAL_HANDLERS, special
from xladev.runtime.record.tensor import XlaTensor

aten = torch.ops.aten


# ---- samplers -------------------------------------------------------------------------------------
@sampler("cauchy")
def _cauchy(key, shape, dtype, params):
    import jax

    median, sigma = params
    return jax.random.cauchy(key, shape, dtype=_float_for(dtype)) * sigma + median


@sampler("log_normal")
def _log_normal(key, shape, dtype, params):
    import jax
    import jax.numpy as jnp

    mean, std = params
    # exp(mean + std * z) = exp(mean) * exp(std * z), the second factor being jax's lognormal(sigma=std).
    fdtype = _float_for(dtype)
    return jax.random.lognormal(key, std, shape, dtype=fdtype) * jnp.exp(jnp.asarray(mean, fdtype))


@sampler("geometric")
def _geometric(key, shape, dtype, params):
    import jax

    (p,) = params
    return jax.random.geometric(key, p, shape, dtype="int64")  # trials to the first success: 1, 2, ...


@sampler("poisson")
def _poisson(key, shape, dtype, params, rate):
    import jax

    return jax.random.poisson(key, rate, shape, dtype="int64")


@sampler("gamma")
def _gamma(key, shape, dtype, params, alpha):
    import jax
    import jax.numpy as jnp

    fdtype = _float_for(dtype)
    value = jax.random.gamma(key, alpha.astype(fdtype), shape, dtype=fdtype)
    # PyTorch's _standard_gamma never returns 0 (an underflow becomes the smallest normal number): the
    # support stays (0, inf), and log-densities of the samples stay finite.
    return jnp.maximum(value, jnp.finfo(fdtype).tiny)


@sampler("binomial")
def _binomial(key, shape, dtype, params, count, prob):
    import jax

    fdtype = _float_for(dtype)
    return jax.random.binomial(key, count.astype(fdtype), prob.astype(fdtype), shape, dtype=fdtype)


@sampler("dirichlet")
def _dirichlet(key, shape, dtype, params, alpha):
    import jax

    fdtype = _float_for(dtype)
    return jax.random.dirichlet(key, alpha.astype(fdtype), tuple(shape[:-1]), dtype=fdtype)


@sampler("multinomial")
def _multinomial(key, shape, dtype, params, probs):
    """Category indices: `shape` is probs' batch shape + (num_samples,).

    With replacement, independent categorical draws; without, the Gumbel top-k trick (the k largest of
    log p + Gumbel noise are a draw of k distinct categories in the order sampling without replacement
    picks them). Zero weights have log p = -inf and are never picked while positive ones remain.
    """
    import jax
    import jax.numpy as jnp

    num_samples, replacement = params
    logits = jnp.log(probs.astype(_float_for(probs.dtype)))
    if replacement:
        draws = jax.random.categorical(key, logits, axis=-1, shape=(num_samples,) + tuple(shape[:-1]))
        return jnp.moveaxis(draws, 0, -1)
    perturbed = logits + jax.random.gumbel(key, logits.shape, dtype=logits.dtype)
    return jax.lax.top_k(perturbed, num_samples)[1]


# ---- in-place fills -------------------------------------------------------------------------------------
@special(aten.cauchy_.default)
def _cauchy_(func, args, kwargs):
    median, sigma = _arg(args, kwargs, 1, "median", 0.0), _arg(args, kwargs, 2, "sigma", 1.0)
    return _fill_random(args[0], "cauchy", (float(median), float(sigma)))


@special(aten.log_normal_.default)
def _log_normal_(func, args, kwargs):
    mean, std = _arg(args, kwargs, 1, "mean", 1.0), _arg(args, kwargs, 2, "std", 2.0)
    return _fill_random(args[0], "log_normal", (float(mean), float(std)))


@special(aten.geometric_.default)
def _geometric_(func, args, kwargs):
    return _fill_random(args[0], "geometric", (float(_arg(args, kwargs, 1, "p", None)),))


# ---- normal with tensor arguments -------------------------------------------------------------------
def _meta_of(func, args, kwargs):
    """The output (shape, dtype) of `func` by PyTorch's meta kernel: device tensors become meta tensors."""
    out = func(*_to_meta(tuple(args)), **{k: _to_meta(v) for k, v in kwargs.items() if k != "generator"})
    return tuple(out.shape), out.dtype


@special(aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor)
def _normal_tensors(func, args, kwargs):
    """mean + std * z with z standard normal of the broadcast shape (the recorded arithmetic is lowered)."""
    mean, std = _arg(args, kwargs, 0, "mean", 0.0), _arg(args, kwargs, 1, "std", 1.0)
    shape, dtype = _meta_of(func, (mean, std), {})
    if isinstance(std, float) and std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    index = next(t for t in (mean, std) if isinstance(t, XlaTensor))._st.device_index
    z = random_tensor("normal", shape, dtype, (0.0, 1.0), index)
    return _broadcast(handle(aten.add.Tensor, (handle(aten.mul.Tensor, (z, std), {}), mean), {}), shape)


# ---- *_like ----------------------------------------------------------------------------------------------
def _like_draw(kind: str, params_of):
    """A handler for `rand_like`-style ops: a draw with `self`'s shape on the device `device=` names.

    Args:
      kind: the sampler.
      params_of: fn(args) -> the sampler's params, from the op's positional arguments after `self`.
    """

    def handler(func, args, kwargs):
        self, device = args[0], kwargs.get("device")
        if device is not None and torch.device(device).type != "xla":
            # Another device: handlers' `*_like` rule makes it there from a CPU stand-in.
            return _LIKE_FALLBACK(func, args, kwargs)
        index = self._st.device_index if device is None or torch.device(device).index is None \
            else device_index(device)
        dtype = kwargs.get("dtype") or self.dtype
        return random_tensor(kind, tuple(self.shape), dtype, params_of(args, dtype), index)

    return handler


_LIKE_FALLBACK = SPECIAL_HANDLERS[aten.rand_like.default]


def _randint_params(args, dtype):
    low, high = (0, args[1]) if len(args) == 2 else (args[1], args[2])
    if int(low) >= int(high):
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    return int(low), int(high)


special(aten.rand_like.default, aten.rand_like.generator)(_like_draw("uniform", lambda a, d: (0.0, 1.0)))
special(aten.randn_like.default, aten.randn_like.generator)(_like_draw("normal", lambda a, d: (0.0, 1.0)))
special(aten.randint_like.default, aten.randint_like.low_dtype, aten.randint_like.generator,
        aten.randint_like.low_generator_dtype)(_like_draw("randint", _randint_params))


# ---- multinomial and distributions with tensor parameters -----------------------------------------------
@special(aten.multinomial.default)
def _multinomial_op(func, args, kwargs):
    probs, num_samples = args[0], int(_arg(args, kwargs, 1, "num_samples", None))
    replacement = bool(_arg(args, kwargs, 2, "replacement", False))
    shape, dtype = _meta_of(func, (probs, num_samples, replacement), {})  # PyTorch's argument checks
    return random_tensor("multinomial", shape, dtype, (num_samples, replacement), probs._st.device_index,
                         extra=(probs._node(),))


def _parametrised(kind: str):
    """A handler for a draw whose parameters are its tensor arguments (of one shape and dtype, as
    `binomial` and `_sample_dirichlet`, which have no meta kernel, require; other arguments go to the CPU
    kernel, which raises or resizes as PyTorch does). The output has their shape and dtype."""

    def handler(func, args, kwargs):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not all(isinstance(t, XlaTensor) for t in tensors) \
                or len({(tuple(t.shape), t.dtype) for t in tensors}) != 1:
            return run_on_cpu(func, args, kwargs)
        shape, dtype = tuple(tensors[0].shape), tensors[0].dtype
        return random_tensor(kind, shape, dtype, None, tensors[0]._st.device_index,
                             extra=tuple(t._node() for t in tensors))

    return handler


special(aten.poisson.default)(_parametrised("poisson"))
special(aten._standard_gamma.default)(_parametrised("gamma"))
special(aten.binomial.default)(_parametrised("binomial"))
special(aten._sample_dirichlet.default)(_parametrised("dirichlet"))


@lowers(aten._standard_gamma_grad.default)
def _standard_gamma_grad(ctx, alpha, sample):
    """d sample / d alpha of a Gamma(alpha, 1) draw at fixed CDF value (implicit reparameterisation)."""
    import jax

    dtype = ctx.out_dtype
    return jax.lax.random_gamma_grad(alpha.astype(dtype), sample.astype(dtype))


# PyTorch has no meta kernel for it: elementwise, with the concentration's shape and dtype.
SHAPE_RULES[aten._standard_gamma_grad.default] = lambda self, output: torch.empty_like(self)


# ---- rrelu -------------------------------------------------------------------------------------------------
def _rrelu(self, noise, lower, upper, training):
    """(output, new noise or None): training multiplies each x <= 0 by a U(lower, upper) draw, which is
    also the noise (1 where x > 0) the backward reads; evaluation is leaky_relu with the mean slope."""
    lower, upper = float(lower), float(upper)
    if not training:
        return handle(aten.leaky_relu.default, (self, (lower + upper) / 2), {}), None
    slopes = random_tensor("uniform", tuple(self.shape), self.dtype, (lower, upper), self._st.device_index)
    nonpositive = handle(aten.le.Scalar, (self, 0), {})
    new_noise = handle(aten.where.ScalarOther, (nonpositive, slopes, 1.0), {})
    return handle(aten.mul.Tensor, (self, new_noise), {}), new_noise


def _rrelu_args(args, kwargs):
    return (args[0], args[1], _arg(args, kwargs, 2, "lower", 0.125), _arg(args, kwargs, 3, "upper", 1 / 3),
            bool(_arg(args, kwargs, 4, "training", False)))


@special(aten.rrelu_with_noise.default)
def _rrelu_with_noise(func, args, kwargs):
    out, new_noise = _rrelu(*_rrelu_args(args, kwargs))
    if new_noise is not None:
        write_into(args[1], new_noise, func)
    return out


@special(aten.rrelu_with_noise_.default)
def _rrelu_with_noise_(func, args, kwargs):
    out, new_noise = _rrelu(*_rrelu_args(args, kwargs))
    if new_noise is not None:
        write_into(args[1], new_noise, func)
    write_into(args[0], out, func)
    return args[0]


@special(aten.rrelu_with_noise_functional.default)
def _rrelu_with_noise_functional(func, args, kwargs):
    self, noise, lower, upper, training = _rrelu_args(args, kwargs)
    out, new_noise = _rrelu(self, noise, lower, upper, training)
    return out, (new_noise if new_noise is not None else handle(aten.clone.default, (noise,), {}))


@special(aten.rrelu_with_noise_backward.default)
def _rrelu_with_noise_backward(func, args, kwargs):
    """The gradient is the recorded slope: the noise when training drew one, else the mean slope."""
    names = ("grad_output", "self", "noise", "lower", "upper", "training", "self_is_result")
    grad, self, noise, lower, upper, training, self_is_result = (
        _arg(args, kwargs, i, name, None) for i, name in enumerate(names))
    if training and float(upper) - float(lower) > 1e-6:  # PyTorch's threshold for "a range was drawn from"
        return handle(aten.mul.Tensor, (grad, noise), {})
    slope = (float(lower) + float(upper)) / 2
    return handle(aten.leaky_relu_backward.default, (grad, self, slope, bool(self_is_result)), {})


# ---- fractional max pooling ------------------------------------------------------------------------------
def _starts(sample, in_size: int, out_size: int, pool: int):
    """The pooling windows' first positions along one axis, from one uniform sample per plane.

    Window i starts at floor((i + u) * alpha) - floor(u * alpha), alpha = (in - pool) / (out - 1), in the
    sample's dtype as PyTorch computes it; the last window ends at the input's end.

    Args:
      sample: (planes,) uniform draws.

    Returns:
      (planes, out_size) int32 starts.
    """
    import jax.numpy as jnp

    last = jnp.full(sample.shape + (1,), in_size - pool, jnp.int32)
    if out_size == 1:
        return last
    dtype = sample.dtype
    alpha = jnp.asarray(in_size - pool, dtype) / jnp.asarray(out_size - 1, dtype)
    i = jnp.arange(out_size - 1, dtype=dtype)
    first = ((i + sample[:, None]) * alpha).astype(jnp.int32) - (sample[:, None] * alpha).astype(jnp.int32)
    return jnp.concatenate([first, last], axis=1)


def _fractional_max_pool(ctx, x, kernel_size, output_size, samples):
    """Max over each plane's windows, and the flat (within the plane) index of each maximum."""
    import jax.numpy as jnp

    d = len(kernel_size)
    unbatched = x.ndim == d + 1
    if unbatched:
        x = x[None]
    batch, channels, spatial = x.shape[0], x.shape[1], x.shape[2:]
    planes = batch * channels
    x = x.reshape((planes,) + spatial)
    samples = samples.reshape(planes, d)
    # Sample 0 spaces the last axis (W) of a 2-d pool but the first (T) of a 3-d one, as in PyTorch.
    sample_axis = [1, 0] if d == 2 else [0, 1, 2]
    positions = []
    for axis in range(d):
        starts = _starts(samples[:, sample_axis[axis]], spatial[axis], output_size[axis], kernel_size[axis])
        pos = starts[:, :, None] + jnp.arange(kernel_size[axis], dtype=jnp.int32)  # (planes, out, k)
        positions.append(pos)
        index_shape = [planes] + [1] * d
        index_shape[1 + axis] = output_size[axis] * kernel_size[axis]
        x = jnp.take_along_axis(x, pos.reshape(index_shape), axis=1 + axis)
    # x: (planes, o0*k0, o1*k1, ...) -> (planes, o0, o1, ..., k0*k1*...)
    x = x.reshape((planes,) + tuple(v for pair in zip(output_size, kernel_size) for v in pair))
    order = [0] + [1 + 2 * a for a in range(d)] + [2 + 2 * a for a in range(d)]
    windows = x.transpose(order).reshape((planes,) + tuple(output_size) + (-1,))
    best = jnp.argmax(windows, axis=-1)  # the first maximum (NaN counts as the maximum)
    values = jnp.take_along_axis(windows, best[..., None], axis=-1)[..., 0]
    offsets = jnp.unravel_index(best, tuple(kernel_size))
    flat = jnp.zeros(best.shape, jnp.int64)
    for axis in range(d):
        # position along `axis` of each output's maximum: its window's start plus the offset in the window
        grid = positions[axis][:, :, 0]
        expand = [slice(None)] + [None] * d
        expand[1 + axis] = slice(None)
        coord = grid[tuple(expand)] + offsets[axis]
        flat = flat * spatial[axis] + coord
    out_shape = (batch, channels) + tuple(output_size)
    values, flat = values.reshape(out_shape), flat.reshape(out_shape)
    if unbatched:
        values, flat = values[0], flat[0]
    return values, flat


def _fractional_max_pool_backward(ctx, grad_output, x, kernel_size, output_size, indices):
    """Each output's gradient added at its maximum's position (windows may overlap)."""
    import jax.numpy as jnp

    d = len(kernel_size)
    spatial = x.shape[-d:]
    planes, size = math.prod(x.shape[:-d]), math.prod(spatial)
    grad = grad_output.reshape(planes, -1)
    rows = jnp.arange(planes)[:, None]
    out = jnp.zeros((planes, size), grad.dtype).at[rows, indices.reshape(planes, -1)].add(grad)
    return out.reshape(x.shape)


lowers(aten.fractional_max_pool2d.default, aten.fractional_max_pool3d.default)(_fractional_max_pool)
lowers(aten.fractional_max_pool2d_backward.default,
       aten.fractional_max_pool3d_backward.default)(_fractional_max_pool_backward)
# PyTorch has no meta kernel for the 3-d backward: the gradient has the input's shape and dtype.
SHAPE_RULES[aten.fractional_max_pool3d_backward.default] = \
    lambda grad_output, self, kernel_size, output_size, indices: torch.empty_like(self)


# ---- randperm ----------------------------------------------------------------------------------------------
@sampler("permutation")
def _permutation(key, shape, dtype, params):
    import jax

    (n,) = shape
    return jax.random.permutation(key, n)


def _randperm(args, kwargs, device_index):
    """`torch.randperm(n, device='xla')`: a permutation drawn from the device RNG (PyTorch's default
    dtype int64; any integer or floating dtype PyTorch accepts)."""
    n = int(args[0])
    dtype = kwargs.get("dtype") or torch.int64
    if kwargs.get("generator") is not None or n < 0 or dtype.is_complex or dtype == torch.bool:
        # A CPU generator's stream, or arguments PyTorch rejects: the CPU path raises or draws as PyTorch does.
        return run_on_cpu(aten.randperm.default, args, kwargs)
    return random_tensor("permutation", (n,), dtype, (), device_index)


FACTORY_HANDLERS[aten.randperm.default] = _randperm
