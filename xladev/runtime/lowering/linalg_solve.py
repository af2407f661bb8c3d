"""Solvers, inverses and determinants: triangular, Cholesky, LU and general solves, least squares,
pseudo-inverse, det and slogdet, through lax.linalg and jax.scipy.linalg.

Batch dims broadcast as in PyTorch. The LU-based ops return the LU factor and pivots PyTorch's
backward formulas read back (`linalg_lu_solve` on them): packed LU, 1-based int32 pivots.
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

import torch

from xladev.runtime.lowering.linalg_factor import broadcast_batch, empty_output, lu_factor, mH
from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES, MetaUnsupported

aten = torch.ops.aten


# ---- triangular ---------------------------------------------------------------------------------------
def triangular(a, b, *, upper: bool, left: bool = True, transpose: bool = False, unit: bool = False):
    """Solves op(A) X = B (left) or X op(A) = B with A triangular; only A's `upper`/lower triangle is read."""
    a, b = broadcast_batch(a, b)
    return lax.linalg.triangular_solve(a, b, left_side=left, lower=not upper, transpose_a=transpose,
                                       unit_diagonal=unit)


@lowers(aten.linalg_solve_triangular.default)
def _linalg_solve_triangular(ctx, a, b, *, upper, left=True, unitriangular=False):
    return triangular(a, b, upper=upper, left=left, unit=unitriangular)


@lowers(aten.triangular_solve.default)
def _triangular_solve(ctx, b, a, upper=True, transpose=False, unitriangular=False):
    x = triangular(a, b, upper=upper, transpose=transpose, unit=unitriangular)
    return x, a  # the second output is a copy of A (broadcast to the batch shape by graph_lowering._fit)


# ---- Cholesky-based ---------------------------------------------------------------------------------------
@lowers(aten.cholesky_solve.default)
def _cholesky_solve(ctx, b, factor, upper=False):
    factor, b = broadcast_batch(factor, b)
    return jsl.cho_solve((factor, not upper), b)


@lowers(aten.cholesky_inverse.default)
def _cholesky_inverse(ctx, factor, upper=False):
    eye = jnp.broadcast_to(jnp.eye(factor.shape[-1], dtype=factor.dtype), factor.shape)
    return jsl.cho_solve((factor, not upper), eye)


# ---- LU-based -------------------------------------------------------------------------------------------
def lu_solve(lu, pivots, b, *, left: bool = True, adjoint: bool = False):
    """X with op(A) X = B (left) or X op(A) = B, A = P L U given by its packed LU and 1-based pivots.

    op is the conjugate transpose when `adjoint`. `b` is a batch of matrices.
    """
    if not left:
        # X op(A) = B  <=>  op(A)^H X^H = B^H.
        return mH(lu_solve(lu, pivots, mH(b), left=True, adjoint=not adjoint))
    lu, b = broadcast_batch(lu, b)
    pivots = jnp.broadcast_to(pivots, lu.shape[:-2] + pivots.shape[-1:])
    return jsl.lu_solve((lu, pivots.astype(jnp.int32) - 1), b, trans=2 if adjoint else 0)


@lowers(aten.linalg_lu_solve.default)
def _linalg_lu_solve(ctx, lu, pivots, b, *, left=True, adjoint=False):
    return lu_solve(lu, pivots, b, left=left, adjoint=adjoint)


def _is_vector_rhs(a, b) -> bool:
    """PyTorch's rule for `solve(A, B)`: B is a (batch of) vector(s) when it is 1-D or A's shape minus n."""
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and tuple(b.shape) == tuple(a.shape[:-1]))


@lowers(aten._linalg_solve_ex.default)
def _linalg_solve_ex(ctx, a, b, *, left=True, check_errors=False):
    # PyTorch returns the LU of A itself here, for every layout of A (its backward solves with adjoint).
    lu, pivots, info = lu_factor(a)
    vector = _is_vector_rhs(a, b)
    x = lu_solve(lu, pivots, b[..., None] if vector else b, left=left)
    return (x[..., 0] if vector else x), lu, pivots, info


