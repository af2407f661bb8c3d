"""torch.fft, through jnp.fft.

Every `torch.fft` function (fft, rfft, hfft, their inverses and n-dimensional forms, stft/istft)
reaches the device as one of three aten ops over a list of dims:

* `_fft_r2c(x, dim, normalization, onesided)`: forward transform of a real input; `onesided` keeps
  only the first n//2+1 bins of the last dim in `dim` (`rfftn`), else all of them (`fftn`).
* `_fft_c2c(z, dim, normalization, forward)`: complex to complex, forward (e^-2πi) or inverse (e^+2πi).
* `_fft_c2r(z, dim, normalization, last_dim_size)`: inverse transform of a Hermitian-symmetric input
  given by its first last_dim_size//2+1 bins along the last dim of `dim` (`irfftn`), real output.

`normalization` scales the result by 1 (0), 1/sqrt(n) (1) or 1/n (2), n being the product of the
transformed sizes, whatever the direction. jnp.fft instead names which direction carries the scaling
("backward": the inverse is scaled by 1/n; "forward": the forward is; "ortho": both by 1/sqrt(n)),
which `_jnp_norm` translates.

Autograd's formulas for these three ops call the same three ops (and views, `new_zeros`,
`slice_scatter`...), so gradients run on the device too.
"""

from __future__ import annotations

import jax.numpy as jnp

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten

# PyTorch's fft_norm_mode values.
_NONE, _BY_ROOT_N, _BY_N = 0, 1, 2


def _jnp_norm(normalization: int, forward: bool) -> str:
    """The jnp.fft `norm` giving PyTorch's `normalization` for a transform in this direction."""
    if normalization == _BY_ROOT_N:
        return "ortho"
    if normalization not in (_NONE, _BY_N):
        raise ValueError(f"unknown fft normalization mode {normalization}")
    unscaled = normalization == _NONE
    if forward:
        return "backward" if unscaled else "forward"
    return "forward" if unscaled else "backward"


def _axes(x, dim) -> tuple:
    return tuple(d % x.ndim for d in dim)


@lowers(aten._fft_r2c.default)
def _fft_r2c(ctx, x, dim, normalization, onesided):
    """Forward FFT of a real input; one-sided (`rfftn`) or full (`fftn`) along the last of `dim`."""
    axes = _axes(x, dim)
    x = x.astype(jnp.finfo(ctx.out_dtype).dtype)  # the real dtype of the complex output
    if not axes:
        return x
    norm = _jnp_norm(normalization, forward=True)
    if onesided:
        return jnp.fft.rfftn(x, axes=axes, norm=norm)
    return jnp.fft.fftn(x.astype(ctx.out_dtype), axes=axes, norm=norm)


@lowers(aten._fft_c2c.default)
def _fft_c2c(ctx, z, dim, normalization, forward):
    """Complex FFT over `dim`, forward or inverse."""
    axes = _axes(z, dim)
    z = z.astype(ctx.out_dtype)
    if not axes:
        return z
    norm = _jnp_norm(normalization, forward)
    transform = jnp.fft.fftn if forward else jnp.fft.ifftn
    return transform(z, axes=axes, norm=norm)


@lowers(aten._fft_c2r.default)
def _fft_c2r(ctx, z, dim, normalization, last_dim_size):
    """Inverse FFT of a Hermitian-symmetric input to a real output of `last_dim_size` along the last of `dim`.

    Only the first last_dim_size//2+1 bins of the last dim are read, as in PyTorch.
    """
    axes = _axes(z, dim)
    if not axes:
        return jnp.real(z)
    sizes = [z.shape[a] for a in axes[:-1]] + [last_dim_size]
    norm = _jnp_norm(normalization, forward=False)
    return jnp.fft.irfftn(z, s=sizes, axes=axes, norm=norm)
