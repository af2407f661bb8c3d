"""Factorisations: Cholesky, LU, QR and the Householder (geqrf) form, through lax.linalg.

PyTorch returns LAPACK's conventions, which these lowerings reproduce where jax's differ:
  - `info` tensors are int32, one per matrix: 0 on success, else the 1-based index LAPACK reports
    (the leading minor that is not positive-definite for Cholesky, the first exactly-zero pivot of U
    for LU). jax reports neither (its Cholesky fills a failed factor with NaN), so both are derived
    here from the factor itself.
  - LU pivots are LAPACK's 1-based row swaps (jax's are 0-based) and the LU factor is packed as getrf
    packs it (unit-lower L below the diagonal, U on and above it), which is also jax's layout.
  - geqrf's (a, tau) is LAPACK's Householder form; jax's CPU and GPU lowerings call geqrf themselves.
Shared helpers (batch broadcasting, empty placeholder outputs, LU pivots → permutation) live here and
are imported by the other linalg_* modules.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES, MetaUnsupported

aten = torch.ops.aten
linalg = lax.linalg


# ---- shared helpers ---------------------------------------------------------------------------------
def mH(x):
    """The conjugate transpose of the last two dims (the plain transpose for real arrays)."""
    x = jnp.swapaxes(x, -1, -2)
    return jnp.conj(x) if jnp.iscomplexobj(x) else x


def broadcast_batch(a, b, a_core: int = 2, b_core: int = 2):
    """`a` and `b` with their leading (batch) dims broadcast together, as PyTorch's linalg ops do.

    Args:
      a_core, b_core: how many trailing dims of each are the matrix (or vector) itself.
    """
    batch = jnp.broadcast_shapes(a.shape[:a.ndim - a_core], b.shape[:b.ndim - b_core])
    return (jnp.broadcast_to(a, batch + a.shape[a.ndim - a_core:]),
            jnp.broadcast_to(b, batch + b.shape[b.ndim - b_core:]))


def empty_output(ctx, index: int):
    """The placeholder PyTorch returns for an output not computed (e.g. U when compute_uv=False)."""
    meta = ctx.meta[index]
    return jnp.zeros(meta.shape, ctx.dtype_of(index))


def lu_factor(a):
    """(packed LU, 1-based int32 pivots, int32 info) of `a` (..., m, n), as LAPACK's getrf gives them."""
    lu, pivots, _ = linalg.lu(a)
    return lu, pivots.astype(jnp.int32) + 1, lu_info(lu)


def lu_info(lu):
    """getrf's info: the 1-based index of the first exactly-zero diagonal entry of U, or 0."""
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    if diag.shape[-1] == 0:  # empty matrices factor trivially
        return jnp.zeros(diag.shape[:-1], jnp.int32)
    zero = diag == 0
    first = jnp.argmax(zero, axis=-1).astype(jnp.int32) + 1
    return jnp.where(jnp.any(zero, axis=-1), first, 0).astype(jnp.int32)


def permutation_matrix(pivots, m: int, dtype):
    """P (..., m, m) with A = P L U, from 1-based LAPACK pivots (..., k)."""
    perm = linalg.lu_pivots_to_permutation(pivots.astype(jnp.int32) - 1, m)
    # Row perm[i] of A is row i of L U, so column i of P is the unit vector e_{perm[i]}.
    return (perm[..., None, :] == jnp.arange(m, dtype=perm.dtype)[:, None]).astype(dtype)


def unpack_lu(lu):
    """(L unit lower-triangular (..., m, k), U upper-triangular (..., k, n)) from a packed LU factor."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    lower = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
    return lower, jnp.triu(lu[..., :k, :])


# ---- Cholesky ---------------------------------------------------------------------------------------
def _first_failing_minor(a):
    """potrf's info for matrices (..., n, n) whose lower triangle defines a Hermitian matrix.

    jax's Cholesky says only that a factorisation failed (its factor is NaN). LAPACK's info is the
    order of the first leading minor that is not positive-definite: the first column j at which the
    pivot a_jj - sum_k<j |l_jk|^2 is not positive (or is NaN). This is that column-by-column
    elimination; it runs only when some matrix of the batch failed (see `_cholesky_lower`).
    """
    n = a.shape[-1]
    rows = jnp.arange(n)
    real = jnp.real(a) if jnp.iscomplexobj(a) else a

    def column(j, state):
        low, info = state
        row = low[..., j, :]  # l_jk for k < j; zero from column j on
        pivot = real[..., j, j] - jnp.sum(jnp.abs(row) ** 2, axis=-1)
        bad = ~(pivot > 0)
        info = jnp.where((info == 0) & bad, j + 1, info)
        diag = jnp.sqrt(jnp.where(bad, 1, pivot))
        below = (a[..., :, j] - jnp.einsum("...ik,...k->...i", low, jnp.conj(row))) / diag[..., None]
        col = jnp.where(rows > j, below, jnp.where(rows == j, diag[..., None].astype(a.dtype), 0))
        return low.at[..., :, j].set(col), info

    zeros = jnp.zeros(a.shape[:-2], jnp.int32)
    return lax.fori_loop(0, n, column, (jnp.zeros_like(a), zeros))[1]


def _cholesky_lower(a):
    """(L, info) for the Hermitian matrices given by the lower triangles of `a` (..., n, n)."""
    low = linalg.cholesky(a, symmetrize_input=False)
    if a.shape[-1] == 0:
        return low, jnp.zeros(a.shape[:-2], jnp.int32)
    failed = jnp.any(jnp.isnan(low))
    info = lax.cond(failed, _first_failing_minor, lambda x: jnp.zeros(x.shape[:-2], jnp.int32), a)
    return low, info


def cholesky_factor(a, upper: bool):
    """(factor, info): L with A = L L^H from A's lower triangle, or U = L^H from its upper triangle."""
    if upper:
        # The Hermitian matrix that A's upper triangle defines has A^H's lower triangle.
        low, info = _cholesky_lower(mH(a))
        return mH(low), info
    return _cholesky_lower(a)


