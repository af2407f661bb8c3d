"""Output comparisons for ops whose results are not unique or whose accuracy follows conditioning.

`OUTPUT_CHECKS` maps an OpInfo `full_name` to `check(actual, expected, sample)`: `actual` is the xla
result read back to the CPU, `expected` eager CPU's, `sample` the CPU SampleInput. It raises
AssertionError saying what differs. Factorisations are compared through what is unique about them
(a reconstruction, singular values, |columns|); solvers through their residual, with bounds derived
from float32 rounding and the problem's size and conditioning, never fitted to one machine.

The bounds (u = 2^-24, float32's unit roundoff; n the matrix order; κ = ||A|| ||A^-1|| in the
2-norm, computed in float64 from the CPU sample):
  - Reconstructions (Q R, U S V^H, V Λ V^H against A) of backward-stable factorisations (Householder
    QR, SVD, symmetric eigensolvers) hold to ||A - reconstruction|| <= c n u ||A||, c a small constant
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §19.3 and Golub & Van Loan §8.1,
    §8.6). RECON_C = 8 covers the accumulated Householder steps and the final product in float32.
  - Singular and symmetric eigenvalues are perfectly conditioned: |σ_i - σ'_i| <= ||E|| (Weyl), so two
    backward-stable results differ by at most 2 c n u ||A||.
  - Vectors are unique up to sign (phase): each column is aligned with the CPU's before comparing. A
    column's perturbation is bounded by c n u ||A|| / gap, where gap is the distance from its value to
    the others (Davis-Kahan); columns of (near-)repeated values are not compared, only reconstructed.
  - Solutions x of A x = b from backward-stable solvers (LU with partial pivoting, QR) have relative
    forward error <= κ c n u (Higham Thm 7.2); the two results differ by at most twice that.
"""

from __future__ import annotations

from typing import Callable

import torch

U32 = 2.0 ** -24  # float32 unit roundoff
RECON_C = 8.0

OUTPUT_CHECKS: dict[str, Callable] = {}


def _register(*names):
    def wrap(fn):
        for name in names:
            OUTPUT_CHECKS[name] = fn
        return fn

    return wrap


def _unit(dtype) -> float:
    """Unit roundoff of a floating (or complex) dtype; float64 results are held to float64's."""
    real = torch.empty((), dtype=dtype).real.dtype if dtype.is_complex else dtype
    return U32 if real in (torch.float32, torch.complex64) else torch.finfo(real).eps / 2


def _norm2(a: torch.Tensor) -> torch.Tensor:
    """Spectral norm of each matrix, in float64, shape (...,)."""
    return torch.linalg.matrix_norm(a.to(torch.complex128 if a.is_complex() else torch.float64), ord=2)


def _fail(what: str, err, bound) -> None:
    raise AssertionError(f"{what}: error {float(err):.3g} exceeds the bound {float(bound):.3g}")