@lowers(aten.linalg_inv_ex.default)
def _linalg_inv_ex(ctx, a, *, check_errors=False):
    lu, pivots, info = lu_factor(a)
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return lu_solve(lu, pivots, eye), info


def _no_check_errors(op):
    """A shape rule sending `check_errors=True` to the CPU: a lowering cannot raise. torch.linalg's
    functions pass False and check separately (the special handler in linalg.py)."""

    def rule(*args, **kwargs):
        if kwargs.get("check_errors"):
            raise MetaUnsupported(f"{op} with check_errors=True raises from inside the op")
        return op(*args, **kwargs)

    return rule


for _op in (aten._linalg_solve_ex.default, aten.linalg_inv_ex.default):
    SHAPE_RULES[_op] = _no_check_errors(_op)


def _lu_sign(lu, pivots):
    """det(P) * prod(diag(U)) / |prod(diag(U))| pieces: (parity sign, diagonal of U)."""
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    swaps = jnp.sum(pivots != jnp.arange(1, pivots.shape[-1] + 1, dtype=pivots.dtype), axis=-1)
    return jnp.where(swaps % 2 == 1, -1, 1).astype(lu.dtype), diag


@lowers(aten._linalg_det.default)
def _linalg_det(ctx, a):
    # det from the returned LU itself (as PyTorch does), so the three outputs agree.
    lu, pivots, _ = lu_factor(a)
    parity, diag = _lu_sign(lu, pivots)
    return parity * jnp.prod(diag, axis=-1), lu, pivots


@lowers(aten._linalg_slogdet.default)
def _linalg_slogdet(ctx, a):
    lu, pivots, _ = lu_factor(a)
    parity, diag = _lu_sign(lu, pivots)
    size = jnp.abs(diag)
    if jnp.iscomplexobj(diag):
        phase = jnp.prod(jnp.where(size == 0, 0, diag / jnp.where(size == 0, 1, size)), axis=-1)
    else:
        phase = jnp.prod(jnp.sign(diag), axis=-1)
    return parity * phase, jnp.sum(jnp.log(size), axis=-1), lu, pivots


# ---- least squares and pseudo-inverse ----------------------------------------------------------------------
def _threshold_svd(a, atol, rtol, hermitian: bool):
    """Pseudo-inverse of `a` (..., m, n): singular values <= max(atol, rtol * s_max) count as zero."""
    if hermitian:
        w, v = jnp.linalg.eigh(a, symmetrize_input=False)
        s, u, vh = jnp.abs(w), v, mH(v * jnp.sign(w)[..., None, :].astype(v.dtype))
    else:
        u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    s_max = jnp.max(s, axis=-1, initial=0.0, keepdims=True)
    cutoff = jnp.maximum(atol[..., None], rtol[..., None] * s_max)  # float64 (see _tolerances)
    keep = (s > cutoff) & (s > 0)
    s_inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(u.dtype)
    return jnp.matmul(mH(vh) * s_inv[..., None, :], mH(u))


def _tolerances(a, atol, rtol):
    """PyTorch's pinv tolerances, in float64 as PyTorch keeps them: atol defaults to 0; rtol to
    eps * max(m, n), or to 0 where a positive atol was given."""
    f64 = jnp.float64
    default = jnp.asarray(jnp.finfo(a.dtype).eps * max(a.shape[-2:]), f64)
    if rtol is None:
        rtol = default if atol is None else jnp.where(jnp.asarray(atol) > 0, 0.0, default)
    return jnp.asarray(0.0 if atol is None else atol, f64), jnp.asarray(rtol, f64)


@lowers(aten.linalg_pinv.atol_rtol_tensor)
def _linalg_pinv(ctx, a, *, atol=None, rtol=None, hermitian=False):
    atol, rtol = _tolerances(a, atol, rtol)
    batch = a.shape[:-2]
    atol = jnp.broadcast_to(atol, jnp.broadcast_shapes(batch, atol.shape))
    rtol = jnp.broadcast_to(rtol, jnp.broadcast_shapes(batch, rtol.shape))
    a = jnp.broadcast_to(a, jnp.broadcast_shapes(atol.shape, rtol.shape) + a.shape[-2:])
    return _threshold_svd(a, atol, rtol, hermitian)


