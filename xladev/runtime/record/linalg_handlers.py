"""torch.linalg and the older linear-algebra ops, through jnp.linalg, jax.scipy.linalg and lax.linalg.

The lowerings live in three modules of `lowering/`: linalg_factor (Cholesky, LU, QR, Householder),
linalg_solve (triangular, Cholesky, LU and general solves, inverse, determinants, least squares,
pseudo-inverse) and linalg_spectral (SVD, eigendecompositions, matrix exponential).

This module holds the special handlers: what must raise PyTorch's errors, and what depends on a
tensor's strides. PyTorch's linalg functions call an `_ex` op, which returns an `info` tensor
instead of raising, then `_linalg_check_errors(info, ...)`, which reads `info` on the host and
raises (CUDA syncs there too). On xla the check reads `info` back from the device (one small
transfer, with its cause) and runs PyTorch's own check on that CPU copy, so the exception type and
wording are PyTorch's. The `_ex` functions do not check: PyTorch's advice for avoiding the sync
holds on xla too.

Not lowered: `linalg_ldl_factor_ex` and `linalg_ldl_solve` (jax has no Bunch-Kaufman factorisation,
and LAPACK's sytrf output format cannot be produced from anything jax offers); they run on the CPU.
"""

from __future__ import annotations

import torch

from xladev.runtime.record.dispatch import handle, handle_regular
from xladev.runtime.record.special_handlers import special
from xladev.runtime.graph.meta import scalar_type_name
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.execute.transfers import download

aten = torch.ops.aten


def check_errors(info, api_name: str, is_matrix: bool) -> None:
    """Reads `info` back (if on xla) and raises PyTorch's error when it is nonzero.

    Raises:
      torch.linalg.LinAlgError (or whatever PyTorch raises for this info).
    """
    if isinstance(info, XlaTensor):
        info = download([info], f"{api_name}: reading info to check for errors")[0]
    aten._linalg_check_errors.default(info, api_name, is_matrix=is_matrix)


# Eager's CPU kernels (and CUDA's) refuse half and bfloat16 inputs to these: the same error at the call, where jax
# would fail only when the graph compiles. op -> the kernel eager names.
_LOW_PRECISION_KERNELS = {
    aten._linalg_eigh.default: "linalg_eigh_cpu", aten._linalg_svd.default: "linalg_svd_cpu",
    aten.linalg_qr.default: "geqrf_cpu", aten.geqrf.default: "geqrf_cpu",
    aten.linalg_cholesky_ex.default: "cholesky_cpu", aten._linalg_det.default: "lu_cpu",
    aten._linalg_solve_ex.default: "lu_cpu", aten.linalg_lu_factor_ex.default: "lu_cpu",
    aten.linalg_lu.default: "lu_cpu", aten.linalg_eig.default: "linalg_eig_out_cpu",
    aten.triangular_solve.default: "triangular_solve_cpu", aten.linalg_solve_triangular.default: "triangular_solve_cpu",
    aten.cholesky_solve.default: "cholesky_solve_cpu", aten.cholesky_inverse.default: "cholesky_inverse_out_cpu",
    aten.linalg_householder_product.default: "orgqr_cpu", aten.linalg_lu_solve.default: "linalg.lu_solve_cpu",
    aten.ormqr.default: "ormqr_cpu",
}
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _refuse_low_precision(func, args) -> None:
    """Raises eager's error for a half or bfloat16 input to a factorisation or solve."""
    a = args[0]
    if not isinstance(a, torch.Tensor) or a.dtype not in _LOW_PRECISION:
        return
    if func is aten.linalg_lstsq.default:
        raise RuntimeError("This function doesn't handle types other than float and double")
    raise NotImplementedError(f'"{_LOW_PRECISION_KERNELS[func]}" not implemented for \'{scalar_type_name(a.dtype)}\'')


# `_linalg_det` has a handler of its own, which checks; deprecated `cholesky` runs as `linalg_cholesky_ex`, which
# is checked here.
@special(*[op for op in _LOW_PRECISION_KERNELS if op is not aten._linalg_det.default], aten.linalg_lstsq.default)
def _low_precision_checked(func, args, kwargs):
    _refuse_low_precision(func, args)
    return handle_regular(func, args, kwargs)


@special(aten._linalg_check_errors.default)
def _linalg_check_errors(func, args, kwargs):
    info, api_name = args[0], kwargs.get("api_name", args[1] if len(args) > 1 else None)
    check_errors(info, api_name, kwargs["is_matrix"])


@special(aten.cholesky.default)
def _cholesky(func, args, kwargs):
    """Deprecated `torch.cholesky`: PyTorch's kernel factors and checks `info` in one op, which a
    lowering cannot do (it cannot raise), so it runs as its two halves: the lowered
    `linalg_cholesky_ex`, then the check (autograd has already recorded cholesky's own backward)."""
    a = args[0]
    upper = kwargs.get("upper", args[1] if len(args) > 1 else False)
    torch._check(a.dim() >= 2, lambda: "cholesky: The input tensor A must have at least 2 dimensions.")
    factor, info = handle(aten.linalg_cholesky_ex.default, (a,), {"upper": upper})
    check_errors(info, "cholesky", a.dim() == 2)
    return factor


@special(aten._linalg_det.default, aten._linalg_slogdet.default)
def _determinant(func, args, kwargs):
    """`_linalg_det` / `_linalg_slogdet` with PyTorch's choice of which matrix the LU output factors.

    For a contiguous real A, PyTorch factors A^T (LAPACK's column-major view of A's memory), and the
    backward reads A.is_contiguous() to know which one it was given. Determinants of A^T and A are
    equal, so the op is recorded on A^T in that case: the saved LU and pivots are then those the
    backward expects, whatever A's strides.
    """
    a = args[0]
    if func is aten._linalg_det.default:
        _refuse_low_precision(func, args)
    if isinstance(a, XlaTensor) and a.is_contiguous() and not a.is_complex() and a.dim() >= 2:
        a = handle(aten.transpose.int, (a, -2, -1), {})
    return handle_regular(func, (a,) + tuple(args[1:]), kwargs)