def _close(actual, expected, bound, what: str) -> None:
    """max |actual - expected| <= bound (bound broadcast against the batch of matrices)."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise AssertionError(f"{what}: shape/dtype {tuple(actual.shape)} {actual.dtype} != "
                             f"{tuple(expected.shape)} {expected.dtype}")
    if expected.numel() == 0:
        return
    wide = torch.complex128 if expected.is_complex() else torch.float64
    err = (actual.to(wide) - expected.to(wide)).abs()
    bound = torch.as_tensor(bound, dtype=torch.float64)
    while bound.dim() < err.dim():
        bound = bound.unsqueeze(-1)
    excess = err - bound
    if not bool((excess <= 0).all()):
        i = int(excess.argmax())
        _fail(what, err.flatten()[i], bound.expand_as(err).flatten()[i])


def _recon_bound(a: torch.Tensor) -> torch.Tensor:
    n = max(a.shape[-2:]) if a.dim() >= 2 else 1
    return RECON_C * n * _unit(a.dtype) * _norm2(a) + torch.finfo(torch.float32).tiny


def _align_columns(actual, expected):
    """`actual`'s columns times the unit scalars (signs, phases) that best match `expected`'s."""
    inner = (actual.conj() * expected).sum(-2, keepdim=True)
    phase = inner / inner.abs().clamp_min(torch.finfo(inner.real.dtype).tiny)
    return actual * phase, phase


def _gaps(values: torch.Tensor) -> torch.Tensor:
    """Distance from each (real) value to its nearest other value, along the last dim."""
    diff = (values.unsqueeze(-1) - values.unsqueeze(-2)).abs().double()
    eye = torch.eye(values.shape[-1], dtype=torch.bool)
    return diff.masked_fill(eye, float("inf")).amin(-1)


def _vectors(actual, expected, values, a, what: str) -> None:
    """Columns aligned in sign/phase, compared within the Davis-Kahan bound of their gap."""
    if expected.numel() == 0:
        _close(actual, expected, 0.0, what)
        return
    aligned, _ = _align_columns(actual, expected)
    scale = (_recon_bound(a)).unsqueeze(-1)
    bound = 2 * scale / _gaps(values)  # (..., k): one bound per column
    bound = torch.where(bound < 0.1, bound, torch.full_like(bound, float("inf")))  # near-repeated: skip
    _close(aligned, expected, bound.unsqueeze(-2) if aligned.dim() >= 2 else bound, what)


# ---- QR --------------------------------------------------------------------------------------------------
@_register("qr", "linalg.qr")
def _qr(actual, expected, sample) -> None:
    a = sample.input
    (q, r), (q_cpu, r_cpu) = tuple(actual), tuple(expected)
    bound = _recon_bound(a)
    if q_cpu.numel() and q.shape[-1] == r.shape[-2]:
        _close(q @ r, a, bound, "Q R vs A")
    # Q and R are unique up to the signs of R's diagonal (for full-rank A): align them to the CPU's.
    k = min(r.shape[-2:])
    d = torch.diagonal(r[..., :k, :k], dim1=-2, dim2=-1)
    d_cpu = torch.diagonal(r_cpu[..., :k, :k], dim1=-2, dim2=-1)
    flip = torch.where((d * d_cpu.conj()).real < 0, -1.0, 1.0).to(r.dtype)
    r_aligned = r.clone()
    r_aligned[..., :k, :] = r[..., :k, :] * flip.unsqueeze(-1)
    _close(r_aligned, r_cpu, bound.unsqueeze(-1) * 2, "R (signs aligned)")
    if q_cpu.numel():
        q_aligned = q.clone()
        q_aligned[..., :, :k] = q[..., :, :k] * flip.unsqueeze(-2)
        # Q's columns beyond rank(A) (mode='complete') are any orthonormal completion: skip them.
        _close(q_aligned[..., :, :k], q_cpu[..., :, :k], 2 * bound.unsqueeze(-1) / _min_sv(a), "Q (signs aligned)")


def _min_sv(a) -> torch.Tensor:
    """Smallest singular value per matrix (float64), the conditioning of Q's columns; shape (..., 1)."""
    s = torch.linalg.svdvals(a.to(torch.complex128 if a.is_complex() else torch.float64))
    return s[..., -1:].clamp_min(1e-300) if s.shape[-1] else torch.ones(s.shape[:-1] + (1,), dtype=s.dtype)


# ---- SVD ---------------------------------------------------------------------------------------------------
@_register("svd", "linalg.svd")
def _svd(actual, expected, sample) -> None:
    a = sample.input
    u, s, v = tuple(actual)
    u_cpu, s_cpu, v_cpu = tuple(expected)
    bound = _recon_bound(a)
    _close(s, s_cpu, 2 * bound.unsqueeze(-1), "singular values")
    torch_svd = v.shape[-1] == s.shape[-1] and v_cpu.shape == v.shape and _is_torch_svd(sample)
    vh, vh_cpu = (v.mH, v_cpu.mH) if torch_svd else (v, v_cpu)
    if u_cpu.numel() == 0 or not bool(u_cpu.abs().sum()):  # compute_uv=False: placeholders only
        _close(u, u_cpu, 0.0, "U placeholder")
        _close(v, v_cpu, 0.0, "V placeholder")
        return
    k = s.shape[-1]
    recon = (u[..., :, :k] * s.unsqueeze(-2).to(u.dtype)) @ vh[..., :k, :]
    _close(recon, a, bound, "U S Vh vs A")
    _vectors(u[..., :, :k], u_cpu[..., :, :k], s, a, "U (signs aligned)")
    _vectors(vh[..., :k, :].mH, vh_cpu[..., :k, :].mH, s, a, "V (signs aligned)")


def _is_torch_svd(sample) -> bool:
    """torch.svd returns V, torch.linalg.svd returns Vh: told apart by the sample's keywords."""
    return "some" in sample.kwargs or "compute_uv" in sample.kwargs or not sample.kwargs.get("full_matrices", True)


# ---- symmetric and general eigenproblems --------------------------------------------------------------------
@_register("linalg.eigh")
def _eigh(actual, expected, sample) -> None:
    a = sample.input
    (w, v), (w_cpu, v_cpu) = tuple(actual), tuple(expected)
    uplo = sample.kwargs.get("UPLO", sample.args[0] if sample.args else "L")
    full = _hermitian_from(a, uplo)
    bound = _recon_bound(full)
    _close(w, w_cpu, 2 * bound.unsqueeze(-1), "eigenvalues")
    _close((v * w.unsqueeze(-2).to(v.dtype)) @ v.mH, full, bound, "V diag(w) V^H vs A")
    _vectors(v, v_cpu, w, full, "eigenvectors (signs aligned)")