@lowers(aten.linalg_cholesky_ex.default)
def _linalg_cholesky_ex(ctx, a, upper=False, check_errors=False):
    # check_errors=True only reaches the device from code calling the aten op directly (torch.linalg
    # calls _linalg_check_errors itself): a lowering cannot raise, so the shape rule below sends that
    # case to the CPU. torch.cholesky, which checks inside its kernel, is a special handler (linalg.py).
    return cholesky_factor(a, upper)


def _cholesky_ex_shape(a, upper=False, check_errors=False):
    if check_errors:
        raise MetaUnsupported("linalg_cholesky_ex(check_errors=True) raises from inside the op")
    return aten.linalg_cholesky_ex.default(a, upper=upper)


SHAPE_RULES[aten.linalg_cholesky_ex.default] = _cholesky_ex_shape


# ---- LU -----------------------------------------------------------------------------------------------
def _no_pivot_lu(*args, **kwargs):
    """LU without pivoting has no jax implementation (and the CPU rejects it): leave it to the CPU."""
    raise MetaUnsupported("LU without pivoting")


def _lu_shape(a, *, pivot=True):
    if not pivot:
        _no_pivot_lu()
    return aten.linalg_lu.default(a, pivot=pivot)


def _lu_factor_ex_shape(a, *, pivot=True, check_errors=False):
    if not pivot or check_errors:
        raise MetaUnsupported("linalg_lu_factor_ex without pivoting, or raising from inside the op")
    return aten.linalg_lu_factor_ex.default(a, pivot=pivot)


SHAPE_RULES[aten.linalg_lu.default] = _lu_shape
SHAPE_RULES[aten.linalg_lu_factor_ex.default] = _lu_factor_ex_shape


@lowers(aten.linalg_lu_factor_ex.default)
def _linalg_lu_factor_ex(ctx, a, pivot=True, check_errors=False):
    return lu_factor(a)


@lowers(aten.linalg_lu.default)
def _linalg_lu(ctx, a, pivot=True):
    lu, pivots, _ = lu_factor(a)
    lower, upper = unpack_lu(lu)
    return permutation_matrix(pivots, a.shape[-2], a.dtype), lower, upper


@lowers(aten.lu_unpack.default)
def _lu_unpack(ctx, lu, pivots, unpack_data=True, unpack_pivots=True):
    lower, upper = unpack_lu(lu) if unpack_data else (empty_output(ctx, 1), empty_output(ctx, 2))
    if not unpack_pivots:
        return empty_output(ctx, 0), lower, upper
    return permutation_matrix(pivots, lu.shape[-2], lu.dtype), lower, upper


# ---- QR and the Householder form ------------------------------------------------------------------------
@lowers(aten.linalg_qr.default)
def _linalg_qr(ctx, a, mode="reduced"):
    # jax's QR is LAPACK's geqrf + orgqr (cuSOLVER's on GPUs): R's diagonal has LAPACK's signs.
    q, r = linalg.qr(a, full_matrices=mode == "complete")
    if mode == "r":
        return empty_output(ctx, 0), r
    return q, r


def _geqrf_impl():
    """jax's geqrf: jax exposes it only under jax._src (its QR is built on it), hence the guard."""
    try:
        from jax._src.lax.linalg import geqrf
    except ImportError:  # a jax without it: geqrf stays on the CPU (no lowering is registered)
        return None
    return geqrf


_geqrf = _geqrf_impl()
if _geqrf is not None:
    @lowers(aten.geqrf.default)
    def _lower_geqrf(ctx, a):
        return _geqrf(a)

    def _geqrf_shape(a):
        """geqrf has no meta kernel: a keeps its shape, tau has one entry per reflector."""
        torch._check(a.dim() >= 2, lambda: f"geqrf: The input tensor A must have at least 2 dimensions.")
        m, n = a.shape[-2:]
        return torch.empty_like(a), a.new_empty(a.shape[:-2] + (min(m, n),))

    SHAPE_RULES[aten.geqrf.default] = _geqrf_shape


@lowers(aten.linalg_householder_product.default)
def _householder_product(ctx, a, tau):
    a, tau = broadcast_batch(a, tau, 2, 1)
    return linalg.householder_product(a, tau)


@lowers(aten.ormqr.default)
def _ormqr(ctx, a, tau, c, left=True, transpose=False):
    batch = jnp.broadcast_shapes(a.shape[:-2], tau.shape[:-1], c.shape[:-2])
    a = jnp.broadcast_to(a, batch + a.shape[-2:])
    tau = jnp.broadcast_to(tau, batch + tau.shape[-1:])
    c = jnp.broadcast_to(c, batch + c.shape[-2:])
    # PyTorch's `transpose` applies Q^H for complex inputs, as LAPACK's unmqr 'C' does.
    return linalg.ormqr(a, tau, c, left=left, transpose=transpose)