def _lstsq_driver(driver):
    """The CPU's default is gelsy; the driver only changes which outputs are computed (see below)."""
    return driver or "gelsy"


@lowers(aten.linalg_lstsq.default)
def _linalg_lstsq(ctx, a, b, rcond=None, *, driver=None):
    driver = _lstsq_driver(driver)
    vector = b.ndim == a.ndim - 1
    if vector:
        b = b[..., None]
    a, b = broadcast_batch(a, b)
    m, n = a.shape[-2:]
    if driver == "gels":
        # gels assumes full rank and solves through a QR (of A^H when m < n), as LAPACK's gels does;
        # its residuals (m > n) are the squared norms of the rows of Q^H B below n.
        if m >= n:
            q, r = lax.linalg.qr(a, full_matrices=True)
            c = jnp.matmul(mH(q), b)
            x = lax.linalg.triangular_solve(r[..., :n, :], c[..., :n, :], left_side=True, lower=False)
            resid = jnp.sum(jnp.abs(c[..., n:, :]) ** 2, axis=-2) if m > n else empty_output(ctx, 1)
        else:
            q, r = lax.linalg.qr(mH(a), full_matrices=False)
            y = lax.linalg.triangular_solve(r, b, left_side=True, lower=False, transpose_a=True,
                                            conjugate_a=True)
            x, resid = jnp.matmul(q, y), empty_output(ctx, 1)
        return (x[..., 0] if vector else x), resid, empty_output(ctx, 2), empty_output(ctx, 3)
    # gelsy, gelsd, gelss: the minimum-norm solution, rank from singular values > rcond * s_max.
    if rcond is None or rcond < 0:
        rcond = jnp.finfo(a.dtype).eps * max(m, n)
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    keep = s > rcond * jnp.max(s, axis=-1, initial=0.0, keepdims=True)
    s_inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(a.dtype)
    x = jnp.matmul(mH(vh) * s_inv[..., None, :], jnp.matmul(mH(u), b))
    rank = jnp.sum(keep, axis=-1)
    sv = s if driver in ("gelsd", "gelss") else empty_output(ctx, 3)
    return (x[..., 0] if vector else x), empty_output(ctx, 1), rank, sv


def _lstsq_shape(a, b, rcond=None, *, driver=None):
    """linalg_lstsq has no meta kernel: the CPU's output shapes, per driver.

    Raises:
      MetaUnsupported: gelsd/gelss with m > n, whose residuals exist only when every matrix has full
        rank (a data-dependent shape).
    """
    torch._check(a.dim() >= 2, lambda: "torch.linalg.lstsq: input must have at least 2 dimensions.")
    driver = _lstsq_driver(driver)
    torch._check(driver in ("gels", "gelsy", "gelsd", "gelss"),
                 lambda: f"torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    m, n = a.shape[-2:]
    vector = b.dim() == a.dim() - 1
    torch._check(b.shape[-2 + vector] == m if b.dim() else False,
                 lambda: "torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    if driver in ("gelsd", "gelss") and m > n:
        raise MetaUnsupported("lstsq residuals of gelsd/gelss exist only for full-rank inputs")
    b_batch = b.shape[:-1] if vector else b.shape[:-2]
    batch = torch.broadcast_shapes(a.shape[:-2], b_batch)
    k = None if vector else b.shape[-1]
    real = a.real.dtype if a.is_complex() else a.dtype
    solution = a.new_empty(batch + ((n,) if vector else (n, k)))
    residuals = a.new_empty((0,), dtype=real)
    if driver == "gels" and m > n:
        residuals = a.new_empty(batch + ((1,) if vector else (k,)), dtype=real)
    rank = a.new_empty((0,) if driver == "gels" else batch, dtype=torch.int64)
    sv = a.new_empty(batch + (min(m, n),) if driver in ("gelsd", "gelss") else (0,), dtype=real)
    return solution, residuals, rank, sv


SHAPE_RULES[aten.linalg_lstsq.default] = _lstsq_shape
