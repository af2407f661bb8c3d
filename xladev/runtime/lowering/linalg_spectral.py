"""Spectral decompositions and matrix functions: SVD, eigh, eig, and the matrix exponential.

Through jnp.linalg, lax.linalg and jax.scipy.linalg. Singular and eigen vectors are unique only up to
sign (phase for complex), as they are in PyTorch: the CPU and the device may return different ones,
and PyTorch's backward formulas only use gauge-invariant combinations. Outputs PyTorch does not
compute (U and Vh when compute_uv=False, eigenvectors when compute_v=False) are its empty placeholders.
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

import torch

from xladev.runtime.lowering.linalg_factor import empty_output
from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten._linalg_svd.default)
def _linalg_svd(ctx, a, full_matrices=False, compute_uv=True, driver=None):
    # `driver` selects a cuSOLVER routine in PyTorch; jax picks its own (the result is the same SVD).
    if not compute_uv:
        return empty_output(ctx, 0), jnp.linalg.svd(a, compute_uv=False), empty_output(ctx, 2)
    u, s, vh = jnp.linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


@lowers(aten._linalg_eigh.default)
def _linalg_eigh(ctx, a, UPLO="L", compute_v=True):
    # Only the UPLO triangle is read, as LAPACK's syevd does; eigenvalues ascend, as in PyTorch.
    v, w = lax.linalg.eigh(a, lower=UPLO.upper() == "L", symmetrize_input=False)  # (vectors, values)
    return w, (v if compute_v else empty_output(ctx, 1))


@lowers(aten.linalg_eig.default)
def _linalg_eig(ctx, a):
    # LAPACK's geev (jax's CPU path) normalises each eigenvector to unit norm with its largest
    # component real, as PyTorch's CPU kernel does.
    w, v = lax.linalg.eig(a, compute_left_eigenvectors=False, compute_right_eigenvectors=True)
    return w, v


@lowers(aten.linalg_matrix_exp.default)
def _linalg_matrix_exp(ctx, a):
    if a.shape[-1] == 0:
        return a
    return jsl.expm(a)