def _hermitian_from(a, uplo: str):
    """The Hermitian matrix defined by `a`'s UPLO triangle (the part eigh reads)."""
    tri = a.tril() if uplo.upper() == "L" else a.triu()
    diag = torch.diagonal(a, dim1=-2, dim2=-1).real.to(a.dtype)
    return tri + tri.mH - torch.diag_embed(diag)


def _match_eigenvalues(w, w_cpu):
    """For each CPU eigenvalue, the index of the nearest unused device eigenvalue (greedy)."""
    order = torch.empty(w.shape, dtype=torch.long)
    if w.numel() == 0:
        return order
    flat_w, flat_c, flat_o = w.reshape(-1, w.shape[-1]), w_cpu.reshape(-1, w.shape[-1]), order.view(-1, w.shape[-1])
    for b in range(flat_w.shape[0]):
        free = list(range(w.shape[-1]))
        for i in range(w.shape[-1]):
            j = min(free, key=lambda j: abs(complex(flat_w[b, j]) - complex(flat_c[b, i])))
            free.remove(j)
            flat_o[b, i] = j
    return order


@_register("linalg.eig", "linalg.eigvals")
def _eig(actual, expected, sample) -> None:
    a = sample.input
    pair = isinstance(expected, (tuple, list))
    w, w_cpu = (actual[0], expected[0]) if pair else (actual, expected)
    order = _match_eigenvalues(w, w_cpu)
    w_matched = torch.gather(w, -1, order)
    # Eigenvalues of a non-normal matrix move by up to κ(V) ||E||; the vectors' own conditioning is
    # what the residual below measures, so the values are held to the residual bound scaled by κ(V).
    bound = _recon_bound(a)
    if not pair:
        _close(w_matched, w_cpu, 2 * bound.unsqueeze(-1) * _eigvec_cond(a), "eigenvalues")
        return
    v = torch.gather(actual[1], -1, order.unsqueeze(-2).expand_as(actual[1]))
    v_cpu = expected[1]
    _close(w_matched, w_cpu, 2 * bound.unsqueeze(-1) * _eigvec_cond(a), "eigenvalues")
    # A V = V diag(w) for unit-norm columns, to the backward error of a stable eigensolver.
    residual = a.to(v.dtype) @ v - v * w_matched.unsqueeze(-2)
    _close(residual, torch.zeros_like(residual), bound, "A V - V diag(w)")
    norms = torch.linalg.vector_norm(v, dim=-2)
    _close(norms, torch.ones_like(norms), 4 * a.shape[-1] * _unit(a.dtype), "eigenvector norms")


def _eigvec_cond(a) -> torch.Tensor:
    """κ(V) of the CPU's eigenvector matrix (float64): how much rounding can move the eigenvalues."""
    _, v = torch.linalg.eig(a.to(torch.complex128 if a.is_complex() else torch.float64))
    return torch.linalg.cond(v).unsqueeze(-1).real


# ---- solvers ---------------------------------------------------------------------------------------------
def _solution_check(matrix_of: Callable):
    """Compares solutions normwise: ||x - x_cpu|| <= 2 κ(A) RECON_C n u ||x_cpu|| per right-hand side."""

    def check(actual, expected, sample) -> None:
        a = matrix_of(sample)
        x, x_cpu = (actual[0], expected[0]) if isinstance(expected, (tuple, list)) else (actual, expected)
        others = tuple(actual[1:]) if isinstance(expected, (tuple, list)) else ()
        for got, want in zip(others, tuple(expected[1:]) if others else ()):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)  # info, ranks, residuals
        wide = torch.complex128 if a.is_complex() else torch.float64
        kappa = torch.linalg.cond(a.to(wide))
        n = max(a.shape[-2:])
        scale = 2 * kappa * RECON_C * n * _unit(x_cpu.dtype)
        if x.shape != x_cpu.shape:
            raise AssertionError(f"solution shape {tuple(x.shape)} != {tuple(x_cpu.shape)}")
        vector = x_cpu.dim() == a.dim() - 1
        xs, cs = (x.unsqueeze(-1), x_cpu.unsqueeze(-1)) if vector else (x, x_cpu)
        err = torch.linalg.vector_norm((xs.to(wide) - cs.to(wide)), dim=-2)
        size = torch.linalg.vector_norm(cs.to(wide), dim=-2)
        while scale.dim() < err.dim():
            scale = scale.unsqueeze(-1)
        bound = scale * size + torch.finfo(torch.float32).tiny
        if not bool((err <= bound).all()):
            i = int((err - bound).argmax())
            _fail("solution (normwise, per right-hand side)", err.flatten()[i], bound.expand_as(err).flatten()[i])

    return check


OUTPUT_CHECKS["linalg.solve"] = _solution_check(lambda s: s.input)
OUTPUT_CHECKS["linalg.solve_ex"] = _solution_check(lambda s: s.input)
